"""Per-format document readers: one input file in, Documents and BadRecords out.

Formats and their quirks follow SPEC 1a "Per-format reading"; the deliberate
fixes are COMPAT "Reading": every bad record becomes a BadRecord (with line and
reason) instead of a crash or a silent skip, and good neighbours always
survive. Everything streams: this is the hot path of a terabyte-scale job, and
a single .jsonl can be many gigabytes.

A .txt file is one document (2.1.1), or one record per line (`txt_lines`: Cerebras
2.10 reads it so); a blank line of it is a SkippedRecord, counted as dropped, not a
dead letter: blank lines separate a text file's lines, they are not damage.

Only errors about the file itself are dead-lettered: its content (corrupt,
truncated, not in its format, a record over MAX_RECORD_BYTES), or its absence
(FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError).
Any other error of the storage (a network failure, a remote store's 503, a
timeout) says nothing about the data, so it is raised: the runner then retries
the bundle instead of the job silently losing the file's good documents.

Where each part is:
- `read_records` (here): the one entry point, choosing a reader by extension;
- `common`: the record types, the storage's byte handle and its error rules, value coercion, `file_size`;
- `jsonl`: JSON lines, plain (whole or a byte range), .jsonl.zst, .json.gz, .jsonl.zst.tar;
- `txt`: .txt, a document a file or a record a line;
- `parquet`: .parquet rows, and `parquet_shape` for planning.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import fsspec

from transforms.core.records import BadRecord
from transforms.io.discover import extension_of
from transforms.io.readers.common import (
    Check,
    Record,
    StreamPosition,
    _is_transient,
    _not_a_regular_file,
    _StorageFile,
    _unreadable,
    file_size,
)
from transforms.io.readers.jsonl import _read_json_gz, _read_jsonl, _read_jsonl_zst, _read_jsonl_zst_tar
from transforms.io.readers.parquet import _read_parquet, parquet_shape
from transforms.io.readers.txt import _read_txt, _read_txt_lines

__all__ = ["Record", "Check", "read_records", "MAX_RECORD_BYTES", "file_size", "parquet_shape", "StreamPosition"]

# A record (a JSON line, a .txt file) larger than this is dead-lettered as
# TOO_LONG without being held in memory: a file of binary junk without a
# newline must not take a worker down. Read at call time (tests patch it);
# `read_records(max_record_bytes=...)` overrides it.
MAX_RECORD_BYTES = 256 << 20


def read_records(path: str, keys: tuple[str, ...], max_record_bytes: Optional[int] = None, *,
                 byte_range: Optional[tuple[int, Optional[int]]] = None, rows: Optional[tuple[int, int]] = None,
                 first_line: int = 0, position: Optional[StreamPosition] = None,
                 check: Optional[Check] = None, txt_lines: bool = False) -> Iterator[Record]:
    """Yield the Documents and BadRecords of one input file, in file order.

    Never raises for bad data; a file that is missing or cannot be read yields
    one UNREADABLE_FILE record. Raises ValueError for caller mistakes (no keys,
    unsupported extension), and re-raises a transient storage error (any
    error of the storage but _PERMANENT_IO_ERRORS) so that the runner retries.
    A JSON line or .txt file longer than `max_record_bytes` (default
    MAX_RECORD_BYTES) becomes one TOO_LONG record.

    Part of a file only: `byte_range` (.jsonl) reads the lines whose first
    byte lies in [start, end) (end None: to the end of the file), numbering
    them from `first_line`; `rows` (.parquet) reads rows [start, stop).
    `position`, if given, follows the bytes taken from storage.

    `check`, if given, looks at every record that parsed (values -> None, or (reason, detail) for a bad one, such
    as a conversation with an unknown role): a refused record is a BadRecord like the readers' own, with the
    raw bytes of its line (a .parquet row: its key columns as JSON; a .txt file: its text).

    `txt_lines`: a .txt file is one record per line (Cerebras 2.10, which reads it with Hugging Face's "text"
    builder; see `_read_txt_lines`), and is read by byte range like a .jsonl; otherwise it is one document.
    """
    keys = tuple(keys)
    if not keys:
        raise ValueError("read_records needs at least one key")
    ext = extension_of(path)
    if ext is None:
        raise ValueError(f"unsupported input file extension: {path}")
    cap = MAX_RECORD_BYTES if max_record_bytes is None else int(max_record_bytes)
    if cap < 1:
        raise ValueError(f"max_record_bytes must be positive, got {cap}")
    part: dict = {}
    by_line = ext == ".txt" and txt_lines
    if byte_range is not None or first_line:
        if ext == ".txt" and not by_line:
            raise ValueError(f"a .txt file is read by byte range only a line a record (txt_lines): {path}")
        if ext != ".jsonl" and not by_line:
            raise ValueError(f"only .jsonl files are read by byte range: {path}")
        part = {"byte_range": byte_range or (0, None), "first_line": first_line}
    if rows is not None:
        if ext != ".parquet":
            raise ValueError(f"only .parquet files are read by row range: {path}")
        part = {"rows": rows}
    reader = _read_txt_lines if by_line else _READERS[ext]
    special = _not_a_regular_file(path)
    if special is not None:
        yield _unreadable(path, special)
        return
    try:
        raw = fsspec.open(path, "rb").open()
    except (OSError, ValueError) as e:
        if _is_transient(e):
            raise
        yield _unreadable(path, f"cannot open: {e}")
        return
    src = _StorageFile(raw, position)
    with raw:
        for record in reader(src, path, keys, cap, check=check, **part):
            if type(record) is BadRecord and _is_transient(src.error):
                # This record would only say that the storage failed: retry instead.
                raise src.error  # type: ignore[misc]
            yield record


_READERS: dict[str, Callable[..., Iterator[Record]]] = {
    ".jsonl": _read_jsonl,
    ".jsonl.zst": _read_jsonl_zst,
    ".jsonl.zst.tar": _read_jsonl_zst_tar,
    ".json.gz": _read_json_gz,
    ".txt": _read_txt,
    ".parquet": _read_parquet,
}
