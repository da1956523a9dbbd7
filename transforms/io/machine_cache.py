"""The encoders' load checks kept once per machine: one JSON file per result in the user's cache directory.

`transforms.core.tokenizer.check_cache` keeps the results in each process;
this is the store it is handed so that every worker process of a job, and
every job, on one machine finds a check made once
(`$XDG_CACHE_HOME/create_hdf5_dataset/<folder>/<key>.json`, else under
`~/.cache`). A file is written whole or not at all (`fs.atomic_write`), so a
reader never sees half of one, whoever else writes it at the same time. A
file that cannot be read is a miss; a cache directory that cannot be written
(a read-only home) only costs the check.
"""

from __future__ import annotations

import json
import os
from typing import Any

from transforms.core.tokenizer.check_cache import has_store, use_store
from transforms.io import fs

__all__ = ["MachineStore", "MACHINE_STORE", "install"]


class MachineStore:
    """JSON values by folder and key, in files under the user's cache directory."""

    def directory(self, folder: str) -> str:
        # Read at each call: the environment may change after import (the tests give each their own).
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(root, "create_hdf5_dataset", folder)

    def get(self, folder: str, key: str) -> Any:
        with open(self._path(folder, key), encoding="utf-8") as f:
            return json.load(f)

    def put(self, folder: str, key: str, data: Any) -> None:
        path = self._path(folder, key)
        text = json.dumps(data)  # ASCII (ensure_ascii), as the files have always been
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fs.atomic_write(path, lambda f: f.write(text.encode("ascii")))
        except OSError:
            pass  # a read-only home: the check is simply made again by the next process

    def _path(self, folder: str, key: str) -> str:
        return os.path.join(self.directory(folder), key + ".json")


MACHINE_STORE = MachineStore()


def install() -> None:
    """Keep the load checks of the tokenizers this process builds on this machine (idempotent, cheap). A store
    installed before (a caller's own) stays: this is only the default where there is none."""
    if not has_store():
        use_store(MACHINE_STORE)
