"""The compressed HDF5 chunk of a VSL row, with its attention spans and position ids precompressed.

A VSL row is [5, msl] int32: input_ids, attention_mask, labels, then two
rows that only count: per document segment of n positions, attention_span
n-1 ... 0 and position_ids 0 ... n-1, then zeros for the padding. Deflating
those counting rows costs zlib more than the three token rows (a ramp of
int32 has no long repeats), and they take one of a few shapes per length.
So each piece (a falling ramp, a rising ramp, a run of zeros, of length n)
is deflated once per process (level 1: as small as level 9 for ramps, and the
cheapest to make) as a self-contained run of blocks
ending on a byte boundary (Z_SYNC_FLUSH: no back-reference leaves the piece),
and a chunk is

    zlib header | deflate(input_ids, mask, labels) at the job's gzip level, byte-aligned
                | span pieces | position pieces | an empty final block | adler32 of the whole row

which any inflate (h5py's gzip filter, zlib.decompress) reads as the row.
The adler32 stored is the row's own, and at write time it must equal the
one combined from the pieces: pieces that do not hold the row's counts raise
here, and an inflate of the chunk checks the same sum again on every read.
"""

from __future__ import annotations

import functools
import zlib
from typing import Sequence

import numpy as np
from deflate import adler32

from transforms.io.compressors import Codec, as_codec

__all__ = ["compress_vsl_row", "adler32_combine"]

_HEADER = b"\x78\x5e"  # deflate, 32 KiB window, "default" compression level flags (what zlib writes for 2..5)
_FINAL = b"\x03\x00"  # an empty final block with fixed codes: ends the deflate stream
_BASE = 65521
_RISE, _FALL, _ZERO = 0, 1, 2


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """The adler32 of A + B from adler32(A), adler32(B) and len(B) (zlib's adler32_combine)."""
    # adler32 = B << 16 | A with A = 1 + sum of bytes and B = sum of the A after each byte, both mod 65521.
    a1, b1, a2, b2 = adler1 & 0xFFFF, adler1 >> 16, adler2 & 0xFFFF, adler2 >> 16
    a = (a1 + a2 - 1) % _BASE
    b = (b1 + b2 + len2 * (a1 - 1)) % _BASE
    return a | (b << 16)


@functools.lru_cache(maxsize=16384)
def _piece(kind: int, n: int) -> tuple[bytes, int]:
    """(deflate blocks of the piece, ending byte-aligned and not final; adler32 of its bytes)."""
    values = np.arange(n, dtype="<i4")
    if kind == _FALL:
        values = values[::-1]
    elif kind == _ZERO:
        values = np.zeros(n, dtype="<i4")
    raw = values.tobytes()
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    return deflate.compress(raw) + deflate.flush(zlib.Z_SYNC_FLUSH), zlib.adler32(raw)


@functools.lru_cache(maxsize=4096)
def _tail(lengths: tuple, msl: int) -> tuple[bytes, int]:
    """(the span and position pieces of a row whose segments have `lengths` positions, their bytes' adler32).

    Kept whole too: rows often share a layout (every full window of a folded document is one segment of msl).
    """
    pad = msl - sum(lengths)
    pieces = []
    for kind in (_FALL, _RISE):
        pieces += [(_piece(kind, n), n) for n in lengths]
        if pad:
            pieces.append((_piece(_ZERO, pad), pad))
    checksum = 1  # the adler32 of no bytes
    for (_, adler), n in pieces:
        checksum = adler32_combine(checksum, adler, 4 * n)
    return b"".join(blocks for (blocks, _), _ in pieces), checksum


def compress_vsl_row(row: np.ndarray, lengths: Sequence[int], level: "int | Codec") -> bytes:
    """The zlib chunk of one [5, msl] VSL row whose segments have `lengths` positions, in order.

    The token rows are deflated by the codec as a piece more blocks follow (`Codec.raw_piece`; a bare level: zlib).

    Raises ValueError when the row's spans and positions are not the ramps of `lengths`.
    """
    row = np.ascontiguousarray(row, dtype="<i4")
    msl = row.shape[1]
    lengths = tuple(int(n) for n in lengths)
    if sum(lengths) > msl:
        raise ValueError(f"the row's attention spans and position ids are not the ramps of segments {list(lengths)}: "
                         f"{sum(lengths)} positions in a row of {msl}")
    data = memoryview(row).cast("B")  # the row's bytes, not a copy
    split = 3 * msl * 4
    head_blocks = as_codec(level).raw_piece(data[:split])
    # libdeflate's adler32: the same sums at ~6x zlib's speed (zlib's took 11 us of a row's ~170).
    head = adler32(data[:split])
    tail_blocks, tail = _tail(lengths, msl)
    actual = adler32(data[split:], head)
    if adler32_combine(head, tail, len(data) - split) != actual:
        raise ValueError(f"the row's attention spans and position ids are not the ramps of segments {list(lengths)}")
    return b"".join((_HEADER, head_blocks, tail_blocks, _FINAL, actual.to_bytes(4, "big")))
