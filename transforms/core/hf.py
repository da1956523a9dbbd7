"""Rows in Hugging Face's causal-LM convention.

Our rows (Cerebras') are already shifted: position i is trained to predict
`labels[i]` where the mask says so. A Hugging Face causal LM shifts inside
the model instead: the loss pairs position i's output with `labels[i + 1]`,
and ignores -100. So the same training signal is

    hf_labels[0] = -100
    hf_labels[i + 1] = labels[i]   where position i is trained, else -100

with `input_ids` as stored. Example (msl 4, a document "a b c" + EOS, packed):

    input_ids  a  b  c  EOS        hf input_ids   a     b  c  EOS
    labels     b  c  EOS x         hf labels    -100    b  c  EOS
    mask       1  1  1   1         (position 3's target x is the one left out)

The last position's target has no place in a row of the same length: it is
the one pair a model trained this way does not see (one per row). With
`keep_last_target=True` the row grows by one position holding it instead.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from transforms.core.stats import real_lengths

__all__ = ["to_hf_causal_lm", "collate_causal_lm", "IGNORE_INDEX"]

IGNORE_INDEX = -100  # what Hugging Face's cross-entropy ignores


def to_hf_causal_lm(row: Mapping[str, np.ndarray], *, inverted_mask: bool = False, trailing_eos_input: bool = False,
                    keep_last_target: bool = False, untrained_tail_pad: Optional[int] = None) -> dict:
    """One row (a dict by feature name, as H5MapDataset gives) -> {"input_ids", "attention_mask", "labels"}
    (+ "position_ids" for VSL rows), int64 like Hugging Face's tensors.

    `attention_mask` is 1 on real positions (the prompt of a Summarization row too, although it is not trained)
    and 0 on padding; `inverted_mask`: the stored mask marks untrained positions with 1 (data_params.json's
    `dataset.inverted_mask`); `trailing_eos_input`: Summarization and FIM rows end their real input with an
    EOS that carries no loss (as `transforms.core.stats.real_lengths` says); `untrained_tail_pad`: the pad id of
    Chat rows written with Cerebras 2.10's loss span, whose real part may end with untrained labels.
    """
    if "input_ids" not in row:
        raise ValueError(f"not a causal-LM row (features {sorted(row)}): DPO rows have two sequences; convert "
                         "each side's input_ids / attention_mask / labels on its own")
    input_ids = np.asarray(row["input_ids"], dtype=np.int64)
    mask = np.asarray(row["attention_mask"])
    labels = np.asarray(row["labels"], dtype=np.int64)
    msl = len(input_ids)
    trained = mask == (0 if inverted_mask else 1)
    real = int(real_lengths(np.stack([input_ids, mask, labels])[None], inverted_mask, trailing_eos_input,
                            untrained_tail_pad)[0])
    size = msl + 1 if keep_last_target else msl
    hf_labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    targets = np.where(trained, labels, IGNORE_INDEX)
    hf_labels[1:] = targets[:size - 1]
    attention = (np.arange(size) < real).astype(np.int64)
    out = {"input_ids": input_ids, "attention_mask": attention, "labels": hf_labels}
    if keep_last_target:
        # The position after the row holds the last target as its input (what comes next in the text): the
        # model reads it only to predict beyond the row, which carries no loss.
        out["input_ids"] = np.append(input_ids, labels[-1])
        attention[-1] = attention[-2]  # attended when the row's last position is
    if "position_ids" in row:
        positions = np.asarray(row["position_ids"], dtype=np.int64)
        out["position_ids"] = np.append(positions, positions[-1] + 1) if keep_last_target else positions
    return out


def collate_causal_lm(examples: list) -> dict:
    """Examples of `to_hf_causal_lm` (all the same length, as rows are) -> a batch: int64 [batch, length] per key.

    What a Trainer-style collator returns, as numpy (`torch.as_tensor` makes tensors of them without a copy).
    """
    if not examples:
        raise ValueError("an empty batch")
    return {key: np.stack([e[key] for e in examples]) for key in examples[0]}
