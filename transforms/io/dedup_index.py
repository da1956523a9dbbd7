"""A deduplicating job's index (--dedup_index DIR) and its reading by a later job (--dedup_against DIR).

    DIR/parts/<file digest>-<group>.npz   per packing group of the job: its kept records' file lines, tar members,
                                          exact keys, band keys and signatures (numpy arrays, a row per record)
    DIR/index.json                        what the signatures depend on (transforms.core.dedup.index_settings),
                                          the records and parts written; written last: a directory without it is
                                          not an index

A later job reads the parts as records of origin EARLIER (transforms.core.dedup.earlier_node): compared with its
own, always the ones kept, never written. Each part is written whole to a temporary name and renamed, so a
retried bundle writes the same file again.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Iterable, Optional

import fsspec
import numpy as np

from transforms.core.dedup import VALUE_DTYPE, earlier_node
from transforms.io import fs

__all__ = ["INDEX_FILE", "PARTS_DIR", "write_index_part", "write_index_meta", "read_index_meta", "index_parts",
           "read_index_part"]

INDEX_FILE = "index.json"
PARTS_DIR = "parts"


def _part_name(relpath: str, group: int) -> str:
    return f"{hashlib.sha256(relpath.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}-{group:09d}.npz"


def write_index_part(item: tuple, index_dir: str) -> int:
    """((relpath, group), its kept records as (member, line, exact key, band keys, signature)) -> one part, the
    records in file order; returns the records written."""
    (relpath, group), records = item
    records = sorted(records, key=lambda r: (r[0], r[1]))
    near = records[0][3] is not None
    arrays = {
        "relpath": np.array(relpath),
        "members": np.array([r[0] for r in records], dtype=str),
        "lines": np.array([r[1] for r in records], dtype=np.int64),
        "exact": np.frombuffer(b"".join(r[2] for r in records), dtype=np.uint8).reshape(len(records), -1),
    }
    if near:
        arrays["bands"] = np.stack([np.frombuffer(r[3], dtype=np.int64) for r in records])
        arrays["signatures"] = np.stack([np.frombuffer(r[4], dtype=VALUE_DTYPE) for r in records])
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    fs.makedirs(fs.join(index_dir, PARTS_DIR))
    fs.write_bytes_atomic(fs.join(index_dir, PARTS_DIR, _part_name(relpath, group)), buffer.getvalue())
    return len(records)


def write_index_meta(index_dir: str, settings: dict, records: int) -> int:
    """index.json, once every part is written; returns the records the index holds."""
    fs.makedirs(index_dir)
    fs.write_text_atomic(fs.join(index_dir, INDEX_FILE),
                         json.dumps({**settings, "records": records}, indent=4, sort_keys=True) + "\n")
    return records


def read_index_meta(index_dir: str) -> Optional[dict]:
    """index.json of an index directory, or None when there is none (not an index, or one not finished)."""
    path = fs.join(index_dir, INDEX_FILE)
    if not fs.exists(path):
        return None
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def index_parts(index_dir: str) -> tuple[str, ...]:
    """The part files of an index, sorted."""
    directory = fs.join(index_dir, PARTS_DIR)
    return tuple(fs.join(directory, name) for name in fs.listdir_names(directory) if name.endswith(".npz"))


def read_index_part(path: str) -> Iterable[tuple]:
    """A part's records as the dedup stage's fingerprints: ("key", (exact key, (node, band keys' bytes or None)))
    and, with signatures, ("sig", (node, signature bytes))."""
    with fsspec.open(path, "rb") as f:
        data = np.load(io.BytesIO(f.read()))
        relpath = str(data["relpath"])
        near = "signatures" in data
        for i, (member, line) in enumerate(zip(data["members"].tolist(), data["lines"].tolist())):
            node = earlier_node(relpath, member, line)
            yield "key", (data["exact"][i].tobytes(), (node, data["bands"][i].tobytes() if near else None))
            if near:
                yield "sig", (node, data["signatures"][i].tobytes())
