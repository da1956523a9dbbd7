"""Where each sequence goes: global positions, output files and their names.

Output order is the deterministic input order: packing groups sorted by
(file index, slice index), rows in group order. Global positions come from
per-group row counts alone, so a row's file is known without looking at any
other row, and every file but the last holds exactly `files_per_record` rows.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Iterable, Optional

import numpy as np

from transforms.core.seeds import derive_seed

__all__ = ["FileLayout", "Layout", "row_keys", "group_seed", "range_bits", "shard_name"]


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


# ---------------------------------------------------------------- where every row goes
#
# Output order without shuffle is the input order: groups sorted by (file
# index, slice index), rows in group order; a row's position is its group's
# offset plus its index. With shuffle, every row gets a 64-bit key from
# (shuffle_seed, its group's identity, its index in the group) and the output
# order is the order of the keys, ties broken by group then row. The top bits
# of a key name its key range; the count of rows per range gives every range
# its first position, so a row's file is known from its key alone, except in
# the few ranges that straddle a file boundary: those are sent whole to every
# file they overlap, and each file sorts them and keeps its own positions.
#
# The layout is made from one (sort key, name, rows) triple per group: the
# rows' keys are a function of the group's name and the row index, so the
# range counts are recomputed where the layout is made, in O(rows) time and
# O(ranges) memory, instead of shipping anything per row. Its size is
# O(groups + ranges) whatever the row count (benchmarks/scale_sim.py).

MAX_RANGE_BITS = 20
ROWS_PER_RANGE = 1024  # at most, on average; fewer when files are small (see Layout.create)
_SLICE_BITS = 24  # a group's sort key (file, slice) packed into one int64
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_KEY_CHUNK_ROWS = 1 << 20  # rows whose keys are computed at once when counting ranges


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mixer: consecutive inputs give independent-looking outputs."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def group_seed(shuffle_seed: int, group_name: str) -> int:
    """The base of the shuffle keys of a group's rows."""
    return derive_seed(shuffle_seed, "shuffle", group_name)


def _keys(bases: np.ndarray, rows: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _splitmix64(np.asarray(bases, dtype=np.uint64) + np.asarray(rows, dtype=np.uint64) * _GOLDEN)


def row_keys(shuffle_seed: int, group_name: str, rows: np.ndarray) -> np.ndarray:
    """uint64 shuffle keys of rows (indices within the group)."""
    return _keys(np.uint64(group_seed(shuffle_seed, group_name)), rows)


def _pack_sort_key(file_index, slice_index) -> np.ndarray:
    slice_index = np.asarray(slice_index, dtype=np.int64)
    if np.any(slice_index >= 1 << _SLICE_BITS):
        raise ValueError(f"more than {1 << _SLICE_BITS} packing groups in one file")
    return (np.asarray(file_index, dtype=np.int64) << _SLICE_BITS) | slice_index


def range_bits(total: int, smallest_file: int) -> int:
    """Key-range bits: about ROWS_PER_RANGE rows per range, at most a quarter file, at most 2**MAX_RANGE_BITS ranges.

    A range that straddles file boundaries is sent whole to each file it
    overlaps, so a range much larger than a file would multiply the rows a
    writer sees; the bits never change where a row goes, only how it is routed.
    """
    per_range = max(1, min(ROWS_PER_RANGE, smallest_file // 4))
    return min(MAX_RANGE_BITS, max(0, math.ceil(math.log2(max(total / per_range, 1)))))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where every row goes, from per-group row counts alone. Size O(groups + key ranges), never O(rows).

    Groups are numbered in output order (by sort key); `route` and
    `positions` speak of rows as (group number, index in the group).
    """

    files: FileLayout
    group_keys: np.ndarray  # int64, sorted: packed (file index, slice index) of every group
    group_starts: np.ndarray  # int64 [groups + 1]: first position of each group without shuffle
    shuffle_seed: Optional[int] = None  # None: no shuffle
    group_seeds: Optional[np.ndarray] = None  # uint64 per group: the base of its rows' shuffle keys
    range_bits: int = 0
    range_starts: Optional[np.ndarray] = None  # int64 [2**range_bits + 1]: first position of each key range

    @classmethod
    def create(cls, metas: Iterable[tuple[tuple, str, int]], *, shuffle_seed: Optional[int], files_per_record: int,
               num_output_files: Optional[int]) -> "Layout":
        """`metas`: (group sort key, group name, rows) of every group, in any order."""
        metas = sorted(metas)
        keys = _pack_sort_key([m[0][0] for m in metas], [m[0][1] for m in metas])
        if len(keys) > 1 and np.any(keys[1:] == keys[:-1]):
            raise ValueError("two packing groups share a sort key")
        counts = np.array([m[2] for m in metas], dtype=np.int64)
        starts = np.zeros(len(metas) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        total = int(starts[-1])
        files = FileLayout.create(total, files_per_record=files_per_record, num_output_files=num_output_files)
        if shuffle_seed is None:
            return cls(files, keys, starts)
        seeds = np.array([group_seed(shuffle_seed, m[1]) for m in metas], dtype=np.uint64)
        smallest = min(files.size(i) for i in range(files.num_files)) if files.num_files else 1
        bits = range_bits(total, smallest)
        per_range = _count_ranges(seeds, counts, bits)
        range_starts = np.zeros(len(per_range) + 1, dtype=np.int64)
        np.cumsum(per_range, out=range_starts[1:])
        return cls(files, keys, starts, shuffle_seed, seeds, bits, range_starts)

    @property
    def num_groups(self) -> int:
        return len(self.group_keys)

    def group_of(self, sort_key: tuple) -> int:
        """The number of the group with this (file index, slice index)."""
        key = int(_pack_sort_key(sort_key[0], sort_key[1]))
        g = int(np.searchsorted(self.group_keys, key))
        if g >= len(self.group_keys) or self.group_keys[g] != key:
            raise KeyError(f"no packing group {sort_key} in the layout")
        return g

    def group_sort_key(self, group: int) -> tuple[int, int]:
        key = int(self.group_keys[group])
        return key >> _SLICE_BITS, key & ((1 << _SLICE_BITS) - 1)

    def _ranges(self, keys: np.ndarray) -> np.ndarray:
        return (keys >> np.uint64(64 - self.range_bits)).astype(np.int64) if self.range_bits else \
            np.zeros(len(keys), dtype=np.int64)

    def route(self, group: int) -> list[tuple[int, np.ndarray]]:
        """(file index, row indices of the group that file must see) for every file the group reaches."""
        n_rows = int(self.group_starts[group + 1] - self.group_starts[group])
        if self.shuffle_seed is None:
            start = int(self.group_starts[group])
            return [(f, np.arange(lo, hi)) for f, lo, hi in self.files.split(start, n_rows)]
        r = self._ranges(_keys(self.group_seeds[group], np.arange(n_rows)))
        starts = np.asarray(self.files.starts)
        first = np.searchsorted(starts, self.range_starts[r], side="right") - 1
        last = np.searchsorted(starts, self.range_starts[r + 1] - 1, side="right") - 1
        # One (file, row) pair per file a row's range overlaps (nearly always one), sorted by file:
        # O(rows log rows), where a pass over the rows per file would be O(rows x files).
        reach = last - first + 1
        rows = np.repeat(np.arange(n_rows), reach)
        files = np.repeat(first, reach) + np.arange(len(rows)) - np.repeat(np.cumsum(reach) - reach, reach)
        order = np.argsort(files, kind="stable")
        files, rows = files[order], rows[order]
        cuts = np.flatnonzero(np.diff(files)) + 1
        return [(int(f[0]), r) for f, r in zip(np.split(files, cuts), np.split(rows, cuts)) if len(f)]

    def positions(self, groups: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Global positions of candidate rows, given as (group number, row index) arrays.

        With shuffle, the candidates must hold every row of each key range
        they touch; positions are then ranks by (key, group, row) within the range.
        """
        groups = np.asarray(groups, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if self.shuffle_seed is None:
            return self.group_starts[groups] + rows
        keys = _keys(self.group_seeds[groups], rows)
        order = np.lexsort((rows, groups, keys))
        ranges = self._ranges(keys[order])
        first_of_range = np.searchsorted(ranges, ranges, side="left")
        positions = np.empty(len(order), dtype=np.int64)
        positions[order] = self.range_starts[ranges] + np.arange(len(order)) - first_of_range
        return positions


def _count_ranges(seeds: np.ndarray, counts: np.ndarray, bits: int) -> np.ndarray:
    """Rows per key range, computed from every group's rows' keys a chunk of rows at a time."""
    per_range = np.zeros(1 << bits, dtype=np.int64)
    g, n = 0, len(counts)
    while g < n:
        # Whole groups up to about _KEY_CHUNK_ROWS rows (at least one group).
        end = g + 1
        rows_in_chunk = int(counts[g])
        while end < n and rows_in_chunk + counts[end] <= _KEY_CHUNK_ROWS:
            rows_in_chunk += int(counts[end])
            end += 1
        chunk = counts[g:end]
        bases = np.repeat(seeds[g:end], chunk)
        index = np.arange(rows_in_chunk, dtype=np.int64) - np.repeat(np.cumsum(chunk) - chunk, chunk)
        keys = _keys(bases, index)
        if bits:
            per_range += np.bincount((keys >> np.uint64(64 - bits)).astype(np.int64), minlength=1 << bits)
        else:
            per_range[0] += rows_in_chunk
        g = end
    return per_range
