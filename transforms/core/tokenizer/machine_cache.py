"""Results of a tokenizer's load checks, kept once per process and once per machine.

The encoders' checks (fastokens' vocabulary probes, the rank table that makes
tiktoken exact) cost tenths of a second each, and every worker process of a
job, and every job, makes them again for the same tokenizer. Their results
depend only on the tokenizer's JSON and the libraries' releases, which the
caller folds into the key with the check's own version. So each result is
kept in memory (a few, most recent first) and in a JSON file under the
user's cache directory (`$XDG_CACHE_HOME`, else `~/.cache`), written whole or
not at all. A file that cannot be read or does not decode is a miss: the check
runs again and rewrites it. A read-only home only costs the check.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, TypeVar

__all__ = ["MachineCache", "cache_key"]

T = TypeVar("T")
_MISSING = object()


def cache_key(*parts: str) -> str:
    """sha256 of the parts joined by NUL, which none of them holds (JSON writes it escaped)."""
    if any("\0" in part for part in parts):
        raise ValueError("a part of a cache key holds a NUL")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class MachineCache(Generic[T]):
    """key -> result of `compute()`, from this process, from this machine's cache, or computed and kept.

    `dump` turns a result into JSON values; `load` turns them back and raises
    (anything) for what it does not accept, which counts as a miss.
    """

    def __init__(self, folder: str, *, dump: Callable[[T], Any] = lambda v: v,
                 load: Callable[[Any], T] = lambda v: v, keep: int = 8):
        self._folder = folder
        self._dump, self._load = dump, load
        self._keep = keep
        self._memory: "OrderedDict[str, T]" = OrderedDict()
        self._lock = threading.Lock()

    def directory(self) -> str:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(root, "create_hdf5_dataset", self._folder)

    def clear(self) -> None:
        """Forget what this process holds (the machine's files stay): as a new process would start."""
        with self._lock:
            self._memory.clear()

    def fresh(self) -> "MachineCache[T]":
        """An empty cache with the same folder and codecs."""
        return MachineCache(self._folder, dump=self._dump, load=self._load, keep=self._keep)

    def get(self, key: str, compute: Callable[[], T]) -> T:
        with self._lock:
            value = self._memory.get(key, _MISSING)
            if value is not _MISSING:
                self._memory.move_to_end(key)
                return value
        path = os.path.join(self.directory(), key + ".json")
        try:
            with open(path, encoding="utf-8") as f:
                value = self._load(json.load(f))
        except Exception:  # noqa: BLE001 - absent, torn or foreign: computed again and rewritten
            value = compute()
            self._write(path, value)
        with self._lock:
            self._memory[key] = value
            while len(self._memory) > self._keep:
                self._memory.popitem(last=False)
        return value

    def _write(self, path: str, value: T) -> None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._dump(value), f)
            os.replace(tmp, path)  # whole or absent, whoever else writes it at the same time
        except OSError:
            pass  # a read-only home: the check is simply made again by the next process
