"""Rows as they cross the shuffle: each one already the compressed HDF5 chunk it becomes.

A writer then only places bytes, and what moves between workers is smaller
than the rows' tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["EncodedRows", "runs_within"]


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

    def between(self, lo: int, hi: int) -> "EncodedRows":
        """Rows lo..hi (a view of their bytes)."""
        start, end = int(self.offsets[lo]), int(self.offsets[hi])
        return EncodedRows(self.data[start:end], self.offsets[lo:hi + 1] - start)

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


def runs_within(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive runs [lo, hi) of items whose sizes add up to at most `limit`, each as long as it can be; an
    item larger than `limit` is a run of its own.

    >>> runs_within(np.array([3, 3, 3, 9, 1]), 6), runs_within(np.array([], dtype=np.int64), 6)
    ([(0, 2), (2, 3), (3, 4), (4, 5)], [])
    """
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    runs, lo, before = [], 0, 0
    while lo < len(ends):
        hi = max(int(np.searchsorted(ends, before + limit, side="right")), lo + 1)
        runs.append((lo, hi))
        lo, before = hi, int(ends[hi - 1])
    return runs


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
