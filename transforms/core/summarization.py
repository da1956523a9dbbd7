"""Summarization rows: one padded row per prompt/completion record, loss on the completion.

    ids    = P (+ [sep]) + C + [eos], padded with pad to msl + 1
    input  = ids[:-1], labels = ids[1:]
    mask   = 1 on the positions whose label is a completion token or the EOS

For example P = [p1 p2], C = [c1 c2], no sep, msl = 6:

    ids    p1 p2 c1 c2 E  P  P
    input  p1 p2 c1 c2 E  P
    labels p2 c1 c2 E  P  P
    mask   0  1  1  1  0  0

With a sep token the position of sep (whose label is c1) carries the first 1.
A record is kept when it fits (total = |P| + |C| + 1 (+1) <= msl + 1), a fix
of the reference, which dropped records of exactly msl + 1 tokens.

A longer record is dropped, or with `truncate` (Cerebras 2.10's
`truncate_to_msl`) cut to fit: the prompt first, down to one token
(keep_start keeps its head, keep_end its tail), then the completion's tail,
down to one token; a record that still does not fit is dropped. For
example |P| = 5, |C| = 3, no sep, msl = 6 (8 + 1 EOS = 9 tokens, 2 too many)
keeps P[:3] (keep_start) or P[2:] (keep_end) and all of C.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

import numpy as np

from transforms.core.reasons import SHORTER_THAN_MIN_SEQUENCE_LEN, TOO_LONG

__all__ = ["SummarizationConfig", "summarization_row", "summarization_batch", "cut_pair", "DROP_TOO_LONG",
           "DROP_TOO_SHORT"]

DROP_TOO_LONG, DROP_TOO_SHORT = TOO_LONG, SHORTER_THAN_MIN_SEQUENCE_LEN  # transforms.core.reasons


@dataclasses.dataclass(frozen=True)
class SummarizationConfig:
    max_seq_length: int
    eos_id: int
    pad_id: int
    sep_id: Optional[int] = None
    min_sequence_len: int = 10
    inverted_mask: bool = False
    truncate: Optional[str] = None  # None: a record too long is dropped; keep_start | keep_end: cut (see above)


def summarization_row(prompt: np.ndarray, completion: np.ndarray, cfg: SummarizationConfig
                      ) -> tuple[Optional[np.ndarray], Optional[str]]:
    """(row (3, msl) int32, None) for a kept record, (None, reason) for a dropped one."""
    msl = cfg.max_seq_length
    sep = [] if cfg.sep_id is None else [cfg.sep_id]
    total = len(prompt) + len(sep) + len(completion) + 1
    if total > msl + 1 and cfg.truncate is not None:
        prompt, completion = cut_pair(prompt, completion, total - (msl + 1), cfg.truncate)
        total = len(prompt) + len(sep) + len(completion) + 1
    if total > msl + 1:
        return None, DROP_TOO_LONG
    if total < cfg.min_sequence_len:
        return None, DROP_TOO_SHORT
    ids = np.full(msl + 1, cfg.pad_id, dtype=np.int32)
    ids[:total] = np.concatenate([prompt, sep, completion, [cfg.eos_id]]).astype(np.int32, copy=False)
    mask = np.zeros(msl, dtype=np.int32)
    first_completion = len(prompt) + len(sep)
    # Positions from the one predicting the first completion token to the one predicting EOS.
    mask[max(first_completion - 1, 0): total - 1] = 1
    if cfg.inverted_mask:
        mask ^= 1
    return np.stack([ids[:-1], mask, ids[1:]]), None


def cut_pair(prompt: np.ndarray, completion: np.ndarray, excess: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """`excess` tokens off the prompt (to one token; `mode` says which end stays), then off the completion's
    tail (to one token); what cannot be cut stays, and the caller drops the record. Summarization_VSL cuts
    with the same rule (`vsl.summarization_segments`), only its limit differs."""
    if mode not in ("keep_start", "keep_end"):
        raise ValueError(f"truncate: expected keep_start or keep_end, got {mode!r}")
    cut = min(excess, max(len(prompt) - 1, 0))
    if cut:
        prompt = prompt[:len(prompt) - cut] if mode == "keep_start" else prompt[cut:]
    rest = excess - cut
    if rest:
        completion = completion[:max(len(completion) - rest, 1)]
    return prompt, completion


def summarization_batch(batch, cfg: SummarizationConfig):
    """TokenBatch of (prompt ids, completion ids) -> RowBlock, drops counted by reason."""
    from transforms.core.records import RowBlock

    rows, dropped = [], Counter()
    for prompt, completion in batch.tokens:
        row, reason = summarization_row(prompt, completion, cfg)
        if row is None:
            dropped[reason] += 1
        else:
            rows.append(row)
    source = batch.group.source
    batch.stats.add("docs_used", len(rows), source)
    for reason, n in dropped.items():
        batch.stats.add(f"dropped.{reason}", n, source)
    out = np.stack(rows) if rows else np.zeros((0, 3, cfg.max_seq_length), dtype=np.int32)
    return RowBlock(batch.group, out, batch.stats)
