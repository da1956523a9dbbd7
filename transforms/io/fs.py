"""File-system helpers shared by sources and sinks: local paths and fsspec URLs alike.

A file under a final name is always complete: it is written under a
temporary name that no reader globs for, then renamed (atomic on a local
file system; on object stores a server-side copy of a finished object).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import uuid

import fsspec

__all__ = ["is_local", "join", "commit_local_file", "write_text_atomic", "TMP_DIR", "local_scratch_dir",
           "listdir_names", "remove_tree"]

TMP_DIR = ".tmp"  # inside the output directory; nothing in it ends in ".h5"


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(_local(base), *parts)
    return posixpath.join(base, *parts)


def local_scratch_dir(output_dir: str) -> str:
    """Where a shard is built before it is committed: beside the output when local, so rename is atomic."""
    if is_local(output_dir):
        path = os.path.join(_local(output_dir), TMP_DIR)
        os.makedirs(path, exist_ok=True)
        return path
    return tempfile.gettempdir()


def unique_temp_name(final_name: str) -> str:
    # The random part keeps two attempts of the same bundle from sharing a file;
    # the suffix keeps the name away from "*.h5".
    return f"{final_name}.{uuid.uuid4().hex}.partial"


def commit_local_file(local_tmp: str, final_path: str) -> None:
    """Move a finished local file to its final name, replacing any earlier attempt's identical file."""
    if is_local(final_path):
        os.replace(local_tmp, _local(final_path))
        return
    fs, path = fsspec.core.url_to_fs(final_path)
    remote_tmp = posixpath.join(posixpath.dirname(path), TMP_DIR, unique_temp_name(posixpath.basename(path)))
    fs.put_file(local_tmp, remote_tmp)
    fs.mv(remote_tmp, path)
    os.remove(local_tmp)


def write_text_atomic(path: str, text: str) -> None:
    if is_local(path):
        path = _local(path)
        tmp = os.path.join(os.path.dirname(path) or ".", unique_temp_name(os.path.basename(path)))
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        return
    fd, tmp = tempfile.mkstemp(suffix=".partial")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    commit_local_file(tmp, path)


def listdir_names(path: str) -> list[str]:
    """Names directly inside a directory; [] if it does not exist."""
    if is_local(path):
        path = _local(path)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    fs, p = fsspec.core.url_to_fs(path)
    if not fs.exists(p):
        return []
    return sorted(posixpath.basename(x.rstrip("/")) for x in fs.ls(p, detail=False))


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(_local(path), exist_ok=True)
    else:
        fs, p = fsspec.core.url_to_fs(path)
        fs.makedirs(p, exist_ok=True)


def remove_tree(path: str) -> None:
    if is_local(path):
        shutil.rmtree(_local(path), ignore_errors=True)
        return
    fs, p = fsspec.core.url_to_fs(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


def remove_file(path: str) -> None:
    if is_local(path):
        try:
            os.remove(_local(path))
        except FileNotFoundError:
            pass
        return
    fs, p = fsspec.core.url_to_fs(path)
    if fs.exists(p):
        fs.rm(p)
