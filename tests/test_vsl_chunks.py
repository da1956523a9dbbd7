"""A VSL row's chunk: zlib over the token rows, spans and positions from precompressed pieces.

Whatever the segments, the chunk must inflate to exactly the row's bytes
(with zlib and with h5py's gzip filter), and pieces that do not hold the
row's counts must be refused.
"""

from __future__ import annotations

import zlib

import deflate
import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.io.compressors import COMPRESSORS, LIBDEFLATE, ZLIB, Codec, _libdeflate_piece
from transforms.core.vsl import VslConfig, pack_segments, summarization_segments
from transforms.io.hdf5_format import encode_batches, write_chunks
from transforms.io.vsl_chunks import adler32_combine, compress_vsl_row


def _row(lengths: list[int], msl: int, seed: int = 0) -> np.ndarray:
    """A [5, msl] VSL row of segments of these lengths (positions), tokens drawn at random."""
    rng = np.random.default_rng(seed)
    row = np.zeros((5, msl), dtype=np.int32)
    row[[0, 2]] = 7
    at = 0
    for n in lengths:
        row[0, at:at + n] = rng.integers(0, 1 << 20, n)
        row[2, at:at + n] = rng.integers(0, 1 << 20, n)
        row[1, at:at + n] = 1
        row[3, at:at + n] = np.arange(n)[::-1]
        row[4, at:at + n] = np.arange(n)
        at += n
    return row


@settings(max_examples=200, deadline=None)
@given(data=st.data(), msl=st.integers(1, 300), level=st.integers(0, 9), name=st.sampled_from([ZLIB, LIBDEFLATE]))
def test_the_chunk_inflates_to_the_row(data, msl, level, name):
    lengths = []
    room = msl
    while room and data.draw(st.booleans()):
        n = data.draw(st.integers(1, room))
        lengths.append(n)
        room -= n
    row = _row(lengths, msl, data.draw(st.integers(0, 99)))
    chunk = compress_vsl_row(row, lengths, Codec(name, level))
    assert zlib.decompress(chunk) == row.tobytes()


def _inflate_piece(piece: bytes) -> bytes:
    """A piece's bytes, read by zlib with an empty final block after it: the whole of it, nothing left over."""
    inflate = zlib.decompressobj(-15)
    out = inflate.decompress(piece + b"\x03\x00")
    assert inflate.eof and not inflate.unused_data
    return out


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(0, 70000), max_size=3000), level=st.integers(0, 9),
       name=st.sampled_from(COMPRESSORS))
def test_a_piece_goes_on_after_its_blocks_whatever_the_codec(values, level, name):
    # Token-like rows (few distinct values, repeats) and short ones: libdeflate's stream made to go on must end
    # on either side of the stored block's header (the end code's padding of 0-7 bits decides which).
    data = np.array(values, dtype="<i4").tobytes()
    try:
        piece = Codec(name, level).raw_piece(data)
    except ValueError as missing:  # isal / zlib-ng not installed here
        pytest.skip(str(missing))
    assert _inflate_piece(piece) == data


def test_libdeflates_piece_takes_both_endings_and_refuses_a_stream_of_several_blocks():
    rng = np.random.default_rng(0)
    endings = set()
    for n in range(1, 400):
        data = rng.integers(0, 1 << (n % 20 + 1), n, dtype="<i4").tobytes()
        piece = _libdeflate_piece(data, 4)
        assert piece is not None and _inflate_piece(piece) == data
        # Which ending: the stored block's four bytes right after libdeflate's stream, or after a zero byte.
        endings.add(len(piece) - len(deflate.deflate_compress(data, 4)))
    assert endings == {4, 5}
    # Megabytes of changing statistics: libdeflate cuts blocks, and the piece comes from zlib.
    several = np.concatenate([rng.integers(0, 1 << k, 1 << 16, dtype="<i4") for k in range(1, 20)]).tobytes()
    assert _libdeflate_piece(several, 4) is None
    assert _inflate_piece(Codec(LIBDEFLATE, 4).raw_piece(several)) == several


@pytest.mark.parametrize("msl", [1, 2, 255, 256, 257, 2048, 70000])
def test_every_piece_length_up_to_msl(msl):
    # One segment filling the row, and one leaving padding: the longest pieces, and values over 65535.
    for lengths in ([msl], [msl // 2] if msl > 1 else []):
        row = _row(lengths, msl)
        assert zlib.decompress(compress_vsl_row(row, lengths, 4)) == row.tobytes()


def test_pieces_that_are_not_the_rows_counts_are_refused():
    row = _row([3, 4], 10)
    with pytest.raises(ValueError, match="not the ramps"):
        compress_vsl_row(row, [4, 3], 4)
    with pytest.raises(ValueError, match="not the ramps"):
        compress_vsl_row(row, [3, 4, 4], 4)  # more positions than the row
    bad = row.copy()
    bad[4, 5] = 9
    with pytest.raises(ValueError):
        compress_vsl_row(bad, [3, 4], 4)


@settings(max_examples=200, deadline=None)
@given(a=st.binary(max_size=300), b=st.binary(max_size=300))
def test_adler32_combine_is_zlibs(a, b):
    assert adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(a + b)


def test_a_shard_of_vsl_chunks_reads_back_through_h5py(tmp_path):
    cfg = VslConfig(max_seq_length=16, pad_id=99, min_sequence_len=1, eos_id=50, sep_id=77, inverted_mask=True)
    pairs = [(np.arange(1, 1 + p, dtype=np.int32), np.arange(30, 30 + c, dtype=np.int32))
             for p, c in [(3, 4), (1, 1), (5, 9), (2, 2), (0, 6), (7, 1)]]
    packed = pack_segments(summarization_segments(pairs, cfg)[0], cfg)
    rows = packed.rows
    encoded = encode_batches([(rows, packed.segment_lengths(0, len(packed)))], level=4)
    path = tmp_path / "x.h5"
    write_chunks(str(path), len(rows), 16, (encoded.chunk(i) for i in range(len(rows))), level=4, features=5)
    with h5py.File(path, "r") as f:
        assert f["data"].chunks == (1, 5, 16) and f["data"].compression == "gzip"
        np.testing.assert_array_equal(f["data"][()], rows)


def test_rows_of_another_integer_type_are_stored_as_int32():
    row = _row([3, 4], 10)
    assert zlib.decompress(compress_vsl_row(row.astype(np.int64), [3, 4], 4)) == row.tobytes()


def test_the_refusal_says_how_many_positions():
    with pytest.raises(ValueError, match="11 positions in a row of 10"):
        compress_vsl_row(_row([3, 4], 10), [3, 4, 4], 4)
