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

from transforms.core.reasons import (CUT_BY_SHORT_SEQ_PROB, NO_TOKEN_TO_PREDICT, REMAINDER_NOT_WRITTEN,
                                     SHORTER_THAN_MIN_SEQUENCE_LEN)

__all__ = ["PackConfig", "PackResult", "pack_batch", "pack_documents", "rows_from_windows", "window_to_row"]

# Why a document produced no row (transforms.core.reasons says what each means).
DROP_MIN_LEN, DROP_REMAINDER = SHORTER_THAN_MIN_SEQUENCE_LEN, REMAINDER_NOT_WRITTEN
DROP_SHORT_SEQ, DROP_SINGLE_TOKEN = CUT_BY_SHORT_SEQ_PROB, NO_TOKEN_TO_PREDICT


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
    """Rows as windows over the group's token stream: row i is tokens[starts[i] : starts[i] + lengths[i]]."""

    tokens: np.ndarray  # int32: the group's documents, concatenated
    starts: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n]: window lengths, at most msl + 1
    docs_used: int
    dropped: Counter  # reason -> documents
    config: PackConfig

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def rows(self) -> np.ndarray:
        """int32 [n, 3, msl]: input_ids, attention mask, labels."""
        return self.rows_between(0, len(self))

    def rows_between(self, lo: int, hi: int) -> np.ndarray:
        """Rows lo..hi as int32 [hi - lo, 3, msl], so a group's rows can be built a batch at a time."""
        cfg = self.config
        msl = cfg.max_seq_length
        starts, lengths = self.starts[lo:hi], self.lengths[lo:hi]
        rows = np.empty((len(starts), 3, msl), dtype=np.int32)
        if not len(starts):
            return rows
        full = lengths == msl + 1
        if full.all():
            # Every row but a group's last is a whole window: two block copies instead of a gather per position
            # (a tenth of the time; this runs on every row of a job).
            windows = np.lib.stride_tricks.sliding_window_view(self.tokens, msl + 1)
            if bool((np.diff(starts) == msl).all()):
                # Consecutive windows of one stream (every row of a packed group): a view, nothing gathered.
                windows = windows[int(starts[0])::msl][:len(starts)]
            else:
                windows = windows[starts]
            rows[:, 0, :] = windows[:, :msl]
            rows[:, 2, :] = windows[:, 1:]
            rows[:, 1, :] = 0 if cfg.inverted_mask else 1
            return rows
        pos = np.arange(msl)
        real = pos[None, :] < (lengths - 1)[:, None]  # input j and label j are w[j], w[j + 1]
        index = np.minimum(starts[:, None] + pos[None, :], len(self.tokens) - 2)
        rows[:, 0, :] = np.where(real, self.tokens[index], cfg.pad_id)
        rows[:, 2, :] = np.where(real, self.tokens[index + 1], cfg.pad_id)
        rows[:, 1, :] = real != cfg.inverted_mask
        return rows


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


def _pack_stream(stream: np.ndarray, base: int, cfg: PackConfig, rng: Optional[random.Random],
                 starts: list, lengths: list) -> np.ndarray:
    """Append the windows of one stream (as base + start, length) and return, per token,
    0 if it is in a written row, else a drop code."""
    msl = cfg.max_seq_length
    fate = np.full(len(stream), _UNASSIGNED, dtype=np.int8)
    spans = _stream_windows(len(stream), msl)
    has_remainder = bool(spans) and spans[-1][1] - spans[-1][0] < msl + 1
    if has_remainder and cfg.pack_sequences and not cfg.write_remainder:
        _mark_dropped(fate, *spans.pop(), 2)

    n_full = sum(1 for s, e in spans if e - s == msl + 1)  # full windows come first
    if cfg.short_seq_prob == 0.0 and n_full and msl + 1 >= cfg.min_sequence_len:
        starts.append(base + np.arange(n_full, dtype=np.int64) * msl)
        lengths.append(np.full(n_full, msl + 1, dtype=np.int64))
        fate[: n_full * msl + 1] = 0
        spans = spans[n_full:]
    kept_s, kept_l = [], []
    for s, e in spans:
        if e - s < cfg.min_sequence_len:
            _mark_dropped(fate, s, e, 1)
            continue
        length = e - s
        if rng is not None and cfg.short_seq_prob > 0.0 and rng.random() < cfg.short_seq_prob:
            cut = rng.randint(2, msl - 1)
            if cut < length:
                _mark_dropped(fate, s + cut, e, 3)
                length = cut
        fate[s:s + length] = 0
        kept_s.append(base + s)
        kept_l.append(length)
    if kept_s:
        starts.append(np.array(kept_s, dtype=np.int64))
        lengths.append(np.array(kept_l, dtype=np.int64))
    return fate


_FATE_REASON = {1: DROP_MIN_LEN, 2: DROP_REMAINDER, 3: DROP_SHORT_SEQ, _UNASSIGNED: DROP_SINGLE_TOKEN}


def pack_documents(docs: Sequence[np.ndarray], cfg: PackConfig, rng: Optional[random.Random] = None,
                   flat: Optional[np.ndarray] = None) -> PackResult:
    """Rows of one packing group; `docs` are token arrays that already end in EOS.

    `flat`, if given, is `docs` back to back (int32), used as the stream without a copy.

    `rng` feeds short_seq_prob; it must be seeded from the group's identity so
    the result does not depend on the runner. A document counts as used if at
    least one of its tokens is in a written row; otherwise it is dropped with
    the reason of the window that held its first token.
    """
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    if np.any(lengths == 0):
        raise ValueError("every document must hold at least its EOS token")
    if flat is not None:
        if flat.dtype != np.int32 or len(flat) != int(lengths.sum()):
            raise ValueError("flat must be the documents' int32 tokens back to back")
        tokens = flat
    else:
        tokens = np.concatenate(docs).astype(np.int32, copy=False) if len(docs) else np.zeros(0, np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    starts: list = []
    spans: list = []
    if cfg.pack_sequences:
        fate = _pack_stream(tokens, 0, cfg, rng, starts, spans)
    else:
        fate = np.concatenate([_pack_stream(tokens[offsets[i]:offsets[i + 1]], int(offsets[i]), cfg, rng,
                                            starts, spans) for i in range(len(docs))]) \
            if len(docs) else np.zeros(0, np.int8)
    dropped: Counter = Counter()
    used = 0
    if len(docs):
        # Per document: is any of its tokens written? (On bools: a count per token would be 8 bytes a token.)
        kept_any = np.logical_or.reduceat(fate == 0, offsets[:-1])
        for i in np.flatnonzero(~kept_any):
            dropped[_FATE_REASON[int(fate[offsets[i]])]] += 1
        used = int(np.count_nonzero(kept_any))
    empty = np.zeros(0, np.int64)
    return PackResult(tokens=tokens, starts=np.concatenate(starts) if starts else empty,
                      lengths=np.concatenate(spans) if spans else empty, docs_used=used, dropped=dropped,
                      config=cfg)


def pack_batch(batch, config: PackConfig, seed: int, windows_only: bool = False):
    """TokenBatch -> RowBlock (full rows), or WindowBlock (rows left to be built) with `windows_only`."""
    from transforms.core.records import RowBlock, WindowBlock
    from transforms.core.seeds import derive_seed

    # The generator is seeded by the group's identity, never shared: the draws
    # of one group cannot depend on which worker packed which other group.
    rng = random.Random(derive_seed(seed, "short_seq_prob", batch.group.name))
    result = pack_documents([t[0] for t in batch.tokens], config, rng, flat=batch.flat)
    source = batch.group.source
    batch.stats.add("docs_used", result.docs_used, source)
    for reason, n in result.dropped.items():
        batch.stats.add(f"dropped.{reason}", n, source)
    if windows_only:
        return WindowBlock(batch.group, result, batch.stats)
    return RowBlock(batch.group, result.rows, batch.stats)
