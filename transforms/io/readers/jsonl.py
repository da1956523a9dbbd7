"""JSON lines: .jsonl (whole, or a byte range of it), .jsonl.zst, .json.gz and the .jsonl.zst members of a .tar.

`_json_lines` splits a byte stream into lines (on b"\\n" only) and bounds
what one line may hold; `_line_parser` turns a line into a Document or a
BadRecord. The decoders (`_zstd_blocks`, `_gzip_blocks`) tell a stream cut
short from one that ended cleanly, which their libraries' own readers do not.
A .txt read a line a record (`txt._read_txt_lines`) uses the same line splitter.
"""

from __future__ import annotations

import codecs
import json
import re
import tarfile
import zlib
from typing import Callable, Iterable, Iterator, Optional

import zstandard

from transforms.core.records import (
    BLANK_LINE,
    INVALID_UTF8,
    JSON_DECODE,
    MAX_JSON_DEPTH,
    MISSING_KEY,
    NOT_A_STRING,
    NULL_TEXT,
    TOO_DEEP,
    TOO_LONG,
    TRUNCATED_STREAM,
    UNREADABLE_FILE,
    BadRecord,
    ConversationKey,
    Document,
    HookColumn,
    Rewritten,
)
from transforms.io.readers.common import (
    _DETAIL_CAP,
    _IN_BLOCK,
    _OUT_BLOCK,
    _RAW_CAP,
    _READ_ERRORS,
    Check,
    Record,
    _coerce,
    _raw_blocks,
    _short,
    _StreamDamage,
    _unreadable,
)

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
    # A user's hook's columns: each may be missing (read as None), but not all of them.
    optional = any(type(k) is HookColumn for k in keys)

    def bad(line: bytes, index: int, reason: str, detail: str) -> BadRecord:
        return BadRecord(source, index + 1, reason, line[:_RAW_CAP], member, detail[:_DETAIL_CAP])

    def from_object(obj: dict, line: bytes, index: int) -> Record:
        if optional and not any(key in obj for key in keys):
            return bad(line, index, MISSING_KEY, f"none of the read hook's columns {[str(k) for k in keys]} found")
        values = []
        for key in keys:
            value = obj.get(key, _MISSING)
            if value is _MISSING:
                if type(key) is HookColumn:  # None, as 2.10 gives the hook a column the record lacks
                    value = None
                else:
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
