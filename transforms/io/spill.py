"""Packed groups kept as files between packing and writing: on local disk, or in the output's bucket.

Only references to these files cross the runner's GroupByKey, never the
rows: on a local runner a GroupByKey holds everything it moves in memory; on
Dataflow the layout's side input is a barrier, and whatever crosses it is
written out once more by the service. A group is committed by writing its
arrays and then its `.json` marker: a marker means the group is complete,
which is also what lets an interrupted run resume without packing it again.

    <dir>/<key>.chunks.npy   the rows' compressed chunks, back to back
    <dir>/<key>.offsets.npy  where each row's chunk starts
    <dir>/<key>.json         group identity, row count, statistics (written last)

Local files are written under temporary names and renamed, and memory-mapped
by the writers. On an object store an object appears complete or not at all,
so they are uploaded under their final names; a writer then reads just the
byte ranges of the rows it needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections import Counter
from typing import Optional

import fsspec
import numpy as np

from transforms.core.encoded import EncodedRows
from transforms.core.records import GroupId
from transforms.core.stats import Stats
from transforms.io import fs

__all__ = ["SpillRef", "spill_group", "load_spilled", "read_spilled", "find_spilled", "spill_tokens", "load_tokens",
           "spill_docs", "load_docs"]


@dataclasses.dataclass(frozen=True)
class SpillRef:
    directory: str
    key: str

    def path(self, suffix: str) -> str:
        return fs.join(self.directory, self.key + suffix)

    @property
    def local(self) -> bool:
        return fs.is_local(self.directory)


def _key(group: GroupId) -> str:
    return hashlib.sha1(group.name.encode("utf-8")).hexdigest()[:24]


def _put(path: str, write) -> None:
    # Uploaded under the final name: an object store's upload appears whole, and a group's many files
    # need not pay a server-side copy each (see the module doc).
    fs.atomic_write(path, write, direct_upload=True)


def spill_group(directory: str, group: GroupId, rows: EncodedRows, stats: Stats) -> SpillRef:
    fs.makedirs(directory)
    ref = SpillRef(directory, _key(group))
    _put(ref.path(".chunks.npy"), lambda f: np.save(f, rows.data))
    _put(ref.path(".offsets.npy"), lambda f: np.save(f, rows.offsets))
    meta = {"group": dataclasses.asdict(group), "rows": len(rows),
            "stats": {"totals": dict(stats.totals), "sources": {k: dict(v) for k, v in stats.sources.items()}}}
    _put(ref.path(".json"), lambda f: f.write(json.dumps(meta, sort_keys=True).encode("utf-8")))
    return ref


class _RemoteRows:
    """A stored group's rows on an object store: offsets read once, chunks fetched by byte range."""

    def __init__(self, ref: SpillRef):
        self._path = ref.path(".chunks.npy")
        self.offsets = np.load(io.BytesIO(fs.read_bytes(ref.path(".offsets.npy"))))
        with fsspec.open(self._path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(f)
            else:
                np.lib.format.read_array_header_2_0(f)
            self._data_start = f.tell()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, index: np.ndarray) -> EncodedRows:
        """Rows `index`, in that order: one range read per run of consecutive rows."""
        index = np.asarray(index, dtype=np.int64)
        if not len(index):
            return EncodedRows(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        breaks = np.flatnonzero(np.diff(index) != 1) + 1
        parts = []
        with fsspec.open(self._path, "rb") as f:
            for run in np.split(index, breaks):
                lo, hi = int(self.offsets[run[0]]), int(self.offsets[run[-1] + 1])
                f.seek(self._data_start + lo)
                data = np.frombuffer(f.read(hi - lo), dtype=np.uint8)
                parts.append(EncodedRows(data, self.offsets[run[0]:run[-1] + 2] - lo))
        return EncodedRows.concat(parts)


def load_spilled(ref: SpillRef):
    """A stored group's rows, to `take` from: memory-mapped when local, read by range when remote."""
    if ref.local:
        return EncodedRows(np.load(ref.path(".chunks.npy"), mmap_mode="r"), np.load(ref.path(".offsets.npy")))
    return _RemoteRows(ref)


def read_spilled(ref: SpillRef) -> EncodedRows:
    """A stored group's rows, all read into memory (one read each of two files)."""
    if ref.local:
        return EncodedRows(np.load(ref.path(".chunks.npy")), np.load(ref.path(".offsets.npy")))
    return EncodedRows(np.load(io.BytesIO(fs.read_bytes(ref.path(".chunks.npy")))),
                       np.load(io.BytesIO(fs.read_bytes(ref.path(".offsets.npy")))))


def find_spilled(directory: str, group: GroupId) -> Optional[tuple[SpillRef, int, Stats]]:
    """The committed spill of `group`, if an earlier attempt finished it."""
    ref = SpillRef(directory, _key(group))
    try:
        meta = json.loads(fs.read_bytes(ref.path(".json")))
    except FileNotFoundError:
        return None
    if meta["group"] != dataclasses.asdict(group):
        return None
    stats = Stats(Counter(meta["stats"]["totals"]), {k: Counter(v) for k, v in meta["stats"]["sources"].items()})
    return ref, int(meta["rows"]), stats


# A mixture's tokenized groups wait for its plan (transforms.stages.mixture): on disk, not in the runner's memory.
_TOKENS = ".tokens.npz"
# Documents wait for decontamination's verdict (transforms.stages.decontam) as they were read.
_DOCS = ".docs.pickle"


def spill_tokens(directory: str, batch) -> SpillRef:
    """A TokenBatch's (or EncodedBatch's) arrays, key by key as one flat array and each document's length, under
    the group's key (with a `tokens` suffix: a group's rows may be stored beside it); an EncodedBatch's
    per-record statistics too. Its statistics travel with the reference."""
    from transforms.core.records import EncodedBatch

    fs.makedirs(directory)
    ref = SpillRef(directory, _key(batch.group) + ".t")
    keys = len(batch.tokens[0]) if batch.tokens else 0
    arrays = {}
    for k in range(keys):
        column = [doc[k] for doc in batch.tokens]
        # Ids are int32; a chat record's masks stay bool.
        arrays[f"flat{k}"] = batch.flat if k == 0 and getattr(batch, "flat", None) is not None else (
            np.concatenate(column) if column[0].dtype == bool else np.concatenate(column).astype(np.int32,
                                                                                                copy=False))
        arrays[f"lengths{k}"] = np.fromiter((len(a) for a in column), dtype=np.int64, count=len(column))
    if isinstance(batch, EncodedBatch):
        arrays["positions"] = np.int64(batch.positions)
        arrays.update({"stat." + name: v for name, v in batch.doc_stats.items()})

    def write(f):
        np.savez(f, keys=np.int64(keys), docs=np.int64(len(batch.tokens)), **arrays)

    _put(ref.path(_TOKENS), write)
    return ref


def load_tokens(ref: SpillRef, group: GroupId, stats: Stats):
    """The batch `spill_tokens` stored (its documents' arrays are views into one flat array per key). The file
    stays until the job's temporary directory goes: a retried bundle reads it again."""
    from transforms.core.records import EncodedBatch, TokenBatch

    data = np.load(io.BytesIO(fs.read_bytes(ref.path(_TOKENS))))
    keys, n = int(data["keys"]), int(data["docs"])
    columns, flat0 = [], None
    for k in range(keys):
        flat = data[f"flat{k}"]
        flat0 = flat if k == 0 else flat0
        ends = np.cumsum(data[f"lengths{k}"]).tolist()
        columns.append([flat[a:b] for a, b in zip([0] + ends[:-1], ends)])
    tokens = list(zip(*columns)) if keys else [() for _ in range(n)]
    if "positions" in data.files:  # an EncodedBatch's
        doc_stats = {name[len("stat."):]: data[name] for name in data.files if name.startswith("stat.")}
        return EncodedBatch(group, tokens, stats, doc_stats, positions=int(data["positions"]))
    return TokenBatch(group, tokens, stats, flat=flat0)


def spill_docs(directory: str, batch) -> SpillRef:
    """A DocBatch's documents (pickled: their texts, indices and members), under the group's key (a `docs`
    suffix). Its statistics travel with the reference."""
    import pickle

    fs.makedirs(directory)
    ref = SpillRef(directory, _key(batch.group) + ".d")
    # Pickled straight into the file: a group's 64 MiB of text is not held twice.
    _put(ref.path(_DOCS), lambda f: pickle.dump(batch.docs, f, protocol=pickle.HIGHEST_PROTOCOL))
    return ref


def load_docs(ref: SpillRef) -> list:
    """The documents `spill_docs` stored. The file stays until the job's temporary directory goes: a retried
    bundle reads it again."""
    import pickle

    with fsspec.open(ref.path(_DOCS), "rb") as f:  # (read as it is unpickled: its bytes are not held whole)
        return pickle.load(f)
