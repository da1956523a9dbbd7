""".txt: one document a file (2.1.1), or one record a line (`txt_lines`: Cerebras 2.10 reads it so).

A blank line of a file read by line is a SkippedRecord, counted as dropped,
not a dead letter: blank lines separate a text file's lines, they are not
damage. Lines are split by the JSON-lines splitter, after universal newlines.
"""

from __future__ import annotations

import codecs
from typing import Iterable, Iterator, Optional

from transforms.core.records import (
    BLANK_LINE,
    INVALID_UTF8,
    MISSING_KEY,
    TOO_LONG,
    BadRecord,
    Document,
    Rewritten,
    SkippedRecord,
)
from transforms.io.readers.common import (
    _DETAIL_CAP,
    _RAW_CAP,
    Check,
    Record,
    _coerce,
    _raw_blocks,
    _StreamDamage,
    _unreadable,
)
from transforms.io.readers.jsonl import LineParser, _json_lines, _range_blocks


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
