""".parquet: the key columns of every row (or rows [start, stop)), a row group at a time; and the footer's shape.

A value with no Python text (invalid UTF-8, a date past year 9999) makes its
row a BadRecord; the other rows of its column survive. `parquet_shape` tells
the planner how to split a file without reading it.
"""

from __future__ import annotations

import json
from typing import Iterator, Optional

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.records import (
    INVALID_UTF8,
    MISSING_KEY,
    NOT_A_STRING,
    UNREADABLE_FILE,
    BadRecord,
    ConversationKey,
    Document,
    HookColumn,
    Rewritten,
)
from transforms.io.readers.common import (
    _DETAIL_CAP,
    _RAW_CAP,
    Check,
    Record,
    _coerce,
    _is_transient,
    _short,
    _StorageFile,
    _unreadable,
)

__all__ = ["parquet_shape"]


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
    needed = {k for k in wanted if type(k) is not HookColumn}  # a user's hook's columns may be missing, not all
    if meta.num_row_groups and (not found or not needed <= found):
        return None
    if any(names.count(k) > 1 for k in wanted):
        return None  # two columns of one name: as for a missing one
    return int(meta.num_rows), int(data_bytes)


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
    if missing and (any(type(k) is not HookColumn for k in missing) or len(missing) == len(keys)):
        # A user's hook's column the file lacks reads as None on every row, unless the file has none of them.
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
    columns = list(dict.fromkeys([*(k for k in keys if k not in missing), *tools.values()]))
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
                    cols = [[None] * piece.num_rows if k in missing else _column_values(piece.column(k))
                            for k in keys]
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
