"""What every reader shares: the record types, the storage's byte handle and its error rules, value coercion.

A reader (jsonl, txt, parquet) turns a byte handle into Records. The handle is
a `_StorageFile`, which remembers the first error the storage itself raised:
decoders wrap or swallow the errors of the handle they read from, and only an
error about the file (missing, forbidden, ...) may become a dead letter; any
other is raised by `read_records` so that the runner retries
(`_is_transient`).
"""

from __future__ import annotations

import errno
import json
import lzma
import os
import stat
import tarfile
import zlib
from typing import Callable, Iterator, Optional, Union

import fsspec

from transforms.core.records import (
    NOT_A_STRING,
    NULL_TEXT,
    RAW_PREVIEW_BYTES,
    TOO_DEEP,
    UNREADABLE_FILE,
    BadRecord,
    Document,
    HookColumn,
    JsonKey,
    Rewritten,
    SkippedRecord,
)

__all__ = ["Record", "Check", "StreamPosition", "file_size"]

# A look at a parsed record's values: None (good), (reason, detail) for a bad one, or Rewritten(values) for a good
# one whose values it replaces.
Check = Callable[[tuple], "Optional[tuple[str, str] | Rewritten]"]

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
    """(text, "") for a usable value, else (None, reason); a JsonKey's value becomes its JSON text (a HookColumn's
    None too: "null", what the hook is given for a column the record lacks or holds null in)."""
    if value is None:
        return ("null", "") if type(key) is HookColumn else (None, NULL_TEXT)
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
