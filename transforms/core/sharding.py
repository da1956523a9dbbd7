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

__all__ = ["FileLayout", "group_offsets", "shard_name"]


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
