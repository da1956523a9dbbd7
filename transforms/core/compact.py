"""Rows in the compact form that crosses the shuffle, and back.

Every row of every mode is a *shift row*: for its `real` non-pad input
positions, input_ids[:real] = w[:-1] and labels[:real] = w[1:] for a window w
of real + 1 tokens; every later position is padding in both. Its mask is one
contiguous run of loss-valid positions [a, b). So a row is fully described by
w and (a, b): for msl 2048 that is ~2 bytes per token (uint16 ids) instead
of 12, and the sink rebuilds mask and labels.

    row  input  t0 t1 t2 P      w = t0 t1 t2 t3, loss [0, 3)
         mask   1  1  1  0
         labels t1 t2 t3 P
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transforms.core.stats import real_lengths

__all__ = ["CompactRows", "compact_block", "compact_rows", "concat_compact", "expand_rows", "token_dtype"]


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
        starts, ends = self.offsets[index], self.offsets[index + 1]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        if len(index) and np.all(index[1:] == index[:-1] + 1):
            tokens = self.tokens[starts[0]:ends[-1]]  # a contiguous run: a view, no copy
        elif len(index):
            # Slices, not a gather index: an index as long as the tokens would cost 8 bytes per token.
            tokens = np.concatenate([self.tokens[a:b] for a, b in zip(starts.tolist(), ends.tolist())])
        else:
            tokens = self.tokens[:0]
        return CompactRows(tokens, offsets, self.loss[index])


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def compact_rows(rows: np.ndarray, *, inverted_mask: bool, trailing_eos_input: bool, pad_id: int,
                 dtype: np.dtype) -> CompactRows:
    """[n, 3, msl] rows -> CompactRows; raises if a row is not a shift row with one loss run.

    The check rebuilds the rows and compares: cheap next to tokenizing, and it
    turns any future row type that breaks the assumption into a loud error.
    """
    n, _, msl = rows.shape
    real = real_lengths(rows, inverted_mask, trailing_eos_input).astype(np.int64)
    x = np.concatenate([rows[:, 0, :1], rows[:, 2, :]], axis=1)  # input[i] == labels[i-1]
    keep = np.arange(msl + 1)[None, :] < (real + 1)[:, None]
    tokens = x[keep].astype(dtype)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(real + 1, out=offsets[1:])
    loss_mask = rows[:, 1, :] == (0 if inverted_mask else 1)
    a = np.argmax(loss_mask, axis=1)
    b = msl - np.argmax(loss_mask[:, ::-1], axis=1)
    out = CompactRows(tokens, offsets, np.stack([a, b], axis=1).astype(np.int32))
    if not np.array_equal(expand_rows(out, msl=msl, pad_id=pad_id, inverted_mask=inverted_mask), rows):
        raise ValueError("rows are not shift rows with one contiguous loss run; cannot compact them")
    return out


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


def concat_compact(parts: list) -> CompactRows:
    if not parts:
        return CompactRows(np.zeros(0, np.uint16), np.zeros(1, np.int64), np.zeros((0, 2), np.int32))
    tokens = np.concatenate([p.tokens for p in parts])
    lengths = np.concatenate([np.diff(p.offsets) for p in parts])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return CompactRows(tokens, offsets, np.concatenate([p.loss for p in parts]))


def compact_block(block, *, inverted_mask: bool, trailing_eos_input: bool, pad_id: int, dtype: np.dtype):
    """RowBlock -> CompactBlock with inline compact rows."""
    from transforms.core.records import CompactBlock

    rows = compact_rows(block.rows, inverted_mask=inverted_mask, trailing_eos_input=trailing_eos_input,
                        pad_id=pad_id, dtype=dtype)
    return CompactBlock(block.group, len(rows), rows=rows, stats=block.stats)
