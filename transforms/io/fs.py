"""File-system helpers shared by sources and sinks: local paths and fsspec URLs alike.

Every path the job takes (input_dir, metadata files and the paths in them,
output_dir, tokenizer files, --params) may be a local path or any fsspec URL:
`gs://` (gcsfs), `s3://` (s3fs), `memory://`, `file://`, ...

A file under a final name is always complete: it is written under a
temporary name that no reader globs for, then moved to its final name
(`atomic_write` for content written through a file object, `commit_local_file`
for a local file already built, such as a shard h5py wrote by path):
- local: the temporary file sits in OUT/.tmp/ on the same file system and
  `os.replace` renames it atomically;
- remote: the finished local file is uploaded to a temporary object under
  OUT/.tmp/ (name ending ".partial"), then copied server-side to the final
  name and the temporary object deleted. An object-store copy creates the
  destination atomically, so an object with a final name is never partial.
  (Copy + delete rather than `fs.mv`: gcsfs's mv first tries the objects
  moveTo API and, where that is unavailable, falls back to copy + delete
  only after ~30 s of retries.)

Credentials are fsspec's: gcsfs finds Application Default Credentials (the
worker's service account on Dataflow). Against an emulator
(STORAGE_EMULATOR_HOST), set FSSPEC_GS_TOKEN=anon: fsspec passes it to every
gs:// file system as token="anon", without any code path of our own.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
import uuid
from typing import BinaryIO, Callable, Optional

import fsspec

__all__ = ["is_local", "join", "commit_local_file", "atomic_write", "write_text_atomic", "write_bytes_atomic",
           "read_bytes", "TMP_DIR", "local_scratch_dir", "listdir_names", "remove_tree", "remove_file", "makedirs",
           "unique_temp_name", "PARTIAL_SUFFIX", "exists", "local_size"]

log = logging.getLogger(__name__)

TMP_DIR = ".tmp"  # inside the output directory; nothing in it ends in ".h5"
PARTIAL_SUFFIX = ".partial"

# Object stores have no directories: a "directory" exists when an object has its prefix.
_OBJECT_STORES = frozenset({"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss", "adl", "oss", "r2"})


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _remote(path: str):
    """(file system, path in it) of a URL."""
    return fsspec.core.url_to_fs(path)


def _protocols(fs) -> set:
    return set(fs.protocol) if isinstance(fs.protocol, (tuple, list)) else {fs.protocol}


def _forget(fs, path: str) -> None:
    # gcsfs/s3fs cache directory listings per process; another worker may have
    # written since, and a stale listing would make a present file "not found".
    try:
        fs.invalidate_cache(path)
    except Exception:  # noqa: BLE001 - a cache miss is never an error
        pass


def open_remote_for_seeks(path: str, cache_type: str = "readahead"):
    """A remote file opened for reads that seek (h5py), with its cache named.

    gcsfs 2026.10 made its default an adaptive cache that prefetches in the
    background; under h5py's reads (small, seeking back and forth) one of its
    fetches never completed here and the reader waited for good (the emulator
    test of the map-style reader hung). "readahead" was gcsfs's default before
    it; "none" reads exactly the bytes asked (one row's chunk).
    """
    filesystem, inner = fsspec.core.url_to_fs(path)
    return filesystem.open(inner, "rb", cache_type=cache_type)


def absolute(path: str) -> str:
    """A local path made absolute (a worker's working directory is not the launcher's); a URL as it is."""
    return os.path.abspath(_local(path)) if is_local(path) else path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(_local(base), *parts)
    return posixpath.join(base, *parts)


def local_scratch_dir(output_dir: str) -> str:
    """Where a shard is built before it is committed: beside the output when local, so rename is atomic.

    For a remote output it is the machine's temporary directory (TMPDIR): on a
    Dataflow worker, the boot disk.
    """
    if is_local(output_dir):
        path = os.path.join(_local(output_dir), TMP_DIR)
        os.makedirs(path, exist_ok=True)
        return path
    return tempfile.gettempdir()


def unique_temp_name(final_name: str) -> str:
    # The random part keeps two attempts of the same bundle from sharing a file;
    # the suffix keeps the name away from "*.h5".
    return f"{final_name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"


def commit_local_file(local_tmp: str, final_path: str) -> None:
    """Move a finished local file to its final name, replacing any earlier attempt's identical file.

    The local file is gone afterwards, whether the commit succeeded or not.
    """
    if is_local(final_path):
        os.replace(local_tmp, _local(final_path))
        return
    fs, path = _remote(final_path)
    parent = posixpath.dirname(path)
    remote_tmp = posixpath.join(parent, TMP_DIR, unique_temp_name(posixpath.basename(path)))
    try:
        fs.put_file(local_tmp, remote_tmp)
        fs.cp_file(remote_tmp, path)  # server-side copy: the final object appears complete or not at all
    finally:
        try:
            os.remove(local_tmp)
        except FileNotFoundError:
            pass
        try:
            fs.rm_file(remote_tmp)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - a leftover under .tmp/ is removed when the dataset is finalized
            log.warning("could not delete temporary object %s: %s", remote_tmp, e)
        _forget(fs, parent)


def atomic_write(path: str, write: Callable[[BinaryIO], object], *, direct_upload: bool = False) -> None:
    """Call `write(f)` on a binary file that appears under `path` whole or not at all.

    Local: `f` is a temporary file beside `path` (unique_temp_name), renamed by
    `os.replace` when `write` returns, which is atomic on one file system: of
    two processes writing the same path at once, one's whole file wins.
    Remote: `f` is a local temporary file (TMPDIR), then committed by
    `commit_local_file` (uploaded under a temporary name, copied server-side),
    or with `direct_upload` uploaded straight under its final name, one
    request fewer, for a caller whose store makes an upload appear whole
    (an object store; spill.py's groups). Either way no temporary file is
    left behind, whether `write` succeeds or raises.
    """
    if is_local(path):
        path = _local(path)
        tmp = os.path.join(os.path.dirname(path) or ".", unique_temp_name(os.path.basename(path)))
        try:
            with open(tmp, "wb") as f:
                write(f)
            os.replace(tmp, path)
        except BaseException:
            _remove_local(tmp)
            raise
        return
    fd, tmp = tempfile.mkstemp(suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        if direct_upload:
            remote, p = _remote(path)
            remote.put_file(tmp, p)
        else:
            commit_local_file(tmp, path)
    finally:
        _remove_local(tmp)  # commit_local_file has removed it already; a failed write has not


def _remove_local(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def write_text_atomic(path: str, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def read_bytes(path: str) -> bytes:
    if is_local(path):
        with open(_local(path), "rb") as f:
            return f.read()
    fs, p = _remote(path)
    return fs.cat_file(p)


def exists(path: str) -> bool:
    """Whether a file (or directory) exists, asked of the store itself, not of a cached listing."""
    if is_local(path):
        return os.path.exists(_local(path))
    fs, p = _remote(path)
    _forget(fs, p)
    return fs.exists(p)


def listdir_names(path: str) -> list[str]:
    """Names directly inside a directory; [] if it does not exist."""
    if is_local(path):
        path = _local(path)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    fs, p = _remote(path)
    _forget(fs, p)
    try:
        if not fs.exists(p):
            return []
        entries = [x.rstrip("/") for x in fs.ls(p, detail=False)]
        return sorted(posixpath.basename(x) for x in entries if x != p.rstrip("/"))
    finally:
        _forget(fs, p)


def makedirs(path: str) -> None:
    """Create a directory; a no-op on object stores, where directories are implicit.

    (gcsfs's makedirs would check, and possibly try to create, the bucket: a
    permission a job writing into an existing bucket need not have.)
    """
    if is_local(path):
        os.makedirs(_local(path), exist_ok=True)
        return
    fs, p = _remote(path)
    if _protocols(fs) & _OBJECT_STORES:
        return
    fs.makedirs(p, exist_ok=True)


def remove_tree(path: str) -> None:
    if is_local(path):
        shutil.rmtree(_local(path), ignore_errors=True)
        return
    fs, p = _remote(path)
    _forget(fs, p)
    try:
        if fs.exists(p):
            fs.rm(p, recursive=True)
    except FileNotFoundError:
        pass
    finally:
        _forget(fs, p)


def remove_file(path: str) -> None:
    if is_local(path):
        try:
            os.remove(_local(path))
        except FileNotFoundError:
            pass
        return
    fs, p = _remote(path)
    _forget(fs, p)
    try:
        fs.rm_file(p)
    except FileNotFoundError:
        pass
    finally:
        _forget(fs, posixpath.dirname(p))


def local_size(path: str) -> Optional[int]:
    """Bytes of a local file (plain path or file:// URL); None for remote or missing ones.

    Remote sizes are not worth a request each here: the workers ask when they need one.
    """
    if not is_local(path):
        return None
    try:
        return os.path.getsize(_local(path))
    except OSError:
        return None
