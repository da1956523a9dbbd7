"""The on-disk format of one shard, apart from naming and committing.

What the Cerebras HDF5 dataloader requires: a `.h5` file with one dataset
`data`, int32 `[n, 3, msl]` (input_ids, attention_mask, labels), chunked one
sample per chunk `(1, 3, msl)`, gzip-compressed, and a file attribute
`n_examples` equal to n. Written so that equal rows give equal bytes: no
object timestamps (`track_times=False`) and a fixed library format.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

__all__ = ["write_shard", "write_shard_batches", "iter_shard", "shard_n_examples", "DATASET", "GZIP_LEVEL"]

DATASET = "data"
GZIP_LEVEL = 4  # h5py's default, what the reference writes


WRITE_BATCH_ROWS = 1024  # rows per HDF5 write call: bounds memory, and fixes the write pattern


def write_shard(path: str, rows: np.ndarray) -> None:
    """Write rows ([n, 3, msl], values that fit int32) to a local path."""
    rows = np.asarray(rows)
    if rows.ndim != 3 or rows.shape[1] != 3:
        raise ValueError(f"rows must be [n, 3, msl], got {rows.shape}")
    n, _, msl = rows.shape
    write_shard_batches(path, n, msl, (rows[i:i + WRITE_BATCH_ROWS] for i in range(0, n, WRITE_BATCH_ROWS)))


def _deflate(row: np.ndarray) -> bytes:
    # What HDF5's gzip filter stores for a chunk: zlib (deflate) at the level, default window.
    return zlib.compress(np.ascontiguousarray(row, dtype="<i4").tobytes(), GZIP_LEVEL)


def write_shard_batches(path: str, n: int, msl: int, batches, *, threads: int = 0) -> None:
    """Write n rows arriving as consecutive [k, 3, msl] batches, so only one batch is in memory.

    Chunks (one row each) are compressed on a thread pool (zlib releases the
    GIL) and written in order with `write_direct_chunk`: the chunk bytes are
    exactly what h5py's gzip filter would store, and a fixed write order
    gives a fixed file.
    """
    threads = threads or (os.cpu_count() or 1)
    with h5py.File(path, "w", libver=("earliest", "v110"), track_order=False) as f, \
            ThreadPoolExecutor(threads) as pool:
        data = f.create_dataset(
            DATASET,
            shape=(n, 3, msl),
            dtype="i4",
            chunks=(1, 3, msl) if n else None,
            compression="gzip" if n else None,
            compression_opts=GZIP_LEVEL if n else None,
            track_times=False,
        )
        pos = 0

        def flush(futures) -> int:
            for i, future in enumerate(futures):
                data.id.write_direct_chunk((pos + i, 0, 0), future.result())
            return len(futures)

        # Batch k is compressed on the pool while the caller prepares batch k+1;
        # chunks are still written strictly in order.
        pending: list = []
        for batch in batches:
            batch = np.asarray(batch)
            if batch.size and (batch.min() < np.iinfo(np.int32).min or batch.max() > np.iinfo(np.int32).max):
                raise ValueError(f"{path}: values do not fit int32")
            submitted = [pool.submit(_deflate, row) for row in batch]
            pos += flush(pending)
            pending = submitted
        pos += flush(pending)
        if pos != n:
            raise ValueError(f"{path}: wrote {pos} rows, expected {n}")
        f.attrs["n_examples"] = np.int64(n)


def iter_shard(path_or_file, batch_rows: int = 4096):
    """Rows of a shard in consecutive batches; yields (n_examples attribute, batch) pairs."""
    with h5py.File(path_or_file, "r") as f:
        data = f[DATASET]
        n_attr = int(f.attrs["n_examples"])
        for start in range(0, data.shape[0], batch_rows):
            yield n_attr, data[start:start + batch_rows]


def shard_n_examples(path_or_file) -> int:
    """The n_examples attribute, checked against the dataset's row count."""
    with h5py.File(path_or_file, "r") as f:
        n = int(f.attrs["n_examples"])
        if n != f[DATASET].shape[0]:
            raise ValueError(f"{path_or_file}: n_examples {n} != rows {f[DATASET].shape[0]}")
        return n
