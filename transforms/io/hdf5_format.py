"""The on-disk format of one shard, apart from naming and committing.

What the Cerebras HDF5 dataloader requires: a `.h5` file with one dataset
`data`, int32 `[n, 3, msl]` (input_ids, attention_mask, labels), chunked one
sample per chunk `(1, 3, msl)`, gzip-compressed, and a file attribute
`n_examples` equal to n. Written so that equal rows give equal bytes: no
object timestamps (`track_times=False`) and a fixed library format.
"""

from __future__ import annotations

import h5py
import numpy as np

__all__ = ["write_shard", "read_shard", "DATASET", "GZIP_LEVEL"]

DATASET = "data"
GZIP_LEVEL = 4  # h5py's default, what the reference writes


def write_shard(path: str, rows: np.ndarray) -> None:
    """Write rows ([n, 3, msl], any integer dtype whose values fit int32) to a local path."""
    rows = np.ascontiguousarray(rows, dtype=np.int32)
    if rows.ndim != 3 or rows.shape[1] != 3:
        raise ValueError(f"rows must be [n, 3, msl], got {rows.shape}")
    n, _, msl = rows.shape
    # libver pins the object header format, so the bytes do not depend on
    # the HDF5 library's default choice.
    with h5py.File(path, "w", libver=("earliest", "v110"), track_order=False) as f:
        f.create_dataset(
            DATASET,
            data=rows,
            dtype="i4",
            chunks=(1, 3, msl) if n else None,
            compression="gzip" if n else None,
            compression_opts=GZIP_LEVEL if n else None,
            track_times=False,
        )
        f.attrs["n_examples"] = np.int64(n)


def read_shard(path_or_file) -> np.ndarray:
    with h5py.File(path_or_file, "r") as f:
        return f[DATASET][()]
