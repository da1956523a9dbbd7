"""Rows between packing and the sink: compact (real tokens + loss run), then encoded (one compressed chunk each).

Every row of every mode is a *shift row*: for its `real` non-pad input
positions, input_ids[:real] = w[:-1] and labels[:real] = w[1:] for a window w
of real + 1 tokens; every later position is padding in both. Its mask is one
contiguous run of loss-valid positions [a, b). So a row is fully described by
w and (a, b): for msl 2048 that is ~2 bytes per token (uint16 ids) instead
of 12. LMData packs straight into this form; `expand_rows` builds full rows.

    row  input  t0 t1 t2 P      w = t0 t1 t2 t3, loss [0, 3)
         mask   1  1  1  0
         labels t1 t2 t3 P

What crosses the shuffle is smaller still: `EncodedRows`, each row already
compressed as the HDF5 chunk it becomes, so the sink only places bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["CompactRows", "EncodedRows", "expand_rows", "token_dtype"]


@dataclasses.dataclass
class CompactRows:
    tokens: np.ndarray  # flat real tokens of every row, uint16 when the vocabulary fits
    offsets: np.ndarray  # int64 [n + 1]: row i is tokens[offsets[i]:offsets[i+1]]
    loss: np.ndarray  # int32 [n, 2]: loss-valid input positions [a, b)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, index: np.ndarray) -> "CompactRows":
        """Rows `index`, in that order."""
        index = np.asarray(index, dtype=np.int64)
        tokens, offsets = _take_ragged(self.tokens, self.offsets, index)
        return CompactRows(tokens, offsets, self.loss[index])


@dataclasses.dataclass
class EncodedRows:
    """Rows as the sink stores them: row i is the compressed chunk data[offsets[i]:offsets[i+1]]."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64 [n + 1]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, index: np.ndarray) -> "EncodedRows":
        """Rows `index`, in that order."""
        return EncodedRows(*_take_ragged(self.data, self.offsets, np.asarray(index, dtype=np.int64)))

    def chunk(self, i: int) -> np.ndarray:
        return self.data[self.offsets[i]:self.offsets[i + 1]]

    @staticmethod
    def concat(parts: list) -> "EncodedRows":
        if not parts:
            return EncodedRows(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        lengths = np.concatenate([np.diff(p.offsets) for p in parts])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return EncodedRows(np.concatenate([p.data for p in parts]), offsets)

    @staticmethod
    def from_chunks(chunks: list) -> "EncodedRows":
        offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in chunks], out=offsets[1:])
        return EncodedRows(np.frombuffer(b"".join(chunks), dtype=np.uint8), offsets)


def _take_ragged(values: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = offsets[index], offsets[index + 1]
    out = np.zeros(len(index) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=out[1:])
    if len(index) and np.all(index[1:] == index[:-1] + 1):
        return values[starts[0]:ends[-1]], out  # a contiguous run: a view, no copy
    if len(index):
        # Slices, not a gather index: an index as long as the values would cost 8 bytes per value.
        return np.concatenate([values[a:b] for a, b in zip(starts.tolist(), ends.tolist())]), out
    return values[:0], out


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def expand_rows(c: CompactRows, *, msl: int, pad_id: int, inverted_mask: bool) -> np.ndarray:
    """CompactRows -> int32 [n, 3, msl]."""
    n = len(c)
    lengths = np.diff(c.offsets)
    x = np.zeros((n, msl + 1), dtype=np.int32)
    x[np.arange(msl + 1)[None, :] < lengths[:, None]] = c.tokens
    pos = np.arange(msl)[None, :]
    padding = pos >= (lengths - 1)[:, None]
    rows = np.empty((n, 3, msl), dtype=np.int32)
    rows[:, 0, :] = np.where(padding, pad_id, x[:, :msl])
    rows[:, 2, :] = np.where(padding, pad_id, x[:, 1:])
    mask = (pos >= c.loss[:, :1]) & (pos < c.loss[:, 1:])
    rows[:, 1, :] = mask != inverted_mask
    return rows
