"""One shard's format on its own: what the Cerebras dataloader reads, chunk by chunk, and what is refused.

The rules, from the format's description (transforms/io/hdf5_format.py) and the dataloader's needs: one
int32 dataset `data` [n, F, msl], one row per chunk, gzip at the level asked (each chunk exactly zlib's
output for the row's little-endian int32 bytes), `n_examples` = n, no timestamps, a fixed file format.
"""

from __future__ import annotations

import threading
import zlib

import h5py
import numpy as np
import pytest

from tests.helpers import assert_dataloader_rules
from transforms.io import hdf5_format
from transforms.io.hdf5_format import (DATASET, GZIP_LEVEL, WRITE_BATCH_ROWS, compress_chunk, encode_batches,
                                       iter_shard, shard_n_examples, write_chunks, write_shard)
from transforms.io.vsl_chunks import compress_vsl_row

I32 = np.iinfo(np.int32)


def _rows(n: int, features: int = 3, msl: int = 4, seed: int = 0) -> np.ndarray:
    """Rows that differ from each other (row i starts with i), values spread over int32."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(-(1 << 20), 1 << 20, (n, features, msl)).astype(np.int32)
    rows[:, 0, 0] = np.arange(n)
    return rows


def _stored_chunks(path) -> list[bytes]:
    with h5py.File(path, "r") as f:
        d = f[DATASET]
        return [d.id.read_direct_chunk((i, 0, 0))[1] for i in range(d.shape[0])]


def _raw(row: np.ndarray) -> bytes:
    """A row's bytes as the chunk must hold them once inflated: little-endian int32, features then positions."""
    return b"".join(int(v).to_bytes(4, "little", signed=True) for v in np.asarray(row).ravel().tolist())


def _vsl_row(lengths: list[int], msl: int, seed: int) -> np.ndarray:
    """A [5, msl] VSL row: per segment of n positions, spans n-1..0 and position ids 0..n-1."""
    rng = np.random.default_rng(seed)
    row = np.zeros((5, msl), dtype=np.int32)
    at = 0
    for n in lengths:
        row[0, at:at + n] = rng.integers(0, 50000, n)
        row[1, at:at + n] = 1
        row[2, at:at + n] = rng.integers(0, 50000, n)
        row[3, at:at + n] = np.arange(n)[::-1]
        row[4, at:at + n] = np.arange(n)
        at += n
    return row


# ---------------------------------------------------------------- compress_chunk


def test_a_chunk_is_zlib_of_the_rows_little_endian_int32_bytes():
    row = np.array([[1, -2, 3], [I32.max, I32.min, 0]], dtype=np.int64)  # any integer dtype, values in int32
    for level in (1, 4, 9):
        assert compress_chunk(row, level) == zlib.compress(_raw(row), level)
    assert compress_chunk(row) == zlib.compress(_raw(row), 4)  # the default: h5py's gzip level, the reference's
    big_endian = np.array([[1, 2, 3]], dtype=">i4")
    assert zlib.decompress(compress_chunk(big_endian)) == _raw(big_endian)
    view = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]  # not contiguous
    assert zlib.decompress(compress_chunk(view)) == _raw(view)


# ---------------------------------------------------------------- encode_batches


def test_encode_batches_keeps_every_row_in_order_across_batches_and_tasks():
    rows = _rows(300)
    batches = [rows[:1], rows[1:131], rows[131:131], rows[131:300]]  # tasks of 64 rows inside the batches
    seen = []
    encoded = encode_batches(iter(batches), on_batch=lambda b: seen.append(b.copy()), level=6, threads=2)
    assert len(encoded) == 300
    assert [bytes(encoded.chunk(i)) for i in range(300)] == [zlib.compress(_raw(r), 6) for r in rows]
    # on_batch sees each batch once, in order, as the int32 rows that are compressed
    assert [len(b) for b in seen] == [1, 130, 0, 169]
    assert all(b.dtype == np.int32 for b in seen)
    assert np.array_equal(np.concatenate(seen), rows)


def test_encode_batches_default_level_and_threads():
    rows = _rows(5)
    encoded = encode_batches([rows])  # threads=0: the machine's cores; level: the default
    assert [bytes(encoded.chunk(i)) for i in range(5)] == [zlib.compress(_raw(r), GZIP_LEVEL) for r in rows]
    assert len(encode_batches([])) == 0


def test_compression_runs_on_at_most_the_threads_asked(monkeypatch):
    names = set()
    real = hdf5_format._compress_rows

    def recording(*args):
        names.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(hdf5_format, "_compress_rows", recording)
    rows = _rows(64 * 12)
    encoded = encode_batches([rows[:384], rows[384:]], threads=1)
    assert len(names) == 1 and next(iter(names)).startswith("compress")  # named for a stack dump
    assert [bytes(encoded.chunk(i)) for i in (0, 767)] == [zlib.compress(_raw(rows[i]), 4) for i in (0, 767)]


def test_rows_of_a_wider_dtype_are_checked_against_int32():
    edge = np.array([[[I32.min, I32.max, 0]]], dtype=np.int64)  # the limits themselves fit
    seen = []
    encoded = encode_batches([edge], on_batch=seen.append)
    assert zlib.decompress(bytes(encoded.chunk(0))) == _raw(edge[0])
    assert seen[0].dtype == np.int32 and seen[0].tolist() == edge.tolist()
    for bad in (I32.max + 1, I32.min - 1):
        with pytest.raises(ValueError, match="^row values do not fit int32$"):
            encode_batches([np.array([[[0, bad, 0]]], dtype=np.int64)])
    big_endian = _rows(3).astype(">i4")
    assert [bytes(c) for c in (encode_batches([big_endian]).chunk(i) for i in range(3))] == \
        [zlib.compress(_raw(r), GZIP_LEVEL) for r in _rows(3)]  # little-endian chunks whatever the input's order
    empty = encode_batches([np.zeros((0, 3, 4), dtype=np.int64)], on_batch=seen.append)  # nothing to check
    assert len(empty) == 0 and seen[-1].dtype == np.int32


def test_vsl_batches_take_their_spans_and_positions_precompressed():
    msl = 24
    layouts = [[24], [5, 7], [], [1, 1, 1]] * 20  # 80 rows: two tasks of 64 in one batch, then another
    rows = np.stack([_vsl_row(lengths, msl, seed) for seed, lengths in enumerate(layouts)])
    encoded = encode_batches([(rows[:70], layouts[:70]), (rows[70:], layouts[70:])], level=5, threads=2)
    assert len(encoded) == 80
    for i, (row, lengths) in enumerate(zip(rows, layouts)):
        chunk = bytes(encoded.chunk(i))
        assert chunk == compress_vsl_row(row, lengths, 5)  # the pieces, not zlib over the whole row
        assert zlib.decompress(chunk) == _raw(row)
    with pytest.raises(ValueError, match="not the ramps"):  # segments that do not match the row
        encode_batches([(rows[:2], [[5, 7], [24]])])


# ---------------------------------------------------------------- write_chunks, write_shard


def test_a_shard_is_what_the_dataloader_reads(tmp_path):
    rows = _rows(7, features=3, msl=6)
    path = str(tmp_path / "a.h5")
    write_shard(path, rows, level=7)
    assert assert_dataloader_rules(path) == 7
    with h5py.File(path, "r") as f:
        d = f["data"]
        assert d.compression_opts == 7
        assert np.array_equal(d[()], rows)
        assert f.attrs["n_examples"] == 7 and f.attrs["n_examples"].dtype == np.int64
        assert list(f.attrs) == ["n_examples"]
        info = h5py.h5o.get_info(d.id)
        # no timestamps: equal rows, equal bytes
        assert (info.atime, info.mtime, info.ctime, info.btime) == (0, 0, 0, 0)
    # every chunk is exactly zlib at the level asked over the row (what h5py's gzip filter writes)
    assert _stored_chunks(path) == [zlib.compress(_raw(r), 7) for r in rows]
    with open(path, "rb") as f:
        head = f.read(9)
    assert head[:8] == b"\x89HDF\r\n\x1a\n" and head[8] == 0  # superblock version 0: the earliest format


def test_encode_batches_uses_the_machines_cores_unless_told(monkeypatch):
    pools = []
    real = hdf5_format.ThreadPoolExecutor

    def recording(workers, **kwargs):
        pools.append(workers)
        return real(workers, **kwargs)

    monkeypatch.setattr(hdf5_format, "ThreadPoolExecutor", recording)
    monkeypatch.setattr(hdf5_format, "machine_cpus", lambda: 3)
    encode_batches([_rows(2)])
    encode_batches([_rows(2)], threads=2)
    assert pools == [3, 2]


def test_a_shard_tracks_neither_times_nor_creation_order(tmp_path):
    """The format's promise of equal bytes for equal rows: nothing in the file depends on when or how often
    it was written (no timestamps, no creation-order indexes), in the earliest file format."""
    path = str(tmp_path / "a.h5")
    write_shard(path, _rows(2))
    with h5py.File(path, "r") as f:
        root = f["/"].id.get_create_plist()
        assert (root.get_link_creation_order(), root.get_attr_creation_order()) == (0, 0)
        info = h5py.h5o.get_info(f["data"].id)
        assert (info.atime, info.mtime, info.ctime, info.btime) == (0, 0, 0, 0)


def test_equal_rows_give_equal_bytes(tmp_path):
    rows = _rows(5, features=5, msl=3)
    write_shard(str(tmp_path / "a.h5"), rows)
    write_shard(str(tmp_path / "b.h5"), rows.astype(np.int64))
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    assert assert_dataloader_rules(str(tmp_path / "a.h5"), features=5) == 5


def test_write_shard_over_several_write_batches(tmp_path):
    n = 2 * WRITE_BATCH_ROWS + 3
    rows = _rows(n, features=3, msl=2)
    path = str(tmp_path / "a.h5")
    write_shard(path, rows)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], rows)
    assert _stored_chunks(path)[WRITE_BATCH_ROWS] == zlib.compress(_raw(rows[WRITE_BATCH_ROWS]), GZIP_LEVEL)


def test_write_shard_refuses_what_is_not_rows(tmp_path):
    for bad in (np.zeros((3, 4), np.int32), np.zeros((2, 0, 4), np.int32), np.zeros((2, 3, 4, 1), np.int32)):
        with pytest.raises(ValueError, match=r"rows must be \[n, features, msl\], got"):
            write_shard(str(tmp_path / "a.h5"), bad)


def test_an_empty_shard(tmp_path):
    path = str(tmp_path / "e.h5")
    write_shard(path, np.zeros((0, 3, 8), np.int32))
    with h5py.File(path, "r") as f:
        d = f["data"]
        assert d.shape == (0, 3, 8) and d.dtype == np.int32
        assert int(f.attrs["n_examples"]) == 0
        # HDF5 cannot chunk a dataset of no rows one row per chunk: it is stored plainly, not with
        # chunks of some other shape that a reader of one row per chunk would have to reject
        assert d.chunks in (None, (1, 3, 8)) and d.compression is None
    assert shard_n_examples(path) == 0
    assert list(iter_shard(path)) == []


def test_write_chunks_places_each_chunk_at_its_row(tmp_path):
    rows = _rows(4, features=6, msl=5)
    path = str(tmp_path / "c.h5")
    write_chunks(path, 4, 5, (compress_chunk(r, 2) for r in rows), level=2, features=6)
    assert assert_dataloader_rules(path, features=6) == 4
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], rows)
        assert f["data"].compression_opts == 2
    write_chunks(path, 2, 4, [compress_chunk(r) for r in _rows(2)])  # default: 3 features, the default level
    with h5py.File(path, "r") as f:
        assert f["data"].shape == (2, 3, 4) and f["data"].compression_opts == GZIP_LEVEL
        assert np.array_equal(f["data"][()], _rows(2))


def test_write_chunks_refuses_a_count_other_than_announced(tmp_path):
    chunks = [compress_chunk(r) for r in _rows(3)]
    with pytest.raises(ValueError, match=r"more than the 2 rows announced"):
        write_chunks(str(tmp_path / "a.h5"), 2, 4, chunks)
    with pytest.raises(ValueError, match=r"wrote 3 rows, expected 4"):
        write_chunks(str(tmp_path / "b.h5"), 4, 4, chunks)
    write_chunks(str(tmp_path / "c.h5"), 3, 4, chunks)  # exactly n: fine
    assert shard_n_examples(str(tmp_path / "c.h5")) == 3


# ---------------------------------------------------------------- reading back


def test_iter_shard_yields_consecutive_batches_with_the_attribute(tmp_path):
    rows = _rows(7)
    path = str(tmp_path / "a.h5")
    write_shard(path, rows)
    got = list(iter_shard(path, batch_rows=3))
    assert [n for n, _ in got] == [7, 7, 7]
    assert [len(b) for _, b in got] == [3, 3, 1]
    assert np.array_equal(np.concatenate([b for _, b in got]), rows)
    ((n, whole),) = list(iter_shard(path))  # the default batch holds thousands of rows
    assert n == 7 and np.array_equal(whole, rows)
    with open(path, "rb") as f:  # a file object works too (a remote file opened with fsspec)
        assert np.array_equal(np.concatenate([b for _, b in iter_shard(f, 2)]), rows)


def test_shard_n_examples_checks_the_attribute_against_the_rows(tmp_path):
    path = str(tmp_path / "a.h5")
    write_shard(path, _rows(3))
    assert shard_n_examples(path) == 3
    with h5py.File(path, "a") as f:
        f.attrs["n_examples"] = np.int64(4)
    with pytest.raises(ValueError, match=r"a.h5: n_examples 4 != rows 3$"):
        shard_n_examples(path)
    path = str(tmp_path / "b.h5")
    write_shard(path, _rows(5, features=3))  # rows and features differ: the message names the rows
    with h5py.File(path, "a") as f:
        f.attrs["n_examples"] = np.int64(2)
    with pytest.raises(ValueError, match=r"b.h5: n_examples 2 != rows 5$"):
        shard_n_examples(path)
