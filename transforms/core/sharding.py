"""Where each sequence goes: global positions, output files and their names.

Output order is the deterministic input order: packing groups sorted by
(file index, slice index), rows in group order. Global positions come from
per-group row counts alone, so a row's file is known without looking at any
other row, and every file but the last holds exactly `files_per_record` rows.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Iterable, Optional

import numpy as np

from transforms.core.seeds import derive_seed

__all__ = ["FileLayout", "Layout", "group_offsets", "key_ranges", "range_histogram", "row_keys", "shard_name"]


def shard_name(output_name: str, index: int) -> str:
    return f"{output_name}_{index:05d}.h5"


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """File i holds global positions [starts[i], starts[i+1])."""

    starts: tuple[int, ...]  # len = num_files + 1; starts[-1] = total rows

    @classmethod
    def create(cls, total: int, *, files_per_record: int, num_output_files: Optional[int] = None) -> "FileLayout":
        if total <= 0:
            return cls(starts=(0,))
        if num_output_files:
            n = min(num_output_files, total)  # never an empty file
            base, extra = divmod(total, n)
            sizes = [base + (1 if i < extra else 0) for i in range(n)]
        else:
            full, last = divmod(total, files_per_record)
            sizes = [files_per_record] * full + ([last] if last else [])
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + size)
        return cls(starts=tuple(starts))

    @property
    def num_files(self) -> int:
        return len(self.starts) - 1

    @property
    def total(self) -> int:
        return self.starts[-1]

    def size(self, index: int) -> int:
        return self.starts[index + 1] - self.starts[index]

    def file_of(self, position: int) -> int:
        return bisect.bisect_right(self.starts, position) - 1

    def split(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Cut positions [start, start+count) at file boundaries: (file, lo, hi) with lo/hi block-relative."""
        pieces = []
        pos, end = start, start + count
        while pos < end:
            f = self.file_of(pos)
            stop = min(end, self.starts[f + 1])
            pieces.append((f, pos - start, stop - start))
            pos = stop
        return pieces


def group_offsets(counts: Iterable[tuple[tuple, str, int]]) -> tuple[dict, int]:
    """(sort_key, group name, rows) for every group -> ({name: first global position}, total)."""
    offsets, pos = {}, 0
    for _, name, n in sorted(counts):
        offsets[name] = pos
        pos += n
    return offsets, pos


# ---------------------------------------------------------------- global shuffle
#
# Every row gets a 64-bit key from (shuffle_seed, its group's identity, its
# index in the group); the output order is the order of the keys. The top
# RANGE_BITS bits of a key name its key range. A histogram of rows per range
# (a side input) gives every range its first global position, so a row's file
# is known from its key alone, except in the few ranges that straddle a file
# boundary: those ranges are sent whole to every file they overlap, and each
# file sorts them and keeps its own positions. One GroupByKey, exact sizes.

RANGE_BITS = 20
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mixer: consecutive inputs give independent-looking outputs."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def row_keys(shuffle_seed: int, group_name: str, rows: np.ndarray) -> np.ndarray:
    """uint64 shuffle keys of rows (indices within the group)."""
    base = np.uint64(derive_seed(shuffle_seed, "shuffle", group_name))
    with np.errstate(over="ignore"):
        return _splitmix64(base + np.asarray(rows, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def key_ranges(keys: np.ndarray) -> np.ndarray:
    return (keys >> np.uint64(64 - RANGE_BITS)).astype(np.int64)


def range_histogram(keys: np.ndarray) -> dict:
    ranges, counts = np.unique(key_ranges(keys), return_counts=True)
    return dict(zip(ranges.tolist(), counts.tolist()))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where every row goes. Without shuffle: group offsets; with shuffle: range offsets."""

    files: FileLayout
    shuffle_seed: Optional[int] = None  # None: no shuffle
    group_offsets: Optional[dict] = None  # group name -> first global position
    range_ids: Optional[np.ndarray] = None  # sorted range ids present
    range_offsets: Optional[np.ndarray] = None  # first global position of each, aligned with range_ids
    range_counts: Optional[np.ndarray] = None

    @classmethod
    def create(cls, metas: list, *, shuffle_seed: Optional[int], files_per_record: int,
               num_output_files: Optional[int]) -> "Layout":
        """`metas`: (group sort key, group name, rows, range histogram or None) of every group."""
        if shuffle_seed is None:
            offsets, total = group_offsets((m[0], m[1], m[2]) for m in metas)
            return cls(FileLayout.create(total, files_per_record=files_per_record,
                                         num_output_files=num_output_files), group_offsets=offsets)
        hist: dict = {}
        for m in metas:
            for r, c in m[3].items():
                hist[r] = hist.get(r, 0) + c
        ids = np.array(sorted(hist), dtype=np.int64)
        counts = np.array([hist[r] for r in ids.tolist()], dtype=np.int64)
        offsets = np.zeros(len(ids), dtype=np.int64)
        if len(ids):
            np.cumsum(counts[:-1], out=offsets[1:])
        total = int(counts.sum())
        return cls(FileLayout.create(total, files_per_record=files_per_record, num_output_files=num_output_files),
                   shuffle_seed=shuffle_seed, range_ids=ids, range_offsets=offsets, range_counts=counts)

    def route(self, group_name: str, n_rows: int) -> list[tuple[int, np.ndarray]]:
        """(file index, row indices of the group that file must see) for a group of n rows."""
        if self.shuffle_seed is None:
            start = self.group_offsets[group_name]
            return [(f, np.arange(lo, hi)) for f, lo, hi in self.files.split(start, n_rows)]
        rows = np.arange(n_rows)
        r = np.searchsorted(self.range_ids, key_ranges(row_keys(self.shuffle_seed, group_name, rows)))
        starts = np.asarray(self.files.starts)
        first = np.searchsorted(starts, self.range_offsets[r], side="right") - 1
        last = np.searchsorted(starts, self.range_offsets[r] + self.range_counts[r] - 1, side="right") - 1
        files = sorted({f for a, b in np.unique(np.stack([first, last], axis=1), axis=0).tolist()
                        for f in range(a, b + 1)})
        return [(f, rows[(first <= f) & (last >= f)]) for f in files]

    def positions(self, group_names: list, sort_keys: list, rows: list) -> np.ndarray:
        """Global positions of candidate rows: (group name, group sort key, row index) per candidate.

        With shuffle, the candidates must hold every row of each key range
        they touch; positions are then ranks by (key, group, row) within the range.
        """
        if self.shuffle_seed is None:
            return np.array([self.group_offsets[g] + r for g, r in zip(group_names, rows)], dtype=np.int64)
        keys = np.empty(len(rows), dtype=np.uint64)
        by_group: dict = {}
        for i, g in enumerate(group_names):
            by_group.setdefault(g, []).append(i)
        for g, idx in by_group.items():
            keys[idx] = row_keys(self.shuffle_seed, g, np.array([rows[i] for i in idx]))
        gfile = np.array([k[0] for k in sort_keys], dtype=np.int64)
        gslice = np.array([k[1] for k in sort_keys], dtype=np.int64)
        order = np.lexsort((np.asarray(rows), gslice, gfile, keys))
        ranges = key_ranges(keys[order])
        first_of_range = np.searchsorted(ranges, ranges, side="left")
        rank = np.arange(len(order)) - first_of_range
        positions = np.empty(len(order), dtype=np.int64)
        positions[order] = self.range_offsets[np.searchsorted(self.range_ids, ranges)] + rank
        return positions
