"""Reading a seeded sample of an input file, for `create_hdf5_dataset estimate` (transforms.core.estimate).

- A plain `.jsonl` (and a `.txt` read a line a record) is sampled **by byte**:
  uniform offsets, each giving the whole line it falls in, until the lines
  drawn add up to the file's share of the budget. Only those lines are read:
  a 1 % sample of a terabyte reads about 1 % of it.
- Any other file (compressed streams, Parquet, a `.txt` that is one document)
  has no place to jump to: it is read whole, and each record is **kept by a
  coin** (a keyed hash of the file and the record's place, below the
  fraction). Only the kept records go on to be normalized and tokenized.

Draws are seeded by the sample seed and the file's identity (its relative
path): the same sample whatever the order of the files.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterator, Optional

import fsspec
import numpy as np

from transforms.core.records import Document
from transforms.io.discover import extension_of
from transforms.io.readers import read_records

__all__ = ["LineDraws", "by_byte", "draw_lines", "lines_around", "coin_records", "keeps"]

_BACK = 1 << 16  # bytes read back at a time to find the start of a drawn line
WINDOW = 1 << 14  # bytes after each drawn offset whose line ends are counted
_GOLDEN = (5 ** 0.5 - 1) / 2  # the step of the offsets, as a share of the file (see draw_lines)
_MIN_DRAWS = 30  # per file, when it is larger than the lines that many draws would read: a variance needs a few


def by_byte(path: str, txt_lines: bool) -> bool:
    """Whether a file can be sampled by byte offsets (one record per line, no compression)."""
    ext = extension_of(path)
    return ext == ".jsonl" or (ext == ".txt" and txt_lines)


@dataclasses.dataclass
class LineDraws:
    """The lines drawn from one file: each draw's line (without its newline) and its bytes (with it)."""

    size: int
    lines: list  # bytes
    lengths: list  # int
    # Per draw, the line ends in the WINDOW bytes from its offset (wrapping past the file's end to its start;
    # the whole file when smaller), and those bytes: the density of lines, for the count of records (a line
    # drawn by its bytes says little about short ones).
    window_ends: list = dataclasses.field(default_factory=list)
    window_bytes: list = dataclasses.field(default_factory=list)
    starts: list = dataclasses.field(default_factory=list)  # each drawn line's first byte in the file


def _seed(seed: int, identity: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{identity}".encode(), digest_size=8).digest(), "big")


def draw_lines(path: str, size: int, budget: int, seed: int, identity: str, max_draws: int = 200_000) -> LineDraws:
    """Lines at uniform byte offsets of a file of `size` bytes, until their bytes reach `budget` (at least
    `_MIN_DRAWS` draws unless the budget covers the file, at most `max_draws`).

    The offsets are a random start plus multiples of the golden ratio, modulo the file (a Kronecker sequence):
    each one alone is uniform, so every estimate over them stays unbiased, but together they spread over the
    whole file however many are drawn, where independent ones cluster. A file whose documents change along its
    length (a corpus of 55 languages one after another) is then read everywhere: on the three bench corpora
    together the count of documents held the truth in 95% of 40 seeded 1% samples (median error 5.4%), where
    independent offsets held it in 80%. The variance is estimated as for independent draws, which such a spread
    only overstates here (median half-width 20%).
    """
    rng = np.random.default_rng(_seed(seed, identity))
    start = float(rng.random())
    out = LineDraws(size, [], [])
    if size <= 0:
        return out
    drawn = 0
    width = min(WINDOW, size)
    with fsspec.open(path, "rb") as fh:
        while len(out.lines) < max_draws and (drawn < budget or (len(out.lines) < _MIN_DRAWS and budget < size)):
            offset = min(int(((start + len(out.lines) * _GOLDEN) % 1.0) * size), size - 1)
            first, line, length = _locate(fh, offset)
            out.starts.append(first)
            out.lines.append(line)
            out.lengths.append(length)
            out.window_ends.append(_ends_in_window(fh, size, offset, width))
            out.window_bytes.append(width)
            drawn += length
    return out


def _ends_in_window(fh, size: int, offset: int, width: int) -> int:
    """The line ends in the `width` bytes from `offset`, wrapping past the file's end to its start.

    Wrapping puts every byte in exactly `width` of the `size` windows, so size * ends / width is an unbiased
    count of the file's lines, and in a file of at most WINDOW bytes (each window the whole file) the exact one.
    Windows cut at the end instead counted the last lines from fewer bytes, and over-counted them: by 94% on a
    file of three short records, 2.4% on one of two windows (tests/test_estimate.py). A last line without a
    newline ends at the file's end.
    """
    fh.seek(offset)
    tail = fh.read(width)
    ends = tail.count(b"\n")
    if offset + len(tail) == size and not tail.endswith(b"\n"):
        ends += 1
    if len(tail) < width:
        fh.seek(0)
        ends += fh.read(width - len(tail)).count(b"\n")
    return ends


def _line_at(fh, offset: int) -> tuple[bytes, int]:
    """(the line holding byte `offset`, without its newline; its bytes with it)."""
    return _locate(fh, offset)[1:]


def _locate(fh, offset: int) -> tuple[int, bytes, int]:
    """(the first byte of the line holding byte `offset`; that line, without its newline; its bytes with it)."""
    start = offset
    while start > 0:  # back to the byte after the previous newline
        lo = max(0, start - _BACK)
        fh.seek(lo)
        before = fh.read(start - lo)
        cut = before.rfind(b"\n")
        if cut >= 0:
            start = lo + cut + 1
            break
        start = lo
    fh.seek(start)
    parts = []
    while True:  # no newline lies in [start, offset): the first one from start ends the line
        block = fh.read(_BACK)
        if not block:
            line = b"".join(parts)
            return start, line, len(line)
        cut = block.find(b"\n")
        if cut >= 0:
            parts.append(block[:cut])
            line = b"".join(parts)
            return start, line, len(line) + 1
        parts.append(block)


def lines_around(fh, start: int, end: int, size: int, before: int, after: int) -> tuple[list, list]:
    """The whole lines around the one in [start, end) of a file of `size` bytes: those before it, in the file's
    order, back until their bytes (newlines included) reach `before`, and those after it until theirs reach
    `after` (fewer at the file's ends). What a drawn line is packed among in the job."""
    back, pos, got = [], start, 0
    while pos > 0 and got < before:
        first, line, length = _locate(fh, pos - 1)
        back.append(line)
        pos, got = first, got + length
    forth, pos, got = [], end, 0
    while pos < size and got < after:
        _, line, length = _locate(fh, pos)
        forth.append(line)
        pos, got = pos + length, got + length
    return back[::-1], forth


def keeps(seed: int, identity: str, index: int, fraction: float) -> bool:
    """The coin of record `index` of a file: kept when its keyed hash falls below the fraction."""
    h = hashlib.blake2b(f"{seed}:{identity}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") < fraction * 2**64


def coin_records(path: str, keys: tuple, fraction: float, seed: int, identity: str, *,
                 max_record_bytes: Optional[int] = None, txt_lines: bool = False) -> Iterator[tuple[float, object]]:
    """Every record of a file read whole: (the probability it was kept with, or 0 when it was not; the record).

    A document of s characters is kept with probability min(1, fraction * s / m), m the mean size of the
    documents read so far (this one included): in proportion to its size (transforms.core.estimate says why),
    its coin a keyed hash of the file and its place. Bad records are never kept (they are counted whole).
    """
    chars = count = 0
    for i, record in enumerate(read_records(path, keys, max_record_bytes, txt_lines=txt_lines)):
        if not isinstance(record, Document):
            yield 0.0, record
            continue
        size = sum(map(len, record.values))
        chars, count = chars + size, count + 1
        p = min(1.0, fraction * size * count / chars) if chars else min(1.0, fraction)
        p = max(p, 1e-9)
        yield (p if keeps(seed, identity, i, p) else 0.0), record
