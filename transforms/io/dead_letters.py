"""The dead-letter files: every bad record, one JSONL file per source, assembled from parts in bounded memory.

    DeadLetterPart ─write_part─► part file under OUT/.tmp/dead_letter/ + _PartRef
    a source's _PartRefs ─assemble─► its parts copied in file order to OUT/dead_letter/<source>.<digest>.jsonl,
                                     renamed when complete

A reader hands its bad records on in parts of a few thousand, each written to
its own file at once, and only small references to them are gathered by
source (transforms/stages/dead_letters.py wires this in the job). A source's
final file is the concatenation of its parts, streamed, so a source with
millions of bad lines costs disk, not memory. Records appear in file order
(tar members in archive order); line numbers of the later units of a .jsonl
file read in parallel are turned into file line numbers on the way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Optional

import fsspec

from transforms.core.records import DeadLetterPart
from transforms.core.units import line_bases
from transforms.io import fs

__all__ = ["DEAD_LETTER_DIR", "dead_letter_file_name", "json_line", "write_part", "assemble"]

DEAD_LETTER_DIR = "dead_letter"
_PARTS_DIR = "dead_letter"  # inside OUT/.tmp
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_TAIL = 100  # characters of the sanitized source path kept in a dead-letter file name


def dead_letter_file_name(source: str) -> str:
    """The dead-letter file of one source: readable, safe on every file system, unique.

    The tail of the sanitized path keeps the name readable; a digest of the
    whole path keeps two sources whose sanitized names collide apart.
    """
    readable = _UNSAFE.sub("_", source).strip("._-")[-_NAME_TAIL:].lstrip("._-") or "source"
    return f"{readable}.{_digest(source)}.jsonl"


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]


# Characters JSON allows raw in a string that other line splitters than "\n" break a line at (Python's
# str.splitlines, many editors): written escaped, so that every reader sees one record per line.
_LINE_BREAKERS = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(record) -> str:
    """One JSON record on one line, whatever line splitter reads it."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True).translate(_LINE_BREAKERS) + "\n"


@dataclasses.dataclass(frozen=True)
class _PartRef:
    source: str
    first_group: int
    end_group: int
    part: int
    path: Optional[str]  # None: a part without records, only reporting `lines`
    records: int
    relative: bool
    lines: Optional[int]


def write_part(part: DeadLetterPart, output_dir: str) -> _PartRef:
    """Write a part's records to a file of their own under OUT/.tmp; the reference to it (to `assemble`)."""
    path = None
    if part.records:
        path = fs.join(output_dir, fs.TMP_DIR, _PARTS_DIR, _digest(part.source),
                       f"{part.first_group:09d}-{part.part:06d}.jsonl")
        if fs.is_local(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        fs.write_text_atomic(path, "".join(json_line(r.to_json()) for r in part.records))
    return _PartRef(part.source, part.first_group, part.end_group, part.part, path, len(part.records),
                    part.relative, part.lines)


def assemble(item: tuple, output_dir: str) -> int:
    """Copy one source's parts, in file order, into its dead-letter file; returns the records written."""
    source, refs = item
    refs = sorted(refs, key=lambda r: (r.first_group, r.part))
    written = [r for r in refs if r.path is not None]
    if not written:
        return 0
    bases = {}
    if any(r.relative for r in written):
        bases = line_bases((r.first_group, r.end_group, r.lines) for r in refs if r.lines is not None)
    final = fs.join(output_dir, DEAD_LETTER_DIR, dead_letter_file_name(source))
    fs.makedirs(fs.join(output_dir, DEAD_LETTER_DIR))
    tmp = os.path.join(fs.local_scratch_dir(output_dir), fs.unique_temp_name(os.path.basename(final)))
    count = 0
    try:
        with open(tmp, "wb") as out:
            for ref in written:
                base = bases[ref.first_group] if ref.relative else 0
                with fsspec.open(ref.path, "rb") as part:
                    for raw in part:
                        if base:
                            record = json.loads(raw)
                            if record["line"] is not None:
                                record["line"] += base
                                raw = json_line(record).encode("utf-8")
                        out.write(raw)
                        count += 1
        fs.commit_local_file(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    expected = sum(r.records for r in written)
    if count != expected:
        raise RuntimeError(f"dead letters of {source}: {count} records in the parts, {expected} expected")
    return count
