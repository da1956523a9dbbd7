"""Reading a corpus: the input manifest, a file's work units, a unit's records by packing group, its bad records
in parts, and each group's share of the file's bytes.

    inputs.jsonl ─read_input_manifest─► InputFile ─plan_units─► WorkUnit
    WorkUnit ─unit_records─► (group, Document | BadRecord | SkippedRecord | GROUP_END), in file order
    bad records ─DeadLetterParts─► DeadLetterPart (to transforms/io/dead_letters.py)

A large .jsonl or .parquet file (and a .txt read a line a record) is
planned as several work units that workers read in parallel
(transforms.core.units says how its packing groups are fixed). A file
that can only be read in order (a compressed stream, a tar) is one unit,
read by one worker, which cuts it into packing groups of `group_bytes` of
text; when it is larger than `FAN_OUT_BYTES` on storage its groups are
handed to other workers. The Beam side (ReadCorpus, ReadInputManifest and
the reading DoFn) is transforms/stages/read_corpus.py.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterator, Optional

from transforms.core.records import BYTES, ROWS, BadRecord, DeadLetterPart, Document, InputFile, WorkUnit
from transforms.core.units import jsonl_units, parquet_units, whole_file
from transforms.io import fs
from transforms.io.discover import extension_of
from transforms.io.readers import StreamPosition, file_size, parquet_shape, read_records

__all__ = ["write_input_manifest", "read_input_manifest", "plan_units", "unit_records", "GROUP_END",
           "DeadLetterParts", "ProgressShares", "DEAD_LETTER_PART_RECORDS", "FAN_OUT_BYTES"]

# Files read in order above this size on storage hand their groups on (on distributed runners).
# About 1 GiB of text (16 groups), some 6 minutes of one vCPU: a unit that cannot be split
# bounds the tail of a job, while handing text on costs a shuffle of ~2.8 bytes per token,
# as much again as everything else a job pays for (docs/dataflow.md).
FAN_OUT_BYTES = 256 << 20
# Bad records per dead-letter part: bounds what a reader holds (each keeps at most a 1 KiB preview).
DEAD_LETTER_PART_RECORDS = 4096


# ---------------------------------------------------------------- the input manifest


def write_input_manifest(path: str, files) -> None:
    """The input files, one JSON object per line: the job graph carries this file's name, not the list."""
    lines = "".join(json.dumps({"index": f.index, "path": f.path, "relpath": f.relpath, "size": f.size},
                               ensure_ascii=False) + "\n" for f in files)
    fs.write_text_atomic(path, lines)


def read_input_manifest(path: str) -> Iterator[InputFile]:
    """The files `write_input_manifest` listed, in order."""
    for line in fs.read_bytes(path).decode("utf-8").splitlines():
        if line:
            yield InputFile(**json.loads(line))


# ---------------------------------------------------------------- planning


def plan_units(f: InputFile, keys: tuple, group_bytes: int, unit_groups: int,
               fan_out_bytes: Optional[int] = None, txt_lines: bool = False) -> list[WorkUnit]:
    """The work units of one file; a file whose layout cannot be read is one WHOLE unit (the reader reports why).

    fan_out_bytes: a file read in order and larger than this hands its groups on (None: never).
    txt_lines: a .txt is a record per line, shared out by byte range exactly as a .jsonl (else one document).
    """
    ext = extension_of(f.path)
    if ext == ".txt" and txt_lines and len(keys) == 1:  # (with other keys the reader refuses the file, once)
        ext = ".jsonl"
    if ext == ".txt" or (fan_out_bytes is None and ext not in (".jsonl", ".parquet")):
        return whole_file(f)  # no size needed: don't ask the storage for one
    if f.size is None:
        f = dataclasses.replace(f, size=file_size(f.path))
    if ext == ".parquet":
        shape = parquet_shape(f.path, keys)
        if shape is not None:
            return parquet_units(f, shape[0], shape[1], group_bytes, unit_groups)
        return whole_file(f)
    if ext == ".jsonl" and f.size is not None:
        return jsonl_units(f, f.size, group_bytes, unit_groups)
    return whole_file(f, f.size, fan_out_bytes)


# ---------------------------------------------------------------- reading


class DeadLetterParts:
    """A work unit's bad records, handed on in parts of DEAD_LETTER_PART_RECORDS."""

    def __init__(self, unit: WorkUnit):
        self._unit = unit
        self._records: list = []
        self._part = 0
        # Lines of a .jsonl unit after the first are numbered from its own start;
        # every unit of a split .jsonl file says how many lines it read, so the sink can renumber them.
        self._relative = unit.kind == BYTES and unit.first_group > 0
        self._report_lines = unit.kind == BYTES and unit.end_group - unit.first_group < unit.num_groups

    def _part_of(self, records: list, lines: Optional[int]) -> DeadLetterPart:
        u = self._unit
        part = DeadLetterPart(u.file.path, u.first_group, u.end_group, self._part, records, self._relative, lines,
                              u.file.relpath)
        self._part += 1
        return part

    def add(self, record: BadRecord) -> Optional[DeadLetterPart]:
        self._records.append(record)
        if len(self._records) < DEAD_LETTER_PART_RECORDS:
            return None
        records, self._records = self._records, []
        return self._part_of(records, None)

    def finish(self, lines: int) -> Optional[DeadLetterPart]:
        if not self._records and not self._report_lines:
            return None
        records, self._records = self._records, []
        return self._part_of(records, lines if self._report_lines else None)


GROUP_END = object()  # after the last record of a group


def unit_records(unit: WorkUnit, keys: tuple, max_record_bytes: int, position: StreamPosition, check=None,
                 txt_lines: bool = False):
    """(group index, record) in file order; for BYTES and ROWS units also (k, GROUP_END) after group k.

    A WHOLE unit yields None for the group: the reader cuts it by size as it goes.
    """
    f = unit.file
    if unit.kind == BYTES:
        line = 0
        for k in range(unit.first_group, unit.end_group):
            end = None if k == unit.num_groups - 1 else (k + 1) * unit.group_size
            for record in read_records(f.path, keys, max_record_bytes, byte_range=(k * unit.group_size, end),
                                       first_line=line, check=check, txt_lines=txt_lines):
                line += 1
                yield k, record
            yield k, GROUP_END
    elif unit.kind == ROWS:
        k = unit.first_group
        for record in read_records(f.path, keys, max_record_bytes, rows=unit.span, check=check):
            # A record of a row group that failed to read has the first row of the failure.
            row = record.index if type(record) is Document else (record.line or 0)
            while row >= (k + 1) * unit.group_size and k < unit.end_group - 1:
                yield k, GROUP_END
                k += 1
            yield k, record
        for k in range(k, unit.end_group):
            yield k, GROUP_END
    else:
        for record in read_records(f.path, keys, max_record_bytes, position=position, check=check,
                                   txt_lines=txt_lines):
            yield None, record


class ProgressShares:
    """Each group's share of its file's bytes on storage; a file's shares add up to its size exactly.

    By byte range (.jsonl), in proportion to rows (.parquet), or by the bytes
    the reader had taken from storage when the group closed (files read in order).
    """

    def __init__(self, unit: WorkUnit, position: StreamPosition):
        self._unit = unit
        self._position = position
        self._shown = 0

    def __call__(self, k: int, last: bool) -> int:
        u, size = self._unit, self._unit.file.size
        if u.kind == BYTES:
            lo, hi = u.group_span(k)
            return hi - lo
        if u.kind == ROWS:
            if not size:
                return 0
            if not u.total:  # a file of no rows is one empty group: it holds all the bytes
                return size
            lo, hi = u.group_span(k)
            return size * hi // u.total - size * lo // u.total
        done = self._position.bytes if size is None else min(self._position.bytes, size)
        if last and size is not None:
            done = size
        share, self._shown = max(0, done - self._shown), max(self._shown, done)
        return share
