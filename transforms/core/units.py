"""Work units: how a large input file is shared out among workers without changing the output.

A file's packing groups are fixed by its content and `group_bytes` alone:

- .jsonl (and a .txt read a line a record): group k holds the lines whose first
  byte lies in the k-th window of `group_bytes` bytes of the file (a file of at
  most `group_bytes` is one group);
- .parquet: group k holds the k-th run of R consecutive rows, R chosen from the
  file's footer so that a group holds about `group_bytes` of column data (a
  file whose text columns hold at most `group_bytes` is one group);
- everything else is read in order and cut into groups of `group_bytes` of text.

A work unit is a run of consecutive groups of one file, read by one worker.
How many groups a unit takes changes only who reads them, never what they hold.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

from transforms.core.records import BYTES, ROWS, WHOLE, InputFile, WorkUnit

__all__ = ["whole_file", "jsonl_units", "parquet_units", "parquet_group_rows", "line_bases"]


def whole_file(file: InputFile, size: Optional[int] = None, fan_out_bytes: Optional[int] = None) -> list[WorkUnit]:
    """A file read in order by one worker; one of more than `fan_out_bytes` hands its groups on as it reads.

    Whether a file is fanned out changes who tokenizes its groups, never what they hold.
    """
    fan_out = fan_out_bytes is not None and size is not None and size > fan_out_bytes
    return [WorkUnit(file, WHOLE, fan_out=fan_out)]


def _units(file: InputFile, kind: str, num_groups: int, group_size: int, total: int,
           unit_groups: int) -> list[WorkUnit]:
    if unit_groups < 1:
        raise ValueError(f"unit_groups must be positive, got {unit_groups}")
    return [WorkUnit(file, kind, first, min(first + unit_groups, num_groups), num_groups, group_size, total)
            for first in range(0, num_groups, unit_groups)]


def jsonl_units(file: InputFile, size: int, group_bytes: int, unit_groups: int = 1) -> list[WorkUnit]:
    """Units of a .jsonl file of `size` bytes: groups are windows of `group_bytes` bytes.

    >>> [(u.first_group, u.end_group) for u in jsonl_units(InputFile(0, "a", "a"), 250, 100)]
    [(0, 1), (1, 2), (2, 3)]
    """
    num_groups = max(1, math.ceil(size / group_bytes))
    return _units(file, BYTES, num_groups, group_bytes, size, unit_groups)


def parquet_group_rows(rows: int, data_bytes: int, group_bytes: int) -> int:
    """Rows per packing group of a parquet file holding `data_bytes` of text column data.

    >>> parquet_group_rows(1000, 50, 100), parquet_group_rows(1000, 250, 100)
    (1000, 400)
    """
    if rows <= 0 or data_bytes <= group_bytes:
        return max(rows, 1)
    return max(1, math.ceil(rows * group_bytes / data_bytes))


def parquet_units(file: InputFile, rows: int, data_bytes: int, group_bytes: int,
                  unit_groups: int = 1) -> list[WorkUnit]:
    group_rows = parquet_group_rows(rows, data_bytes, group_bytes)
    num_groups = max(1, math.ceil(rows / group_rows))
    return _units(file, ROWS, num_groups, group_rows, rows, unit_groups)


def line_bases(units: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """{first group: lines before the unit} from (first group, end group, lines) of a file's units.

    The units must tile the file's groups from 0 without a gap (every unit of
    a split .jsonl file reports its line count), else the line numbers of the
    later units would be wrong: that raises.

    >>> line_bases([(2, 3, 7), (0, 2, 10)])
    {0: 0, 2: 10}
    """
    bases: dict[int, int] = {}
    expected, lines = 0, 0
    for first, end, n in sorted(units):
        if first != expected:
            raise ValueError(f"line counts of groups [{expected}, {first}) are missing")
        bases[first] = lines
        expected, lines = end, lines + n
    return bases


def shares(total: int, weights: list[int]) -> list[int]:
    """`total` cut in integer parts proportional to `weights`, adding up to `total` exactly.

    >>> shares(10, [1, 1, 1]), shares(5, [0, 0]), shares(7, [])
    ([3, 3, 4], [2, 3], [])
    """
    if not weights:
        return []
    whole = sum(weights)
    if whole <= 0:
        weights, whole = [1] * len(weights), len(weights)
    out, done, acc = [], 0, 0
    for w in weights:
        acc += w
        upto = total * acc // whole
        out.append(upto - done)
        done = upto
    return out
