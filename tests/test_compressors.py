"""--compressor: every codec writes chunks any HDF5 gzip filter reads, the same bytes every time.

The rows are read back through plain h5py (its own gzip filter, not our
reader) and through zlib.decompress; each codec gives the same file twice;
the zlib codec gives exactly the bytes h5py's own gzip filter writes (the
reference's); VSL chunks built from precompressed pieces read back under
every codec.
"""

from __future__ import annotations

import hashlib
import shutil
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers import ROOT, h5_files, run_job
from transforms.io.compressors import COMPRESSORS, ISAL, LIBDEFLATE, ZLIB, ZLIB_NG, Codec, as_codec
from transforms.io.hdf5_format import compress_chunk, encode_batches, write_chunks, write_shard
from transforms.io.vsl_chunks import compress_vsl_row

BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"


def _rows(n=40, msl=512, seed=0) -> np.ndarray:
    """LMData-like rows: token ids with repeats, a mask of ones then zeros, labels shifted by one."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 50257, size=400)
    ids = words[rng.zipf(1.3, size=n * (msl + 1)) % len(words)].astype(np.int32)
    rows = np.zeros((n, 3, msl), dtype=np.int32)
    for i in range(n):
        w = ids[i * msl:(i + 1) * msl + 1]
        real = msl if i < n - 1 else msl // 3
        rows[i, 0, :real] = w[:real]
        rows[i, 1, :real] = 1
        rows[i, 2, :real] = w[1:real + 1]
    return rows


def _vsl_row(lengths, msl, seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = np.zeros((5, msl), dtype=np.int32)
    used = sum(lengths)
    row[0, :used] = rng.integers(0, 50000, used)
    row[1, :used] = 1
    row[2, :used] = rng.integers(0, 50000, used)
    pos = 0
    for n in lengths:
        row[3, pos:pos + n] = np.arange(n)[::-1]
        row[4, pos:pos + n] = np.arange(n)
        pos += n
    return row


@pytest.mark.parametrize("name", COMPRESSORS)
@pytest.mark.parametrize("level", [0, 1, 4, 9])
def test_every_codec_reads_back_through_zlib_and_h5py(tmp_path, name, level):
    codec = Codec(name, level).check()
    rows = _rows()
    for row in rows[:5]:
        assert zlib.decompress(compress_chunk(row, codec)) == row.astype("<i4").tobytes()
    path = tmp_path / "a.h5"
    encoded = encode_batches([rows[:17], rows[17:]], level=codec, threads=2)
    write_chunks(str(path), len(rows), rows.shape[2], (encoded.chunk(i) for i in range(len(rows))), level=codec)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], rows)
        assert f["data"].compression == "gzip" and f["data"].compression_opts == level
    # The same rows and codec give the same file, whatever the threads.
    again = tmp_path / "b.h5"
    encoded = encode_batches([rows], level=codec, threads=1)
    write_chunks(str(again), len(rows), rows.shape[2], (encoded.chunk(i) for i in range(len(rows))), level=codec)
    assert path.read_bytes() == again.read_bytes()


def test_the_zlib_codec_writes_h5py_s_own_bytes(tmp_path):
    """--compressor zlib: byte for byte what h5py's gzip filter stores (the reference's files)."""
    rows = _rows(n=12)
    ours = tmp_path / "ours.h5"
    write_shard(str(ours), rows, level=Codec(ZLIB, 4))
    with h5py.File(ours, "r") as f:
        stored = [f["data"].id.read_direct_chunk((i, 0, 0))[1] for i in range(len(rows))]
    theirs = tmp_path / "theirs.h5"
    with h5py.File(theirs, "w") as f:
        f.create_dataset("data", data=rows, chunks=(1, 3, rows.shape[2]), compression="gzip", compression_opts=4)
    with h5py.File(theirs, "r") as f:
        assert stored == [f["data"].id.read_direct_chunk((i, 0, 0))[1] for i in range(len(rows))]
    assert as_codec(4) == Codec(ZLIB, 4)


@pytest.mark.parametrize("name", COMPRESSORS)
def test_vsl_chunks_under_every_codec(name):
    codec = Codec(name, 4)
    for lengths, msl in (([100, 30, 7], 256), ([256], 256), ([1], 64), ([], 32)):
        row = _vsl_row(lengths, msl)
        chunk = compress_vsl_row(row, lengths, codec)
        assert zlib.decompress(chunk) == row.astype("<i4").tobytes()
        assert chunk == compress_vsl_row(row, lengths, codec)


def test_sizes_and_levels():
    """Sizes against zlib 4 on LMData-like rows (the README's table), and ISA-L's level scale."""
    rows = _rows(n=30, msl=2048)
    size = {name: sum(len(compress_chunk(r, Codec(name, 4))) for r in rows) for name in COMPRESSORS}
    assert size[LIBDEFLATE] <= size[ZLIB] * 1.02
    assert size[ISAL] <= size[ZLIB] * 1.05 and size[ZLIB_NG] <= size[ZLIB] * 1.05
    assert [Codec(ISAL, level).native_level for level in range(10)] == [0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [Codec(LIBDEFLATE, level).native_level for level in range(10)] == list(range(10))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="--compressor must be one of"):
        Codec("gzip", 4)
    with pytest.raises(ValueError, match="--gzip_level must be 0-9"):
        Codec(ZLIB, 10)


def test_a_missing_library_is_named(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_isal(name, *args, **kwargs):
        if name.startswith("isal"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_isal)
    with pytest.raises(ValueError, match="--compressor isal needs the Python package 'isal'"):
        Codec(ISAL, 4).check()


def _digests(out) -> dict:
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in h5_files(out)}


def test_jobs_same_rows_under_every_codec(tmp_path):
    """A job per codec: the same rows, read by plain h5py; data_params names the codec and its library."""
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(ROOT / "data" / "sample" / "jargon_devil_sample.jsonl", src / "sample.jsonl")
    rows, digests = {}, {}
    for name in (LIBDEFLATE, ZLIB, ISAL):
        out = tmp_path / name
        params = run_job(["LMData", "--input_dir", str(src), "--output_dir", str(out),
                          "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(BUNDLED / "vocab.bpe"),
                          "--encoder_file", str(BUNDLED / "encoder.json"), "--max_seq_length", "256",
                          "--files_per_record", "150", "--display_pbar", "False", "--compressor", name])
        assert params["compression"]["compressor"] == name and params["processing"]["compressor"] == name
        rows[name] = np.concatenate([h5py.File(p, "r")["data"][()] for p in h5_files(out)])
        digests[name] = _digests(out)
    assert np.array_equal(rows[LIBDEFLATE], rows[ZLIB]) and np.array_equal(rows[ISAL], rows[ZLIB])
    assert digests[LIBDEFLATE] != digests[ZLIB]  # the codec is in the bytes, and the fingerprint says so
