"""Who deflates the chunks: zlib, libdeflate, ISA-L or zlib-ng, all writing the zlib format HDF5's gzip filter reads.

Every chunk of a shard is a zlib stream (header, deflate blocks, adler32) of
one row, and any inflate reads any deflate encoder's output: which library
writes it changes the bytes and the size of the files, never the rows read
back. Measured on 2,000 real LMData rows (3 x 2048 int32), one thread
(`benchmarks/compressors.py`), size against zlib level 4:

    zlib 4          ~60 MB/s   1.000
    libdeflate 4   ~140 MB/s   1.004
    isal 2 (of 4)  ~380 MB/s   1.030
    zlib-ng 4      ~120 MB/s   0.975

The default is libdeflate: 2.4x zlib's speed at the same size, and its
output depends only on its version and level: its compressor is portable C,
so workers of any CPU give the same bytes. ISA-L is the fastest, but picks
code by CPU features (SSE4.2, AVX2, AVX-512) and zlib-ng hashes with CPU
instructions where it can; both are deterministic on one kind of machine
and may give other (equally valid) bytes on another, so they are a choice,
not the default. `zlib` writes exactly what the reference (h5py's own gzip
filter at --gzip_level) writes.

`--gzip_level` keeps its meaning (0-9, zlib's scale); ISA-L has levels 0-3
and takes the nearest (`Codec.native_level`).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

__all__ = ["Codec", "COMPRESSORS", "DEFAULT_COMPRESSOR", "ZLIB", "LIBDEFLATE", "ISAL", "ZLIB_NG", "as_codec"]

ZLIB, LIBDEFLATE, ISAL, ZLIB_NG = "zlib", "libdeflate", "isal", "zlib-ng"
COMPRESSORS = (LIBDEFLATE, ZLIB, ISAL, ZLIB_NG)
DEFAULT_COMPRESSOR = LIBDEFLATE
_PACKAGES = {LIBDEFLATE: "deflate", ISAL: "isal", ZLIB_NG: "zlib-ng"}


@dataclasses.dataclass(frozen=True)
class Codec:
    """A compressor and --gzip_level: picklable, cheap, the same bytes wherever it is rebuilt."""

    name: str = ZLIB
    level: int = 4  # zlib's scale, 0-9: what the HDF5 filter records

    def __post_init__(self):
        if self.name not in COMPRESSORS:
            raise ValueError(f"--compressor must be one of {', '.join(COMPRESSORS)}, got {self.name!r}")
        if not 0 <= self.level <= 9:
            raise ValueError(f"--gzip_level must be 0-9, got {self.level!r}")

    @property
    def native_level(self) -> int:
        """The level handed to the library: ISA-L's 0-3 cover zlib's 0-9 (0 stays 0: fastest)."""
        if self.name == ISAL:
            return 0 if self.level == 0 else min(3, (self.level + 2) // 3)
        return self.level

    def compress(self) -> Callable[[bytes], bytes]:
        """bytes -> one zlib stream, at this codec's level."""
        level = self.native_level
        if self.name == LIBDEFLATE:
            import deflate

            return lambda data: deflate.zlib_compress(data, level)
        return lambda data: self._module().compress(data, level)

    def raw_piece(self, data) -> bytes:
        """Raw deflate blocks of `data` (no header, 32 KiB window) that end byte-aligned and not final, so that
        more blocks can follow: the token rows of a VSL chunk, whose counting rows come from pieces.

        zlib and its kin write them with a sync flush. libdeflate only writes whole streams, whose last block is
        final: its piece is that stream made to go on (`_libdeflate_piece`), and zlib's when it cannot be.
        """
        if self.name == LIBDEFLATE:
            piece = _libdeflate_piece(data, self.level)
            if piece is not None:
                return piece
        module = zlib if self.name == LIBDEFLATE else self._module()
        level = self.level if self.name == LIBDEFLATE else self.native_level
        stream = module.compressobj(level, module.DEFLATED, -15)
        return stream.compress(data) + stream.flush(module.Z_SYNC_FLUSH)

    def version(self) -> str:
        """The library and its version, for data_params.json (the bytes depend on it)."""
        if self.name == ZLIB:
            return f"zlib {zlib.ZLIB_RUNTIME_VERSION}"
        from importlib.metadata import version

        return f"{self.name} (python package {_PACKAGES[self.name]} {version(_PACKAGES[self.name])})"

    def _module(self):
        if self.name == ZLIB:
            return zlib
        try:
            if self.name == ISAL:
                from isal import isal_zlib

                return isal_zlib
            from zlib_ng import zlib_ng

            return zlib_ng
        except ImportError:
            raise ValueError(f"--compressor {self.name} needs the Python package {_PACKAGES[self.name]!r} "
                             f"(pip install {_PACKAGES[self.name]})") from None

    def check(self) -> "Codec":
        """Itself, once its library is importable and round-trips a row; ValueError otherwise."""
        sample = bytes(range(256)) * 64
        if zlib.decompress(self.compress()(sample)) != sample:
            raise ValueError(f"--compressor {self.name}: its output does not read back through zlib")
        return self


# An empty stored block's length and its complement: what a sync flush ends with.
_EMPTY_STORED = b"\x00\x00\xff\xff"


def _libdeflate_piece(data, level: int):
    """libdeflate's raw stream of `data` made to go on, or None when it has more than one block.

    A stream of one block starts with that block's BFINAL bit (bit 0 of byte 0): clearing it makes the
    block not final. What follows it must then be a block header, starting right after the block's end
    code, where libdeflate padded with p zero bits to the byte's end (p is 0-7, known only by decoding).
    p >= 3: those zeros are the header of a stored block (BFINAL 0, BTYPE 00), which is aligned to the
    next byte, so a length of 0 and its complement end it. p < 3: the header also takes a zero byte's
    first bits, and its length follows that byte. Each ending is refused by the other p (a stored
    length and its complement that do not match). A set bit among the last byte's top three is the end
    code's, so p < 3; otherwise decoding tells which ending is right (mostly p >= 3): libdeflate
    inflates the piece, ended by an empty final block, and must give back `data`. Then the piece ends
    in an empty stored block, as a sync flush's does, and blocks may follow it.

    No data: None too (see below).

    A stream of more blocks (inputs much over the 24 KiB of a VSL row's tokens at msl 2048) keeps its
    last BFINAL bit where only decoding finds it: None, and the caller uses zlib.
    """
    import deflate

    if not len(data):
        return None  # the binding's inflate into no room returns nothing without decoding: it could not check
    stream = bytearray(deflate.deflate_compress(data, level))
    if not stream[0] & 1:
        return None
    stream[0] &= 0xFE
    if stream[-1] & 0xE0:  # a bit of the end code among the last byte's top three: p < 3, no decoding needed
        return bytes(stream) + b"\x00" + _EMPTY_STORED
    for ending in (_EMPTY_STORED, b"\x00" + _EMPTY_STORED):
        piece = bytes(stream) + ending
        try:
            if deflate.deflate_decompress(piece + b"\x03\x00", len(data)) == data:
                return piece
        except deflate.DeflateError:
            pass
    return None


def as_codec(level_or_codec) -> Codec:
    """A Codec from a Codec, or from a bare zlib level (the functions' historical argument)."""
    return level_or_codec if isinstance(level_or_codec, Codec) else Codec(ZLIB, int(level_or_codec))
