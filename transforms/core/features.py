"""The features of a row, by mode: what `data[:, i, :]` holds, and what data_params.json lists as `features`.

One list per row layout, used by the writer, the statistics, `verify`,
`inspect` and the readers alike, so a new mode is its row builder plus one
of these lists. The names are the ones Cerebras' dataloaders read (2.10 takes
them from data_params.json's `features`; 2.1.1 fixes them with `use_vsl`).
"""

from __future__ import annotations

__all__ = ["LM_FEATURES", "VSL_FEATURES", "DPO_FEATURES", "KEY_PADDING_FEATURES", "INPUT_IDS", "ATTENTION_MASK",
           "LABELS", "ATTENTION_SPAN", "POSITION_IDS", "KEY_PADDING_MASK"]

INPUT_IDS, ATTENTION_MASK, LABELS = 0, 1, 2  # the same three first rows in every layout
ATTENTION_SPAN, POSITION_IDS = 3, 4  # VSL: per document, positions left to attend to / positions from its start

LM_FEATURES = ("input_ids", "attention_mask", "labels")
VSL_FEATURES = LM_FEATURES + ("attention_span", "position_ids")
# DPO: the chosen and the rejected conversation, each as the three LM features (Cerebras 2.10's order).
# Chat rows of a read hook whose regions may mask attention: a fourth row, 1 where an input position must not be
# attended (a masked region's tokens, and padding), as Cerebras 2.10's multimodal rows write `key_padding_mask`.
KEY_PADDING_MASK = 3
KEY_PADDING_FEATURES = LM_FEATURES + ("key_padding_mask",)
DPO_FEATURES = tuple(f"{side}_{name}" for side in ("chosen", "rejected") for name in LM_FEATURES)
