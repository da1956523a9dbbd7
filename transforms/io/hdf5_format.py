"""The on-disk format of one shard, apart from naming and committing.

What the Cerebras HDF5 dataloader requires: a `.h5` file with one dataset
`data`, int32 `[n, F, msl]` (F features: input_ids, attention_mask, labels,
and for VSL attention_span, position_ids), chunked one sample per chunk
`(1, F, msl)`, gzip-compressed, and a file attribute `n_examples` equal to n.
Written so that equal rows give equal bytes: no object timestamps
(`track_times=False`) and a fixed library format.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Optional

import h5py
import numpy as np

from transforms.core.encoded import EncodedRows
from transforms.core.threads import machine_cpus
from transforms.io.compressors import Codec, as_codec
from transforms.io.vsl_chunks import compress_vsl_row

__all__ = ["write_shard", "write_chunks", "encode_batches", "compress_chunk", "iter_shard", "shard_n_examples",
           "DATASET", "GZIP_LEVEL", "WRITE_BATCH_ROWS"]

DATASET = "data"
GZIP_LEVEL = 4  # h5py's default, what the reference writes (the default of --gzip_level)


WRITE_BATCH_ROWS = 1024  # rows expanded and compressed at a time: bounds memory
_ROWS_PER_TASK = 64  # rows per thread-pool task: amortizes the task overhead


def write_shard(path: str, rows: np.ndarray, *, level: int = GZIP_LEVEL) -> None:
    """Write rows ([n, F, msl], values that fit int32) to a local path."""
    rows = np.asarray(rows)
    if rows.ndim != 3 or not rows.shape[1]:
        raise ValueError(f"rows must be [n, features, msl], got {rows.shape}")
    n, features, msl = rows.shape
    encoded = encode_batches((rows[i:i + WRITE_BATCH_ROWS] for i in range(0, n, WRITE_BATCH_ROWS)), level=level)
    write_chunks(path, n, msl, (encoded.chunk(i) for i in range(n)), level=level, features=features)


def compress_chunk(row: np.ndarray, level: "int | Codec" = GZIP_LEVEL) -> bytes:
    """What HDF5's gzip filter reads for one chunk (one [F, msl] row): a zlib stream of its little-endian
    int32 bytes, by the codec's library (a bare level: zlib at that level, what h5py itself writes)."""
    return _compressor(as_codec(level))(np.ascontiguousarray(row, dtype="<i4").tobytes())


@functools.lru_cache(maxsize=16)
def _compressor(codec: Codec) -> Callable[[bytes], bytes]:
    return codec.compress()


def _compress_rows(rows: np.ndarray, codec: Codec, segments: Optional[list] = None) -> list[bytes]:
    if segments is not None:
        return [compress_vsl_row(row, lengths, codec) for row, lengths in zip(rows, segments)]
    compress = _compressor(codec)
    return [compress(np.ascontiguousarray(row, dtype="<i4").tobytes()) for row in rows]


def encode_batches(batches: Iterable, *, on_batch: Optional[Callable[[np.ndarray], None]] = None,
                   level: "int | Codec" = GZIP_LEVEL, threads: int = 0) -> EncodedRows:
    """Consecutive [k, F, msl] batches of rows -> EncodedRows, one compressed chunk per row, in order.

    A batch is an array of rows, or (VSL) a pair (rows [k, 5, msl], the
    segment lengths of each row), whose chunks take their spans and
    positions precompressed (transforms.io.vsl_chunks). Each batch is
    compressed on a thread pool (every codec releases the GIL) while `on_batch`
    looks at it (statistics) and the caller builds the next one. `level`: a
    Codec (transforms.io.compressors), or a zlib level.
    """
    codec = as_codec(level)
    threads = threads or machine_cpus()
    chunks: list[bytes] = []
    with ThreadPoolExecutor(threads, thread_name_prefix="compress") as pool:
        pending: list = []
        for batch in batches:
            segments = None
            if isinstance(batch, tuple):
                batch, segments = batch
            batch = np.asarray(batch)
            if batch.dtype != np.int32:
                if batch.size and (batch.min() < np.iinfo(np.int32).min or batch.max() > np.iinfo(np.int32).max):
                    raise ValueError("row values do not fit int32")
                batch = batch.astype(np.int32)
            submitted = [pool.submit(_compress_rows, batch[i:i + _ROWS_PER_TASK], codec,
                                     None if segments is None else segments[i:i + _ROWS_PER_TASK])
                         for i in range(0, len(batch), _ROWS_PER_TASK)]
            if on_batch is not None:
                on_batch(batch)
            for future in pending:
                chunks.extend(future.result())
            pending = submitted
        for future in pending:
            chunks.extend(future.result())
    return EncodedRows.from_chunks(chunks)


def write_chunks(path: str, n: int, msl: int, chunks: Iterable, *, level: "int | Codec" = GZIP_LEVEL,
                 features: int = 3) -> None:
    """Write n rows of `features` x msl, given as their compressed chunks (bytes-like, from `compress_chunk`
    at `level`), in order. The gzip filter records the zlib-scale level, whichever codec compressed.

    `write_direct_chunk` stores exactly what h5py's gzip filter would have
    produced for the row; a fixed write order gives a fixed file.
    """
    with h5py.File(path, "w", libver=("earliest", "v110"), track_order=False) as f:
        data = f.create_dataset(
            DATASET,
            shape=(n, features, msl),
            dtype="i4",
            chunks=(1, features, msl) if n else None,
            compression="gzip" if n else None,
            compression_opts=as_codec(level).level if n else None,
            track_times=False,
        )
        pos = 0
        for chunk in chunks:
            if pos >= n:
                raise ValueError(f"{path}: more than the {n} rows announced")
            data.id.write_direct_chunk((pos, 0, 0), chunk)
            pos += 1
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


def chunk_sizes(path: str) -> list[int]:
    """The stored (compressed) size of each chunk of a local shard's `data`, in order: a row each, as the sink
    writes them (what a row costs on disk)."""
    with h5py.File(path, "r") as f:
        dset = f["data"]
        if dset.chunks is None:
            return []
        return [dset.id.get_chunk_info(i).size for i in range(dset.id.get_num_chunks())]
