"""Packed groups kept on local disk between packing and writing.

On a local runner everything a GroupByKey moves is held in memory, so instead
of the rows, only references to these files cross it. A group is committed by
writing its arrays under temporary names, renaming them, and writing its
`.json` marker last: a marker means the group is complete, which is also what
lets an interrupted run resume without packing that group again.

    <dir>/<key>.chunks.npy   the rows' compressed chunks, back to back (memory-mapped by the writers)
    <dir>/<key>.offsets.npy  where each row's chunk starts
    <dir>/<key>.json         group identity, row count, statistics (written last)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections import Counter
from typing import Optional

import numpy as np

from transforms.core.encoded import EncodedRows
from transforms.core.records import GroupId
from transforms.core.stats import Stats
from transforms.io.fs import unique_temp_name

__all__ = ["SpillRef", "spill_group", "load_spilled", "find_spilled"]


@dataclasses.dataclass(frozen=True)
class SpillRef:
    directory: str
    key: str

    @property
    def base(self) -> str:
        return os.path.join(self.directory, self.key)


def _key(group: GroupId) -> str:
    return hashlib.sha1(group.name.encode("utf-8")).hexdigest()[:24]


def _atomic(path: str, write) -> None:
    tmp = os.path.join(os.path.dirname(path), unique_temp_name(os.path.basename(path)))
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


def spill_group(directory: str, group: GroupId, rows: EncodedRows, stats: Stats) -> SpillRef:
    os.makedirs(directory, exist_ok=True)
    ref = SpillRef(directory, _key(group))
    _atomic(ref.base + ".chunks.npy", lambda f: np.save(f, rows.data))
    _atomic(ref.base + ".offsets.npy", lambda f: np.save(f, rows.offsets))
    meta = {"group": dataclasses.asdict(group), "rows": len(rows),
            "stats": {"totals": dict(stats.totals), "sources": {k: dict(v) for k, v in stats.sources.items()}}}
    _atomic(ref.base + ".json", lambda f: f.write(json.dumps(meta, sort_keys=True).encode("utf-8")))
    return ref


def load_spilled(ref: SpillRef) -> EncodedRows:
    return EncodedRows(np.load(ref.base + ".chunks.npy", mmap_mode="r"), np.load(ref.base + ".offsets.npy"))


def find_spilled(directory: str, group: GroupId) -> Optional[tuple[SpillRef, int, Stats]]:
    """The committed spill of `group`, if an earlier attempt finished it."""
    ref = SpillRef(directory, _key(group))
    try:
        with open(ref.base + ".json", "rb") as f:
            meta = json.loads(f.read())
    except FileNotFoundError:
        return None
    if meta["group"] != dataclasses.asdict(group):
        return None
    stats = Stats(Counter(meta["stats"]["totals"]), {k: Counter(v) for k, v in meta["stats"]["sources"].items()})
    return ref, int(meta["rows"]), stats
