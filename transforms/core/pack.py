"""LMData row formation: the reference's window formula, per packing group.

A packing group's documents (each already ending in EOS) form one token
stream T. With packing, row k is

    input_ids = T[k*msl : (k+1)*msl]
    labels    = T[k*msl+1 : (k+1)*msl+1]

so consecutive rows share one token (the last label of row k is the first
input of row k+1). Without packing, every document is its own stream.
For example, msl=4 and T = [a b c d e f g h i]:

    row 0: input a b c d, labels b c d e
    row 1: input e f g h, labels f g h i
    remainder window [i] has one token: nothing left to predict, no row.

With T = [a b c d e f g] the remainder window is [e f g]; `write_remainder`
turns it into input e f P P, labels f g P P, mask 1 1 0 0 (P = pad).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Optional, Sequence

import numpy as np

__all__ = ["PackConfig", "PackResult", "pack_batch", "pack_documents", "rows_from_windows", "window_to_row"]

# Why a document produced no row.
DROP_MIN_LEN = "shorter_than_min_sequence_len"
DROP_REMAINDER = "remainder_not_written"
DROP_SHORT_SEQ = "cut_by_short_seq_prob"
DROP_SINGLE_TOKEN = "no_token_to_predict"


@dataclasses.dataclass(frozen=True)
class PackConfig:
    max_seq_length: int
    pad_id: int
    pack_sequences: bool = True
    min_sequence_len: int = 10
    short_seq_prob: float = 0.0
    inverted_mask: bool = False
    write_remainder: bool = True


@dataclasses.dataclass
class PackResult:
    rows: np.ndarray  # int32 [n, 3, msl]
    docs_used: int
    dropped: Counter  # reason -> documents


def window_to_row(window: np.ndarray, msl: int, pad_id: int, inverted_mask: bool = False) -> np.ndarray:
    """A window of L <= msl+1 tokens -> a (3, msl) row: input, mask, labels."""
    return rows_from_windows([window], msl, pad_id, inverted_mask)[0]


def rows_from_windows(windows: Sequence[np.ndarray], msl: int, pad_id: int,
                      inverted_mask: bool = False) -> np.ndarray:
    rows = np.empty((len(windows), 3, msl), dtype=np.int32)
    rows[:, 0, :] = pad_id
    rows[:, 1, :] = 0
    rows[:, 2, :] = pad_id
    for i, w in enumerate(windows):
        n = len(w) - 1
        rows[i, 0, :n] = w[:-1]
        rows[i, 1, :n] = 1
        rows[i, 2, :n] = w[1:]
    if inverted_mask:
        rows[:, 1, :] ^= 1
    return rows


def _full_rows(stream: np.ndarray, n_full: int, msl: int, inverted_mask: bool) -> np.ndarray:
    """The n_full full windows of a stream as rows, without a Python loop."""
    windows = np.lib.stride_tricks.sliding_window_view(stream, msl + 1)[: n_full * msl : msl]
    rows = np.empty((n_full, 3, msl), dtype=np.int32)
    rows[:, 0, :] = windows[:, :-1]
    rows[:, 1, :] = 0 if inverted_mask else 1
    rows[:, 2, :] = windows[:, 1:]
    return rows


def _stream_windows(length: int, msl: int) -> list[tuple[int, int]]:
    """(start, end) of every window of a stream of `length` tokens that has a label."""
    spans = []
    start = 0
    while start < length:
        end = min(start + msl + 1, length)
        if end - start >= 2:
            spans.append((start, end))
        start += msl
    return spans


_UNASSIGNED = 4  # a token in no window with a label: a one-token stream


def _mark_dropped(fate: np.ndarray, start: int, end: int, code: int) -> None:
    # A token written by any row stays written; overlapping windows share a token.
    span = fate[start:end]
    span[span != 0] = code


def _pack_stream(stream: np.ndarray, cfg: PackConfig, rng: Optional[random.Random]) -> tuple[list, np.ndarray]:
    """Rows of one stream, and per token 0 if it is in a written row, else a drop code."""
    msl = cfg.max_seq_length
    fate = np.full(len(stream), _UNASSIGNED, dtype=np.int8)
    parts: list[np.ndarray] = []
    spans = _stream_windows(len(stream), msl)
    has_remainder = bool(spans) and spans[-1][1] - spans[-1][0] < msl + 1
    if has_remainder and cfg.pack_sequences and not cfg.write_remainder:
        _mark_dropped(fate, *spans.pop(), 2)

    n_full = sum(1 for s, e in spans if e - s == msl + 1)  # full windows come first
    if cfg.short_seq_prob == 0.0 and n_full and msl + 1 >= cfg.min_sequence_len:
        parts.append(_full_rows(stream, n_full, msl, cfg.inverted_mask))
        fate[: n_full * msl + 1] = 0
        spans = spans[n_full:]
    windows = []
    for s, e in spans:
        if e - s < cfg.min_sequence_len:
            _mark_dropped(fate, s, e, 1)
            continue
        w = stream[s:e]
        if rng is not None and cfg.short_seq_prob > 0.0 and rng.random() < cfg.short_seq_prob:
            cut = rng.randint(2, msl - 1)
            if cut < len(w):
                _mark_dropped(fate, s + cut, e, 3)
                w = w[:cut]
        fate[s:s + len(w)] = 0
        windows.append(w)
    if windows:
        parts.append(rows_from_windows(windows, msl, cfg.pad_id, cfg.inverted_mask))
    return parts, fate


_FATE_REASON = {1: DROP_MIN_LEN, 2: DROP_REMAINDER, 3: DROP_SHORT_SEQ, _UNASSIGNED: DROP_SINGLE_TOKEN}


def pack_documents(docs: Sequence[np.ndarray], cfg: PackConfig, rng: Optional[random.Random] = None) -> PackResult:
    """Rows of one packing group; `docs` are token arrays that already end in EOS.

    `rng` feeds short_seq_prob; it must be seeded from the group's identity so
    the result does not depend on the runner. A document counts as used if at
    least one of its tokens is in a written row; otherwise it is dropped with
    the reason of the window that held its first token.
    """
    msl = cfg.max_seq_length
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    if cfg.pack_sequences:
        stream = np.concatenate(docs).astype(np.int32, copy=False) if len(docs) else np.zeros(0, np.int32)
        parts, fate = _pack_stream(stream, cfg, rng)
    else:
        parts, fates = [], []
        for d in docs:
            p, f = _pack_stream(np.asarray(d, dtype=np.int32), cfg, rng)
            parts.extend(p)
            fates.append(f)
        fate = np.concatenate(fates) if fates else np.zeros(0, np.int8)
    rows = np.concatenate(parts) if parts else np.zeros((0, 3, msl), dtype=np.int32)

    dropped: Counter = Counter()
    used = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if len(docs):
        if np.any(lengths == 0):
            raise ValueError("every document must hold at least its EOS token")
        kept_per_doc = np.add.reduceat((fate == 0).astype(np.int64), offsets[:-1])
        for i in np.flatnonzero(kept_per_doc == 0):
            dropped[_FATE_REASON[int(fate[offsets[i]])]] += 1
        used = int(np.count_nonzero(kept_per_doc))
    return PackResult(rows=rows, docs_used=used, dropped=dropped)


def pack_batch(batch, config: PackConfig, seed: int):
    """TokenBatch -> RowBlock for LMData, with the group's drop counts in its stats."""
    from transforms.core.records import RowBlock
    from transforms.core.seeds import derive_seed

    # The generator is seeded by the group's identity, never shared: the draws
    # of one group cannot depend on which worker packed which other group.
    rng = random.Random(derive_seed(seed, "short_seq_prob", batch.group.name))
    result = pack_documents([t[0] for t in batch.tokens], config, rng)
    source = batch.group.source
    batch.stats.add("docs_used", result.docs_used, source)
    for reason, n in result.dropped.items():
        batch.stats.add(f"dropped.{reason}", n, source)
    batch.stats.add("rows", len(result.rows), source)
    return RowBlock(batch.group, result.rows, batch.stats)
