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
"""

from __future__ import annotations

import codecs
import errno
import json
import lzma
import os
import re
import stat
import tarfile
import zlib
from typing import Callable, Iterable, Iterator, Optional, Union

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from transforms.core.records import (
    BLANK_LINE,
    INVALID_UTF8,
    JSON_DECODE,
    MAX_JSON_DEPTH,
    MISSING_KEY,
    NOT_A_STRING,
    NULL_TEXT,
    RAW_PREVIEW_BYTES,
    TOO_DEEP,
    TOO_LONG,
    TRUNCATED_STREAM,
    UNREADABLE_FILE,
    BadRecord,
    ConversationKey,
    Document,
    JsonKey,
    Rewritten,
    SkippedRecord,
)
from transforms.io.discover import extension_of

# A look at a parsed record's values: None (good), (reason, detail) for a bad one, or Rewritten(values) for a good
# one whose values it replaces.
Check = Callable[[tuple], "Optional[tuple[str, str] | Rewritten]"]

__all__ = ["Record", "Check", "read_records", "MAX_RECORD_BYTES", "file_size", "parquet_shape", "StreamPosition"]

Record = Union[Document, BadRecord, SkippedRecord]  # SkippedRecord: a blank line of a .txt read by line

# Compressed input per decoder call. Text rarely expands more than ~10x, so
# this keeps each decoded block in the low megabytes.
_IN_BLOCK = 256 * 1024
# Uncompressed reads, and the gzip output cap per call.
_OUT_BLOCK = 1 << 20

# One greater than the preview, so BadRecord.to_json can still tell the raw
# bytes were cut, without shipping a 100 MB bad line through a shuffle.
_RAW_CAP = RAW_PREVIEW_BYTES + 1
_DETAIL_CAP = 200

# Errors a file handle can raise while being read: plain I/O, a tar that ends
# early, or the decompressor of a compressed tar. An error of the storage
# itself is re-raised by `read_records` unless it is a _PERMANENT_IO_ERRORS.
_READ_ERRORS = (OSError, EOFError, tarfile.TarError, zlib.error, lzma.LZMAError)
# Storage errors that are about the file and would recur on a retry.
_PERMANENT_IO_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
# The same by errno, for the OSErrors no subclass names: a symbolic link loop, a name too long, a special
# file with no device behind it. A retry would meet them again: the job would fail instead of moving on.
_PERMANENT_ERRNOS = frozenset({errno.ELOOP, errno.ENAMETOOLONG, errno.ENXIO, errno.ENODEV})

# A record (a JSON line, a .txt file) larger than this is dead-lettered as
# TOO_LONG without being held in memory: a file of binary junk without a
# newline must not take a worker down. Read at call time (tests patch it);
# `read_records(max_record_bytes=...)` overrides it.
MAX_RECORD_BYTES = 256 << 20

_decode_json = json.JSONDecoder().decode
try:
    # orjson parses the bytes 1.7x faster than json parses their str, and refuses the strings json would
    # return with a lone surrogate (which we must refuse), so a text it returns needs no second look.
    # It differs from json only where it refuses a line (NaN, numbers out of float range, lone
    # surrogates: json's path then decides, with json's own messages) and on integers beyond 64 bits,
    # which it turns into floats: so its result is used only for the common case, a line whose one
    # wanted value is a string, and every other line goes through json.
    from orjson import JSONDecodeError as _FastJsonError
    from orjson import loads as _fast_json
except ImportError:  # pragma: no cover - an installation without it parses every line with json
    _fast_json = None
_MISSING = object()


class _StreamDamage(Exception):
    """The byte stream of a file (or tar member) stopped being readable."""

    def __init__(self, reason: Optional[str], detail: str, fatal: bool = False):
        super().__init__(detail)
        # None: decided by the reader, by whether anything was read before.
        self.reason = reason
        self.detail = detail
        # fatal: the container itself failed, so nothing after it can be read.
        self.fatal = fatal


class StreamPosition:
    """How many bytes a reader has taken from storage so far (decoders read a block ahead of the records)."""

    def __init__(self):
        self.bytes = 0


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


def file_size(path: str) -> Optional[int]:
    """Bytes of a file, or None if it is missing or not a file (the reader then says so).

    A transient storage error is raised, so that the runner retries.
    """
    try:
        fs, p = fsspec.core.url_to_fs(path)
        info = fs.info(p)
    except (OSError, ValueError) as e:
        if _is_transient(e):
            raise
        return None
    if info.get("type") not in ("file", None) or info.get("size") is None:
        return None
    return int(info["size"])


def parquet_shape(path: str, keys: tuple[str, ...]) -> Optional[tuple[int, int]]:
    """(rows, uncompressed bytes of the `keys` columns) from a parquet footer; None if unusable.

    None (a footer that cannot be read, a missing column) leaves the file to
    be read whole, and the reader reports the problem as it does for any file.
    """
    try:
        with fsspec.open(path, "rb") as raw:
            src = _StorageFile(raw)
            try:
                pfile = pq.ParquetFile(src)
                meta, names = pfile.metadata, pfile.schema_arrow.names
            except (pa.ArrowException, OSError, ValueError):
                if _is_transient(src.error):
                    raise src.error  # type: ignore[misc]
                return None
    except (OSError, ValueError) as e:
        if _is_transient(e):
            raise
        return None
    wanted = set(keys)
    data_bytes, found = 0, set()
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            top = column.path_in_schema.split(".", 1)[0]
            if top in wanted:
                found.add(top)
                data_bytes += column.total_uncompressed_size
    if meta.num_row_groups and found != wanted:
        return None
    if any(names.count(k) > 1 for k in wanted):
        return None  # two columns of one name: as for a missing one
    return int(meta.num_rows), int(data_bytes)


def _is_transient(error: Optional[BaseException]) -> bool:
    """True for a storage error that may not recur: anything but a missing, forbidden
    or malformed (ValueError: e.g. an invalid URL) file."""
    if error is None or isinstance(error, (_PERMANENT_IO_ERRORS, ValueError)):
        return False
    return not (isinstance(error, OSError) and error.errno in _PERMANENT_ERRNOS)


def _not_a_regular_file(path: str) -> Optional[str]:
    """Why a local input cannot be read as a file (a FIFO would block the reader forever), or None.

    Remote paths are objects: always files. Errors are left to the open that follows.
    """
    if "://" in path and not path.startswith("file://"):
        return None
    try:
        mode = os.stat(path[len("file://"):] if path.startswith("file://") else path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return f"not a regular file: {kind}"


class _StorageFile:
    """The input's byte handle, remembering the first error the storage itself raised.

    Decoders (tarfile, pyarrow, zlib) wrap or swallow the errors of the handle
    they read from, so a reader cannot tell a corrupt file from a failing disk
    or network by the exception it catches; this wrapper can.
    """

    def __init__(self, fh, position: Optional[StreamPosition] = None):
        self._fh = fh
        self._position = position
        self.error: Optional[BaseException] = None

    def _call(self, method, *args):
        try:
            return method(*args)
        except Exception as e:
            if self.error is None:
                self.error = e
            raise

    def read(self, *args):
        data = self._call(self._fh.read, *args)
        if self._position is not None and data:
            self._position.bytes += len(data)
        return data

    def readinto(self, buffer):
        n = self._call(self._fh.readinto, buffer)
        if self._position is not None and n:
            self._position.bytes += n
        return n

    def seek(self, *args):
        return self._call(self._fh.seek, *args)

    def tell(self):
        return self._call(self._fh.tell)

    def __getattr__(self, name):
        return getattr(self._fh, name)


# ---------------------------------------------------------------- helpers


def _unreadable(source: str, detail: str) -> BadRecord:
    return BadRecord(source, None, UNREADABLE_FILE, detail=detail[:_DETAIL_CAP])


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text[:_DETAIL_CAP]


def _raw_blocks(fh, size: int = _OUT_BLOCK) -> Iterator[bytes]:
    """Read `fh` in blocks; a read failure ends the stream as fatal damage."""
    while True:
        try:
            block = fh.read(size)
        except _READ_ERRORS as e:
            raise _StreamDamage(None, f"read error: {_short(e)}", fatal=True) from None
        if not block:
            return
        yield block


def _coerce(value, key: str) -> tuple[Optional[str], str]:
    """(text, "") for a usable value, else (None, reason); a JsonKey's value becomes its JSON text."""
    if value is None:
        return None, NULL_TEXT
    if isinstance(key, JsonKey):
        try:
            return json.dumps(value, ensure_ascii=False), ""
        except TypeError:  # a parquet value JSON has no type for (bytes, a date)
            return None, NOT_A_STRING
        except RecursionError:  # a parquet value nested past the interpreter's limit (JSON lines are checked)
            return None, TOO_DEEP
    if type(value) is str:
        return value, ""
    if type(value) is list and all(type(v) is str for v in value):
        # dataset.keys list values are paragraphs (SPEC 1a, COMPAT "Reading").
        return "\n\n".join(value), ""
    return None, NOT_A_STRING


# A JSON string, quotes included, matched run by run (possessive: no backtracking on long texts).
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def _nested_too_deep(line: bytes) -> bool:
    """True if the JSON text nests arrays and objects more than MAX_JSON_DEPTH deep (brackets in strings aside).

    A line with fewer brackets than that cannot be: two byte counts, at memchr speed, settle almost every line.
    """
    if line.count(b"[") + line.count(b"{") <= MAX_JSON_DEPTH:
        return False
    depth = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", line)):
        if m[0] in b"[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _encodable(values: tuple[str, ...]) -> bool:
    """False if a value holds a lone surrogate (from a JSON "\\ud800" escape).

    Such a string is not text: it would crash the tokenizer much later, far
    from its line. isascii() is O(1) in CPython, so ASCII text costs nothing.
    """
    for v in values:
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


# ---------------------------------------------------------------- JSON lines


LineParser = Callable[[bytes, int], Record]


def _line_parser(
    source: str, keys: tuple[str, ...], member: Optional[str], strip_strings: bool, first_index: int = 0,
    check: Optional[Check] = None,
) -> LineParser:
    """A function turning one raw line (without b"\\n") into a Document or BadRecord (see read_records' check)."""
    single = keys[0] if len(keys) == 1 else None
    text_keys = all(type(k) is str for k in keys)  # else a JsonKey: values are read as JSON, never bare
    fast = _fast_json is not None and single is not None and text_keys

    def bad(line: bytes, index: int, reason: str, detail: str) -> BadRecord:
        return BadRecord(source, index + 1, reason, line[:_RAW_CAP], member, detail[:_DETAIL_CAP])

    def from_object(obj: dict, line: bytes, index: int) -> Record:
        values = []
        for key in keys:
            value = obj.get(key, _MISSING)
            if value is _MISSING:
                return bad(line, index, MISSING_KEY, f"key {key!r} not found")
            if type(key) is ConversationKey and key.tools_key is not None and value is not None:
                value = key.with_tools(value, obj.get(key.tools_key))
            text, reason = _coerce(value, key)
            if text is None:
                return bad(line, index, reason, f"key {key!r} is {type(value).__name__}")
            values.append(text)
        return Document(index, tuple(values), member)

    def parse(line: bytes, index: int) -> Record:
        if index == first_index and line[:3] == codecs.BOM_UTF8:
            # A byte order mark is encoding, not content; json would reject it.
            line = line[3:]
        if _nested_too_deep(line):
            return bad(line, index, TOO_DEEP, f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
        if fast:
            try:
                obj = _fast_json(line)
            except _FastJsonError:
                pass
            else:
                if type(obj) is dict:
                    value = obj.get(single, _MISSING)
                    if type(value) is str:
                        return Document(index, (value,), member)
        try:
            s = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return bad(line, index, INVALID_UTF8, f"invalid UTF-8 at byte {e.start}")
        try:
            obj = _decode_json(s)
        except ValueError as e:
            if not s.strip():
                return bad(line, index, BLANK_LINE, "blank line")
            return bad(line, index, JSON_DECODE, _short(e))
        if type(obj) is dict:
            # The common case, kept free of extra calls.
            if single is not None and text_keys:
                value = obj.get(single, _MISSING)
                if type(value) is str:
                    record: Record = Document(index, (value,), member)
                else:
                    record = from_object(obj, line, index)
            else:
                record = from_object(obj, line, index)
        elif type(obj) is str:
            if single is None or not text_keys:
                return bad(line, index, MISSING_KEY, f"a bare string has no keys {list(keys)}")
            # The reference strips .json.gz string lines, and only those.
            record = Document(index, (obj.strip() if strip_strings else obj,), member)
        elif obj is None:
            return bad(line, index, NULL_TEXT, "line is null")
        else:
            return bad(line, index, NOT_A_STRING, f"line is a JSON {type(obj).__name__}")
        if type(record) is Document and not _encodable(record.values):
            return bad(line, index, INVALID_UTF8, "unpaired surrogate escape")
        return record

    if check is None:
        return parse

    def parse_checked(line: bytes, index: int) -> Record:
        record = parse(line, index)
        if type(record) is Document:
            failure = check(record.values)
            if type(failure) is Rewritten:
                return Document(record.index, failure.values, member)
            if failure is not None:
                reason, detail = failure
                return BadRecord(source, index + 1, reason, line[:_RAW_CAP], member, detail)
        return record

    return parse_checked


def _json_lines(
    blocks: Iterable[bytes],
    source: str,
    keys: tuple[str, ...],
    cap: int,
    member: Optional[str] = None,
    strip_strings: bool = False,
    first_index: int = 0,
    at_file_start: bool = True,
    check: Optional[Check] = None,
    parse: Optional[LineParser] = None,
) -> Iterator[Record]:
    """Records of a JSON-lines byte stream; split on b"\\n" only.

    U+2028, U+2029, U+0085 and a lone "\\r" are not line breaks here (JSON
    allows the first three raw inside strings). A CRLF's "\\r" is JSON
    whitespace, so it needs no stripping. If the stream is damaged, every
    complete line before the damage is kept, then one BadRecord carries the
    partial line. A line longer than `cap` bytes is one TOO_LONG record, and
    only its first bytes are ever held. Returns True when the damage was
    fatal to a container. Lines are numbered from `first_index`; a byte order
    mark is dropped only from the first line of a file (`at_file_start`).
    `parse`, if given, turns each line into a record instead of the JSON parser (a .txt read by line).
    """
    if parse is None:
        parse = _line_parser(source, keys, member, strip_strings, first_index if at_file_start else -1, check)
    index = first_index
    pending: list[bytes] = []  # pieces of a line longer than a block
    pending_size = 0
    oversize: Optional[bytes] = None  # preview of a line skipped for its length

    def too_long(preview: bytes, index: int) -> BadRecord:
        return BadRecord(source, index + 1, TOO_LONG, preview[:_RAW_CAP], member,
                         f"line longer than {cap} bytes")

    try:
        for block in blocks:
            if oversize is not None:
                end = block.find(b"\n")
                if end < 0:
                    continue
                yield too_long(oversize, index)
                index += 1
                oversize = None
                block = block[end + 1:]
            if b"\n" not in block:
                if block:
                    pending.append(block)
                    pending_size += len(block)
                    if pending_size > cap:
                        oversize = b"".join(pending)[:_RAW_CAP]
                        pending.clear()
                        pending_size = 0
                continue
            if pending:
                pending.append(block)
                block = b"".join(pending)
                pending.clear()
                pending_size = 0
            lines = block.split(b"\n")
            tail = lines.pop()
            for line in lines:
                yield parse(line, index) if len(line) <= cap else too_long(line, index)
                index += 1
            if tail:
                if len(tail) > cap:
                    oversize = tail[:_RAW_CAP]
                else:
                    pending.append(tail)
                    pending_size = len(tail)
    except _StreamDamage as damage:
        reason = damage.reason
        if reason is None:
            reason = TRUNCATED_STREAM if index > first_index or pending or oversize is not None else UNREADABLE_FILE
        raw = (oversize if oversize is not None else b"".join(pending))[:_RAW_CAP]
        line_no = index + 1 if reason == TRUNCATED_STREAM else None
        yield BadRecord(source, line_no, reason, raw, member, damage.detail[:_DETAIL_CAP])
        return damage.fatal
    if oversize is not None:
        yield too_long(oversize, index)
    elif pending:
        # A final line without "\n" is a normal line, since the stream ended cleanly.
        yield parse(b"".join(pending), index)
    return False


# ---------------------------------------------------------------- decoders


def _zstd_blocks(fh) -> Iterator[bytes]:
    """Decompressed blocks of a (multi-frame) zstd stream.

    zstandard's stream_reader returns a clean EOF when the input stops in the
    middle of a frame, so truncation would go unnoticed. A decompressobj
    decodes exactly one frame and reports `.eof` when that frame is complete;
    chaining one per frame tells a clean end from a cut one.
    """
    dctx = zstandard.ZstdDecompressor()
    frame = None
    progress = False  # decoded bytes or finished a frame
    seen = 0
    for data in _raw_blocks(fh, _IN_BLOCK):
        seen += len(data)
        while data:
            if frame is None:
                frame = dctx.decompressobj()
            try:
                out = frame.decompress(data)
            except zstandard.ZstdError as e:
                raise _damage(progress, f"corrupt zstd data: {_short(e)}") from None
            if out:
                progress = True
                yield out
            if not frame.eof:
                break
            progress = True
            data = frame.unused_data
            frame = None
    if frame is not None:
        raise _damage(progress, f"zstd stream ends mid-frame after {seen} compressed bytes")


def _gzip_blocks(fh) -> Iterator[bytes]:
    """Decompressed blocks of a (multi-member) gzip stream, each at most _OUT_BLOCK bytes."""
    member = None
    progress = False  # decoded bytes or finished a member
    for data in _raw_blocks(fh, _IN_BLOCK):
        while True:
            if member is None:
                # Like the gzip module: zero padding after a member is allowed.
                data = data.lstrip(b"\x00")
                if not data:
                    break
                member = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = member.decompress(data, _OUT_BLOCK)
            except zlib.error as e:
                raise _damage(progress, f"corrupt gzip data: {_short(e)}") from None
            if out:
                progress = True
                yield out
            if member.eof:
                progress = True
                data = member.unused_data
                member = None
                continue
            data = member.unconsumed_tail
            # A capped output may leave decoded bytes inside zlib even with all
            # input consumed, so only a short output means "needs more input".
            if not data and len(out) < _OUT_BLOCK:
                break
    if member is not None:
        raise _damage(progress, "gzip stream ends mid-member")


def _damage(progress: bool, detail: str) -> _StreamDamage:
    # Nothing decoded at all means the file is not in this format, or broken
    # from its first byte; otherwise the good part before the damage is kept.
    reason = TRUNCATED_STREAM if progress else UNREADABLE_FILE
    return _StreamDamage(reason, detail)


# ---------------------------------------------------------------- formats


def _read_jsonl(fh, source: str, keys: tuple[str, ...], cap: int, byte_range: Optional[tuple] = None,
                first_line: int = 0, check: Optional[Check] = None) -> Iterator[Record]:
    if byte_range is None or byte_range == (0, None):
        yield from _json_lines(_raw_blocks(fh), source, keys, cap, first_index=first_line, check=check)
        return
    start, end = byte_range
    yield from _json_lines(_range_blocks(fh, start, end), source, keys, cap, first_index=first_line,
                           at_file_start=start == 0, check=check)


def _range_blocks(fh, start: int, end: Optional[int]) -> Iterator[bytes]:
    """The bytes of exactly the lines whose first byte lies in [start, end) (end None: to the end).

    A line starts at 0 and after every b"\n". The first line of the range is
    found by skipping to the first b"\n" at or after start - 1; the last one
    is the line holding byte end - 1, read to its b"\n" even past `end`.
    """
    pos = 0  # file offset of the first byte of `block`
    block = b""
    if start > 0:
        try:
            fh.seek(start - 1)
        except _READ_ERRORS as e:
            raise _StreamDamage(None, f"seek error: {_short(e)}", fatal=True) from None
        pos = start - 1
        blocks = _raw_blocks(fh)
        for block in blocks:
            i = block.find(b"\n")
            if i >= 0:
                pos, block = pos + i + 1, block[i + 1:]
                break
            pos += len(block)
        else:
            return  # no line starts at or after `start`
    else:
        blocks = _raw_blocks(fh)
    if end is None:
        if block:
            yield block
        yield from blocks
        return
    if pos >= end:
        return
    cut = end - 1  # the line holding this byte is the last one of the range
    while True:
        if block:
            if pos + len(block) > cut:
                i = block.find(b"\n", max(cut - pos, 0))
                if i >= 0:
                    yield block[:i + 1]
                    return
            yield block
            pos += len(block)
        block = next(blocks, None)
        if block is None:
            return


def _read_jsonl_zst(fh, source: str, keys: tuple[str, ...], cap: int, check: Optional[Check] = None
                    ) -> Iterator[Record]:
    yield from _json_lines(_zstd_blocks(fh), source, keys, cap, check=check)


def _read_json_gz(fh, source: str, keys: tuple[str, ...], cap: int, check: Optional[Check] = None
                  ) -> Iterator[Record]:
    yield from _json_lines(_gzip_blocks(fh), source, keys, cap, strip_strings=True, check=check)


def _read_jsonl_zst_tar(fh, source: str, keys: tuple[str, ...], cap: int, check: Optional[Check] = None
                        ) -> Iterator[Record]:
    try:
        if _is_empty(fh):
            return
        archive = tarfile.open(fileobj=fh, mode="r|*")
    except _READ_ERRORS as e:
        yield _unreadable(source, f"not a readable tar: {_short(e)}")
        return
    with archive:
        members = iter(archive)
        last = None
        while True:
            try:
                info = next(members)
            except StopIteration:
                # tarfile also ends quietly at a header it cannot read; only zeros may follow a real end.
                left = _bytes_after_end(archive)
                if left:
                    # A member may be named "": only None means that no member was read.
                    after = f" after member {last!r}" if last is not None else ""
                    yield _unreadable(source, f"corrupt tar{after}: a header that is not a tar header, then "
                                              f"{left} bytes that were not read")
                return
            except _READ_ERRORS as e:
                # tarfile read the first header when it opened the archive, so a member came before.
                yield _unreadable(source, f"corrupt tar after member {last!r}: {_short(e)}")
                return
            last = info.name
            if not info.isfile():
                continue
            member_fh = archive.extractfile(info)
            fatal = yield from _json_lines(_zstd_blocks(member_fh), source, keys, cap, info.name, check=check)
            if fatal:
                return


def _bytes_after_end(archive: tarfile.TarFile) -> int:
    """How many bytes follow where tarfile stopped, if any of them is not zero (else 0)."""
    stream, left, data = archive.fileobj, 0, False
    try:
        while True:
            block = stream.read(_OUT_BLOCK)
            if not block:
                break
            left += len(block)
            data = data or block.count(0) != len(block)
    except _READ_ERRORS:
        return left or 1  # the rest cannot even be read: something was there
    return left if data else 0


def _is_empty(fh) -> bool:
    # A zero-byte archive holds no documents; tarfile would call it an error.
    if fh.read(1):
        fh.seek(0)
        return False
    return True


def _read_txt(fh, source: str, keys: tuple[str, ...], cap: int, check: Optional[Check] = None
              ) -> Iterator[Record]:
    if len(keys) != 1:
        yield BadRecord(source, None, MISSING_KEY, detail=f"a .txt file has one text, not keys {list(keys)}")
        return
    blocks, size = [], 0
    try:
        for block in _raw_blocks(fh):
            blocks.append(block)
            size += len(block)
            if size > cap:
                yield BadRecord(source, None, TOO_LONG, b"".join(blocks)[:_RAW_CAP],
                                detail=f"file longer than {cap} bytes")
                return
    except _StreamDamage as damage:
        yield _unreadable(source, damage.detail)
        return
    data = b"".join(blocks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield BadRecord(source, None, INVALID_UTF8, data[:_RAW_CAP], detail=f"invalid UTF-8 at byte {e.start}")
        return
    if "\r" in text:
        # open() in text mode, as the reference reads it: universal newlines.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    values = (_coerce(text, keys[0])[0],)
    failure = check(values) if check is not None else None
    if type(failure) is Rewritten:
        values, failure = failure.values, None
    if failure is not None:
        yield BadRecord(source, None, failure[0], data[:_RAW_CAP], detail=failure[1])
        return
    yield Document(0, values)


def _read_txt_lines(fh, source: str, keys: tuple[str, ...], cap: int, byte_range: Optional[tuple] = None,
                    first_line: int = 0, check: Optional[Check] = None) -> Iterator[Record]:
    """A .txt file a line a record, as Cerebras 2.10 reads it (Hugging Face's "text" builder: open() in text mode).

    - Line breaks are universal newlines, as open() makes them: "\\r\\n", a lone "\\r" and "\\n" each end a line
      (U+2028, U+0085 and the like do not: they are text). A break at the end of the file starts no line.
    - A line's number (a dead letter's `line`, 1-based) counts those breaks; its record index is that minus one.
    - A blank line (empty, or only whitespace, which 2.10's text_read_hook strips to nothing) is a SkippedRecord
      (BLANK_LINE): read, good and dropped, with no token written and no dead letter.
    - A byte order mark starting the file is encoding, not text: dropped (as for JSON lines).
    - Invalid UTF-8 makes its line a dead letter (INVALID_UTF8), never the file: the neighbours survive.
    - A line longer than `cap` bytes is a TOO_LONG dead letter, never held whole.
    - The one key names the record's single column, whatever it is called: a .txt has no other (2.10 calls it
      "text", and finds nothing under any other name).

    `byte_range` and `first_line` as for .jsonl (`_range_blocks`): a unit's lines are those whose first byte
    follows a "\\n" in its range, so the records of a file do not depend on how it is split.
    """
    if len(keys) != 1:
        yield BadRecord(source, None, MISSING_KEY, detail=f"a .txt file has one text, not keys {list(keys)}")
        return
    start, end = byte_range or (0, None)
    blocks = _raw_blocks(fh) if (start, end) == (0, None) else _range_blocks(fh, start, end)
    parse = _txt_line_parser(source, keys[0], first_line if start == 0 else -1, check)
    yield from _json_lines(_universal_newlines(blocks), source, keys, cap, first_index=first_line, parse=parse)


def _universal_newlines(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The blocks with every "\\r\\n" and lone "\\r" made "\\n", a "\\r\\n" cut between two blocks included.

    Neither byte occurs inside a multi-byte UTF-8 character, so this is safe on undecoded bytes.
    """
    after_cr = False  # the last block ended in "\r": a "\n" starting this one belongs to it
    for block in blocks:
        if after_cr and block[:1] == b"\n":
            block = block[1:]
        after_cr = block[-1:] == b"\r"
        if b"\r" in block:
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if block:
            yield block


def _txt_line_parser(source: str, key: str, bom_index: int, check: Optional[Check]) -> LineParser:
    """One line of a .txt (without its break) -> Document, SkippedRecord (blank) or BadRecord (see _read_txt_lines).

    `check` sees a line's values as it sees any record's; its dead letter holds the line's raw bytes.
    """

    def parse(line: bytes, index: int) -> Record:
        if index == bom_index and line[:3] == codecs.BOM_UTF8:
            line = line[3:]
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return BadRecord(source, index + 1, INVALID_UTF8, line[:_RAW_CAP],
                             detail=f"invalid UTF-8 at byte {e.start}")
        if not text or text.isspace():
            return SkippedRecord(index, BLANK_LINE)
        values = (_coerce(text, key)[0],)
        failure = check(values) if check is not None else None
        if type(failure) is Rewritten:
            return Document(index, failure.values)
        if failure is not None:
            return BadRecord(source, index + 1, failure[0], line[:_RAW_CAP], detail=failure[1][:_DETAIL_CAP])
        return Document(index, values)

    return parse


def _read_parquet(fh, source: str, keys: tuple[str, ...], cap: int,
                  rows: Optional[tuple[int, int]] = None, check: Optional[Check] = None) -> Iterator[Record]:
    try:
        pfile = pq.ParquetFile(fh)
        names = pfile.schema_arrow.names
        group_rows = [pfile.metadata.row_group(i).num_rows for i in range(pfile.num_row_groups)]
    except (pa.ArrowException, OSError, ValueError) as e:
        yield _unreadable(source, f"not a readable parquet file: {_short(e)}")
        return
    missing = [k for k in keys if k not in names]
    if missing:
        yield BadRecord(
            source, None, MISSING_KEY,
            detail=f"column(s) {missing} not in parquet file (has {sorted(set(names))})"[:_DETAIL_CAP],
        )
        return
    twice = [k for k in dict.fromkeys(keys) if names.count(k) > 1]
    if twice:
        # Arrow cannot tell which one is meant (the reference crashed on such a file).
        yield _unreadable(source, f"column(s) {twice} appear more than once in the parquet file")
        return
    start, stop = rows if rows is not None else (0, sum(group_rows))
    # A conversation's tools column, read with it when the file has one.
    tools = {k: k.tools_key for k in keys if type(k) is ConversationKey and k.tools_key in names}
    columns = list(dict.fromkeys([*keys, *tools.values()]))
    first_row = 0
    for group, num_rows in enumerate(group_rows):
        lo, hi = max(first_row, start), min(first_row + num_rows, stop)
        if lo < hi:
            try:
                # Arrow's columns are compact; Python strings are made a slice at a time.
                table = pfile.read_row_group(group, columns=columns)
            except (pa.ArrowException, OSError, ValueError) as e:
                # Rows of other row groups are still good; keep going.
                yield BadRecord(
                    source, lo, UNREADABLE_FILE,
                    detail=f"row group {group} ({num_rows} rows) unreadable: {_short(e)}"[:_DETAIL_CAP],
                )
            else:
                for a in range(lo, hi, _PARQUET_SLICE_ROWS):
                    piece = table.slice(a - first_row, min(_PARQUET_SLICE_ROWS, hi - a))
                    cols = [_column_values(piece.column(k)) for k in keys]
                    for i, k in enumerate(keys):
                        if k in tools:
                            # A tools value that cannot be read makes the row bad, as its messages would.
                            cols[i] = [m if isinstance(m, _BadValue) or m is None
                                       else t if isinstance(t, _BadValue) else k.with_tools(m, t)
                                       for m, t in zip(cols[i], _column_values(piece.column(tools[k])))]
                    yield from _parquet_rows(cols, a, source, keys, check)
                del table
        first_row += num_rows
        if first_row >= stop:
            break


# Rows turned into Python strings at a time.
_PARQUET_SLICE_ROWS = 8192


class _BadValue:
    """Stands in for a parquet value that has no Python text: invalid UTF-8, or beyond Python's range."""

    def __init__(self, reason: str, raw: bytes, detail: str = ""):
        self.reason = reason
        self.raw = raw
        self.detail = detail  # follows "column 'key'"


def _column_values(column: pa.ChunkedArray) -> list:
    try:
        return column.to_pylist()
    except (ValueError, ArithmeticError, pa.ArrowException):
        # A UnicodeDecodeError (Arrow does not validate UTF-8 when reading), or an
        # OverflowError (a date past year 9999).
        pass
    # Value by value, so that a bad value is one bad record and its neighbours survive.
    return [_value(scalar) for chunk in column.chunks for scalar in chunk]


def _value(scalar: pa.Scalar):
    try:
        return scalar.as_py()
    except UnicodeDecodeError:
        return _BadValue(INVALID_UTF8, _raw_utf8(scalar))
    except (ValueError, ArithmeticError, pa.ArrowException) as e:
        return _BadValue(NOT_A_STRING, b"", f" is {scalar.type}: {_short(e)}"[:_DETAIL_CAP])


def _raw_utf8(scalar: pa.Scalar) -> bytes:
    """The bytes of a value holding invalid UTF-8: a string's own, a list's strings joined as paragraphs."""
    if isinstance(scalar, (pa.ListScalar, pa.LargeListScalar)):
        return b"\n\n".join(_raw_utf8(v) for v in scalar.values if v.is_valid)
    try:
        return scalar.cast(pa.large_binary()).as_py()
    except pa.ArrowException:
        return b""  # a struct or a map has no bytes of its own


def _parquet_rows(
    cols: list[list], first_row: int, source: str, keys: tuple[str, ...], check: Optional[Check] = None
) -> Iterator[Record]:
    text_keys = all(type(k) is str for k in keys)
    for offset, row in enumerate(zip(*cols)):
        index = first_row + offset
        if text_keys and all(type(v) is str for v in row):
            yield _checked_row(Document(index, row), row, source, keys, check)
            continue
        values = []
        for key, value in zip(keys, row):
            if isinstance(value, _BadValue):
                yield BadRecord(source, index, value.reason, value.raw[:_RAW_CAP],
                                detail=f"column {key!r}{value.detail}")
                break
            text, reason = _coerce(value, key)
            if text is None:
                raw = repr(value).encode("utf-8", "backslashreplace")[:_RAW_CAP]
                detail = f"column {key!r} is {type(value).__name__}"
                yield BadRecord(source, index, reason, raw, detail=detail)
                break
            values.append(text)
        else:
            yield _checked_row(Document(index, tuple(values)), row, source, keys, check)


def _checked_row(doc: Document, row: tuple, source: str, keys: tuple, check: Optional[Check]) -> Record:
    """The row, or the bad record `check` makes of it: raw is the row's key columns as one JSON object."""
    failure = check(doc.values) if check is not None else None
    if failure is None:
        return doc
    if type(failure) is Rewritten:
        return Document(doc.index, failure.values, doc.member)
    raw = json.dumps(dict(zip(keys, row)), ensure_ascii=False, default=repr).encode("utf-8", "surrogatepass")
    return BadRecord(source, doc.index, failure[0], raw[:_RAW_CAP], detail=failure[1])


_READERS: dict[str, Callable[..., Iterator[Record]]] = {
    ".jsonl": _read_jsonl,
    ".jsonl.zst": _read_jsonl_zst,
    ".jsonl.zst.tar": _read_jsonl_zst_tar,
    ".json.gz": _read_json_gz,
    ".txt": _read_txt,
    ".parquet": _read_parquet,
}
