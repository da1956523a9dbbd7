"""Results of a tokenizer's load checks, kept once per process and, in a store handed in, once per machine.

The encoders' checks (fastokens' vocabulary probes, the rank table that makes
tiktoken exact) cost tenths of a second each, and every worker process of a
job, and every job, makes them again for the same tokenizer. Their results
depend only on the tokenizer's JSON and the libraries' releases, which the
caller folds into the key with the check's own version. So each result is
kept in memory (a few, most recent first) and in the `Store` installed with
`use_store`. This module holds no files: the I/O layer installs the store on
the user's cache directory (`transforms.io.machine_cache`) where it reads a
tokenizer's files; until it does, a result is kept by this process only.
A stored value that cannot be read or does not decode is a miss: the check
runs again and stores it again.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar

__all__ = ["CheckCache", "Store", "cache_key", "use_store", "has_store"]

T = TypeVar("T")
_MISSING = object()


def cache_key(*parts: str) -> str:
    """sha256 of the parts joined by NUL, which none of them holds (JSON writes it escaped)."""
    if any("\0" in part for part in parts):
        raise ValueError("a part of a cache key holds a NUL")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class Store(Protocol):
    """Where results outlive the process: JSON values by folder (one per check) and key."""

    def get(self, folder: str, key: str) -> Any:
        """The JSON values kept under `key`; raises (anything) when there are none it can give: a miss."""

    def put(self, folder: str, key: str, data: Any) -> None:
        """Keep `data` under `key`, whole or not at all; a store that cannot keep it keeps nothing, quietly."""


class _NoStore:
    """Nothing outlives the process: each process makes each check once."""

    def get(self, folder: str, key: str) -> Any:
        raise KeyError(key)

    def put(self, folder: str, key: str, data: Any) -> None:
        pass


_store: Store = _NoStore()


def use_store(store: Optional[Store]) -> Store:
    """Keep every cache's results in `store` from now on (None: in no store); returns the store used before.

    One for the whole process, as the caches are: the encoders that use them are built deep inside
    `build_tokenizer`, which should not have to carry a store through every layer.
    """
    global _store
    before, _store = _store, (store if store is not None else _NoStore())
    return before


def has_store() -> bool:
    """Whether a store is installed (one that keeps results beyond this process)."""
    return not isinstance(_store, _NoStore)


class CheckCache(Generic[T]):
    """key -> result of `compute()`, from this process, from the installed store, or computed and kept.

    `dump` turns a result into JSON values; `load` turns them back and raises
    (anything) for what it does not accept, which counts as a miss.
    """

    def __init__(self, folder: str, *, dump: Callable[[T], Any] = lambda v: v,
                 load: Callable[[Any], T] = lambda v: v, keep: int = 8):
        self.folder = folder
        self._dump, self._load = dump, load
        self._keep = keep
        self._memory: "OrderedDict[str, T]" = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget what this process holds (the store keeps its own): as a new process would start."""
        with self._lock:
            self._memory.clear()

    def fresh(self) -> "CheckCache[T]":
        """An empty cache with the same folder and codecs."""
        return CheckCache(self.folder, dump=self._dump, load=self._load, keep=self._keep)

    def get(self, key: str, compute: Callable[[], T]) -> T:
        with self._lock:
            value = self._memory.get(key, _MISSING)
            if value is not _MISSING:
                self._memory.move_to_end(key)
                return value
        store = _store  # one store for the read and the write, should another be installed meanwhile
        try:
            value = self._load(store.get(self.folder, key))
        except Exception:  # noqa: BLE001 - absent, torn or foreign: computed again and stored again
            value = compute()
            store.put(self.folder, key, self._dump(value))
        with self._lock:
            self._memory[key] = value
            while len(self._memory) > self._keep:
                self._memory.popitem(last=False)
        return value
