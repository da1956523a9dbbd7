"""Evaluation sets read for decontamination (issue #47): their items' texts, each with where it is.

An evaluation file is in any format the job reads (.jsonl, .jsonl.zst, .json.gz, .jsonl.zst.tar, .parquet,
.txt; local or remote), a directory of them, a glob, or a metadata file listing them (a .txt given alone is one),
as a mixture's source is. An item is a
string of a record: every string field by default, at any depth (a question, its choices, its answer), or only
those under the named `keys` (a dotted path reaches into a nested field). A .txt file is one item, as it is one
document to the job.

Unlike the training corpus, an evaluation set is read whole and must be read right: a line that is not a JSON
object, or a file that cannot be read, is an error naming the file and the line, not a dead letter. A set
decontaminated against in part would let its other items through in silence.
"""

from __future__ import annotations

import dataclasses
import tarfile
from typing import Any, Iterator, Optional, Sequence

import fsspec
import orjson

from transforms.io.discover import discover_source, extension_of
# The readers' own decompression, which tells a stream cut short from a clean end (zstandard's stream reader
# would end quietly mid-frame).
from transforms.io.readers.common import _StreamDamage
from transforms.io.readers.jsonl import _gzip_blocks, _zstd_blocks

__all__ = ["EvalItem", "EvalSetError", "eval_files", "read_eval_items"]


class EvalSetError(ValueError):
    """An evaluation set that cannot be read as a whole: its file (and line) and why."""


@dataclasses.dataclass(frozen=True)
class EvalItem:
    """One string of an evaluation record: its file, its 1-based line (a .parquet row; 1 for a .txt file), the
    field it is in ("question", "choices[2]", "meta.context"; "text" for a .txt file) and the string."""

    source: str
    line: int
    field: str
    text: str


def eval_files(paths: Sequence[str]) -> list[str]:
    """Every evaluation file under `paths` (files, directories, metadata files), each once, in sorted order."""
    found: set = set()
    for path in paths:
        try:
            files, _ = discover_source(path)
        except (OSError, ValueError) as e:  # (among them: a path that holds no file the job reads)
            raise EvalSetError(f"evaluation set {path}: {e}") from None
        found.update(files)
    return sorted(found)


def _strings(value: Any, field: str) -> Iterator[tuple[str, str]]:
    """(field path, string) of every string in `value`, in the record's own order."""
    if isinstance(value, str):
        yield field, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{field}.{k}" if field else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{field}[{i}]")


def _record_strings(record: Any, keys: Optional[Sequence[str]]) -> Iterator[tuple[str, str]]:
    if keys is None:
        yield from _strings(record, "")
        return
    for key in keys:
        value: Any = record
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        yield from _strings(value, key)


def _json_lines(stream, source: str, keys: Optional[Sequence[str]], member: str = "") -> Iterator[EvalItem]:
    where = f"{source}:{member}" if member else source
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise EvalSetError(f"evaluation set {where}, line {n}: not JSON ({e})") from None
        if not isinstance(record, dict):
            raise EvalSetError(f"evaluation set {where}, line {n}: a JSON {type(record).__name__}, not an object")
        for field, text in _record_strings(record, keys):
            yield EvalItem(source, n, field, text)


def _lines(blocks: Iterator[bytes]) -> Iterator[bytes]:
    rest = b""
    for block in blocks:
        *lines, rest = (rest + block).split(b"\n")
        yield from lines
    if rest:
        yield rest


def read_eval_items(path: str, keys: Optional[Sequence[str]] = None) -> Iterator[EvalItem]:
    """Every item of one evaluation file, in file order (`keys`: only the strings under these fields)."""
    ext = extension_of(path)
    if ext is None:
        raise EvalSetError(f"evaluation set {path}: not a format the job reads")
    try:
        with fsspec.open(path, "rb") as raw:
            if ext == ".parquet":
                yield from _parquet(raw, path, keys)
            elif ext == ".txt":
                if keys is None or "text" in keys:
                    yield EvalItem(path, 1, "text", raw.read().decode("utf-8"))
            elif ext == ".jsonl":
                yield from _json_lines(raw, path, keys)
            elif ext == ".jsonl.zst":
                yield from _json_lines(_lines(_zstd_blocks(raw)), path, keys)
            elif ext == ".json.gz":
                yield from _json_lines(_lines(_gzip_blocks(raw)), path, keys)
            else:  # .jsonl.zst.tar: each member a .jsonl.zst
                with tarfile.open(fileobj=raw, mode="r|*") as archive:
                    for info in archive:
                        if info.isfile():
                            yield from _json_lines(_lines(_zstd_blocks(archive.extractfile(info))), path, keys,
                                                   info.name)
    except EvalSetError:
        raise
    except _StreamDamage as e:
        raise EvalSetError(f"evaluation set {path}: cannot be read: {e.detail}") from None
    except (OSError, ValueError, EOFError, tarfile.TarError) as e:
        raise EvalSetError(f"evaluation set {path}: cannot be read: {type(e).__name__}: {e}") from None


def _parquet(raw, path: str, keys: Optional[Sequence[str]]) -> Iterator[EvalItem]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(raw).iter_batches():
        for record in batch.to_pylist():
            n += 1
            for field, text in _record_strings(record, keys):
                yield EvalItem(path, n, field, text)
