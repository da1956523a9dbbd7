"""Edge cases of transforms.io.readers: block boundaries, exact dead-letter records, failing storage.

Every expected record is written out from the input by hand: the line numbers, reasons, previews and
details are what a user reads in the dead-letter output. Inputs are placed against the readers' read
blocks (1 MiB of a plain file, 256 KiB of compressed input), where streaming code goes wrong.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import tracemalloc
import zlib
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from fsspec.implementations.memory import MemoryFileSystem

from tests.helpers import make_tar, zst
from transforms.core import records as R
from transforms.core.records import BadRecord, Document
from transforms.io.readers import StreamPosition, common, file_size, parquet_shape, read_records

BLOCK = common._OUT_BLOCK  # bytes per read of a plain file
IN_BLOCK = common._IN_BLOCK  # compressed bytes per read
KEEP = R.RAW_PREVIEW_BYTES + 1  # raw bytes a record keeps: one more than the preview, so it can say "cut"
BOM = b"\xef\xbb\xbf"
GOOD_A = b'{"text": "alpha"}\n'
GOOD_B = b'{"text": "beta"}\n'


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def read(path: str, keys=("text",), cap=None, **part) -> list:
    return list(read_records(path, keys, cap, **part))


def line(n: int, fill: str = "x") -> bytes:
    """A JSON line {"text": "xxx..."} of exactly n bytes, without its newline."""
    assert n >= 12
    return b'{"text": "' + fill.encode() * (n - 12) + b'"}'


def text(n: int, fill: str = "x") -> str:
    return fill * (n - 12)


def filler(n: int) -> list[bytes]:
    """Short lines (100 to 200 bytes) that take exactly n bytes with their newlines."""
    lines = []
    while n >= 202:
        lines.append(line(100, "f"))
        n -= 101
    assert 101 <= n <= 201
    return lines + [line(n - 1, "f")]


def docs_of(lines: list[bytes], first: int = 0) -> list[Document]:
    return [Document(first + i, (json.loads(x)["text"],)) for i, x in enumerate(lines)]


def too_long(path: str, number: int, raw: bytes, cap: int, member=None) -> BadRecord:
    return BadRecord(path, number, R.TOO_LONG, raw[:KEEP], member, f"line longer than {cap} bytes")


# ---------------------------------------------------------------- a storage that fails, reads short, logs reads


class EdgeFS(MemoryFileSystem):
    """An in-memory store whose files can fail to open, read or seek, return short reads, and log reads."""

    protocol = "readersedge"
    store: dict = {}
    pseudo_dirs = [""]
    behaviour: dict = {}  # path -> {"open": exc, "info": exc, "seek": exc, "read": (offset, exc), "chunk": n}
    reads: list = []  # the size of every read asked for

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("readersedge://"))

    def _open(self, path, mode="rb", **kwargs):
        f = super()._open(path, mode, **kwargs)
        how = self.behaviour.get(self._strip_protocol(path), {})
        if "open" in how:
            raise how["open"]
        return _EdgeFile(f.getvalue(), how, self.reads)

    def info(self, path, **kwargs):
        how = self.behaviour.get(self._strip_protocol(path), {})
        if "info" in how:
            raise how["info"]
        return super().info(path, **kwargs)


class _EdgeFile(io.BytesIO):
    def __init__(self, data: bytes, how: dict, reads: list):
        super().__init__(data)
        self._how, self._reads = how, reads

    def read(self, size=-1):
        self._reads.append(size)
        if "read" in self._how:
            offset, error = self._how["read"]
            end = len(self.getbuffer()) if size is None or size < 0 else self.tell() + size
            if end > offset:  # a read reaching past `offset` fails
                raise error
        if "chunk" in self._how and (size is None or size < 0 or size > self._how["chunk"]):
            size = self._how["chunk"]
        return super().read(size)

    def seek(self, *args):
        if "seek" in self._how:
            raise self._how["seek"]
        return super().seek(*args)


fsspec.register_implementation("readersedge", EdgeFS, clobber=True)


@pytest.fixture
def edge():
    fs = EdgeFS()

    def put(name: str, data: bytes, **how) -> str:
        fs.pipe(f"/e/{name}", data)
        EdgeFS.behaviour[f"/e/{name}"] = how
        return f"readersedge://e/{name}"

    yield put
    EdgeFS.behaviour.clear()
    EdgeFS.store.clear()
    EdgeFS.reads.clear()


# ---------------------------------------------------------------- arguments


def test_caller_mistakes_say_what_is_wrong(tmp_path):
    jsonl = write(tmp_path, "a.jsonl", GOOD_A)
    parquet = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"text": ["x"]}), parquet)
    with pytest.raises(ValueError, match=r"^read_records needs at least one key$"):
        read(jsonl, keys=())
    with pytest.raises(ValueError, match=r"^max_record_bytes must be positive, got 0$"):
        read(jsonl, cap=0)
    with pytest.raises(ValueError, match="^" + re.escape(f"only .parquet files are read by row range: {jsonl}") + "$"):
        read(jsonl, rows=(0, 1))
    with pytest.raises(ValueError, match="^" + re.escape(f"only .jsonl files are read by byte range: {parquet}") + "$"):
        read(parquet, byte_range=(0, 1))
    with pytest.raises(ValueError, match="^" + re.escape(f"only .jsonl files are read by byte range: {parquet}") + "$"):
        read(parquet, first_line=3)


def test_a_cap_of_one_byte_is_allowed(tmp_path):
    path = write(tmp_path, "a.jsonl", b'1\n""\n')
    assert read(path, cap=1) == [
        BadRecord(path, 1, R.NOT_A_STRING, b"1", None, "line is a JSON int"),
        BadRecord(path, 2, R.TOO_LONG, b'""', None, "line longer than 1 bytes"),
    ]


# ---------------------------------------------------------------- what a bad line's record says


@pytest.mark.parametrize("raw, reason, detail", [
    (b"", R.BLANK_LINE, "blank line"),
    (b" \t\r", R.BLANK_LINE, "blank line"),
    (b"null", R.NULL_TEXT, "line is null"),
    (b"42", R.NOT_A_STRING, "line is a JSON int"),
    (b"1.5", R.NOT_A_STRING, "line is a JSON float"),
    (b'["a"]', R.NOT_A_STRING, "line is a JSON list"),
    (b"true", R.NOT_A_STRING, "line is a JSON bool"),
    (b'{"text": null}', R.NULL_TEXT, "key 'text' is NoneType"),
    (b'{"text": 7}', R.NOT_A_STRING, "key 'text' is int"),
    (b'{"text": ["a", 2]}', R.NOT_A_STRING, "key 'text' is list"),
    (b'{"text": {"a": "b"}}', R.NOT_A_STRING, "key 'text' is dict"),
    (b'{"body": "x"}', R.MISSING_KEY, "key 'text' not found"),
    (b'{"text": "a\\ud800"}', R.INVALID_UTF8, "unpaired surrogate escape"),
    (b'{"text": ["a", "\\udfff"]}', R.INVALID_UTF8, "unpaired surrogate escape"),
    (b'{"text": "caf\xe9"}', R.INVALID_UTF8, "invalid UTF-8 at byte 13"),
    (b'{"text": "a" "b"}', R.JSON_DECODE, "Expecting ',' delimiter: line 1 column 14 (char 13)"),
    (b"{bad", R.JSON_DECODE, "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
])
def test_a_bad_line_is_one_record_that_says_why(tmp_path, raw, reason, detail):
    path = write(tmp_path, "a.jsonl", GOOD_A + raw + b"\n" + GOOD_B)
    assert read(path) == [Document(0, ("alpha",)), BadRecord(path, 2, reason, raw, None, detail),
                          Document(2, ("beta",))]


def test_multi_key_records_say_which_key(tmp_path):
    data = b'{"prompt": "p", "completion": 3}\n"bare"\n{"prompt": "p"}\n'
    path = write(tmp_path, "a.jsonl", data)
    assert read(path, keys=("prompt", "completion")) == [
        BadRecord(path, 1, R.NOT_A_STRING, b'{"prompt": "p", "completion": 3}', None, "key 'completion' is int"),
        BadRecord(path, 2, R.MISSING_KEY, b'"bare"', None, "a bare string has no keys ['prompt', 'completion']"),
        BadRecord(path, 3, R.MISSING_KEY, b'{"prompt": "p"}', None, "key 'completion' not found"),
    ]


# ---------------------------------------------------------------- line length against the cap and the blocks


def test_lines_of_the_cap_are_documents_and_one_byte_more_is_too_long(tmp_path):
    cap = 100
    lines = [line(99), line(100), line(101), line(12), line(100)]
    path = write(tmp_path, "a.jsonl", b"\n".join(lines))  # the last line, of exactly the cap, has no newline
    assert read(path, cap=cap) == [
        Document(0, (text(99),)), Document(1, (text(100),)), too_long(path, 3, lines[2], cap),
        Document(3, ("",)), Document(4, (text(100),)),
    ]
    last = write(tmp_path, "b.jsonl", GOOD_A + line(101))
    assert read(last, cap=cap) == [Document(0, ("alpha",)), too_long(last, 2, line(101), cap)]


def test_a_first_line_of_exactly_the_cap_across_a_block_boundary(tmp_path):
    # The line fills the first read block; its newline is the first byte of the second.
    exact = write(tmp_path, "a.jsonl", line(BLOCK) + b"\n" + GOOD_B)
    assert read(exact, cap=BLOCK) == [Document(0, (text(BLOCK),)), Document(1, ("beta",))]
    over = write(tmp_path, "b.jsonl", line(BLOCK + 1) + b"\n" + GOOD_B)
    assert read(over, cap=BLOCK) == [too_long(over, 1, line(BLOCK + 1), BLOCK), Document(1, ("beta",))]


def test_a_line_of_exactly_the_cap_filling_a_block_after_one_that_ends_a_line(tmp_path):
    # Block 1 ends inside line 1; block 2 ends exactly with line 2's newline; line 3 is all of block 3.
    lines = [line(BLOCK - 50), line(100), line(BLOCK - 53), line(BLOCK), GOOD_B[:-1]]
    data = b"\n".join(lines) + b"\n"
    assert data.index(lines[3]) == 2 * BLOCK
    path = write(tmp_path, "a.jsonl", data)
    assert read(path, cap=BLOCK) == [Document(0, (text(BLOCK - 50),)), Document(1, (text(100),)),
                                     Document(2, (text(BLOCK - 53),)), Document(3, (text(BLOCK),)),
                                     Document(4, ("beta",))]


def test_lines_too_long_across_several_blocks_keep_their_neighbours(tmp_path):
    cap = 1000
    first = line(2 * BLOCK + 300)  # a block without any newline in its middle
    short = [line(20, "c"), line(21, "d"), line(22, "e")]  # in the block where the long line ends
    head = GOOD_A + first + b"\n" + b"\n".join(short) + b"\n"
    second = line(4 * BLOCK - len(head))  # its newline is exactly the first byte of block 5
    data = head + second + b"\n" + GOOD_B + b'"last"\n'
    assert data.index(second) + len(second) == 4 * BLOCK
    path = write(tmp_path, "a.jsonl", data)
    assert read(path, cap=cap) == [
        Document(0, ("alpha",)), too_long(path, 2, first, cap),
        Document(2, (text(20, "c"),)), Document(3, (text(21, "d"),)), Document(4, (text(22, "e"),)),
        too_long(path, 6, second, cap), Document(6, ("beta",)), Document(7, ("last",)),
    ]


def test_the_preview_of_a_long_line_that_starts_just_before_a_block_boundary(tmp_path):
    before, long = filler(BLOCK - 10), line(BLOCK + 500, "y")  # `long` starts 10 bytes before block 2
    path = write(tmp_path, "a.jsonl", b"\n".join(before + [long]) + b"\n" + GOOD_B)
    n = len(before)
    assert read(path, cap=1000) == docs_of(before) + [too_long(path, n + 1, long, 1000), Document(n + 1, ("beta",))]


def test_a_line_of_exactly_the_cap_right_after_a_line_too_long(tmp_path):
    cap = BLOCK - 501
    first = line(BLOCK + 500)  # too long; ends 500 bytes into block 2
    exact = line(cap)  # fills the rest of block 2; its newline starts block 3
    path = write(tmp_path, "a.jsonl", first + b"\n" + exact + b"\n" + GOOD_B)
    assert read(path, cap=cap) == [too_long(path, 1, first, cap), Document(1, (text(cap),)),
                                   Document(2, ("beta",))]


def test_a_last_line_without_newline_across_a_block_boundary(tmp_path):
    last = line(100, "z")  # starts 10 bytes before block 2
    path = write(tmp_path, "a.jsonl", line(BLOCK - 11) + b"\n" + last)
    assert read(path) == [Document(0, (text(BLOCK - 11),)), Document(1, (text(100, "z"),))]


def test_a_last_line_without_newline_longer_than_a_cap_of_several_blocks(tmp_path):
    cap = BLOCK + BLOCK // 2
    last = line(2 * BLOCK + BLOCK // 2)
    path = write(tmp_path, "a.jsonl", GOOD_A + last)
    assert read(path, cap=cap) == [Document(0, ("alpha",)), too_long(path, 2, last, cap)]


# ---------------------------------------------------------------- numbering, byte order marks, byte ranges


def test_lines_are_numbered_from_first_line(tmp_path):
    path = write(tmp_path, "a.jsonl", BOM + GOOD_A + b"{bad\n" + GOOD_B)
    assert read(path, first_line=5) == [
        Document(5, ("alpha",)),
        BadRecord(path, 7, R.JSON_DECODE, b"{bad", None,
                  "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        Document(7, ("beta",)),
    ]


def test_a_byte_order_mark_counts_only_at_the_start_of_the_file(tmp_path):
    data = GOOD_A + BOM + GOOD_B
    path = write(tmp_path, "a.jsonl", data)
    bad = BadRecord(path, 2, R.JSON_DECODE, BOM + GOOD_B[:-1], None, "Expecting value: line 1 column 1 (char 0)")
    assert read(path) == [Document(0, ("alpha",)), bad]
    start = len(GOOD_A)
    assert read(path, byte_range=(start, None), first_line=1) == [bad]
    assert read(path, byte_range=(start, start + 1), first_line=1) == [bad]
    assert read(path, byte_range=(0, start), first_line=0) == [Document(0, ("alpha",))]


def _layout(seed: int) -> tuple[bytes, list[int], list[bytes]]:
    """A file of a 2.5 MiB line and then lines of 3-9 kB: its bytes, line starts and lines."""
    rng = random.Random(seed)
    lines = [line(2 * BLOCK + BLOCK // 2, "L")]
    while sum(len(x) + 1 for x in lines) < 5 * BLOCK:
        lines.append(line(rng.randint(3000, 9000), rng.choice("abcdef")))
    starts, at = [], 0
    for x in lines:
        starts.append(at)
        at += len(x) + 1
    return b"\n".join(lines) + b"\n", starts, lines


def test_byte_ranges_hold_the_lines_that_start_in_them_across_blocks(tmp_path):
    data, starts, lines = _layout(7)
    path = write(tmp_path, "a.jsonl", data)
    s1, size = starts[1], len(data)
    points = sorted({0, 1, BLOCK - 1, BLOCK, s1 - 1, s1, s1 + 1, 3 * BLOCK, 3 * BLOCK + 1, 4 * BLOCK + 7,
                     size - 1, size})
    windows = [(a, b) for a in points for b in points if b > a and (b - a < 2 * BLOCK or a in (0, 1))]
    windows += [(a, None) for a in points]
    for a, b in windows:
        numbers = [i for i, s in enumerate(starts) if a <= s and (b is None or s < b)]
        first = numbers[0] if numbers else 0
        expected = [Document(i, (json.loads(lines[i])["text"],)) for i in numbers]
        assert read(path, byte_range=(a, b), first_line=first) == expected, (a, b)


# ---------------------------------------------------------------- a failing storage


def test_a_file_that_cannot_be_opened(tmp_path, edge):
    missing = str(tmp_path / "missing.jsonl")
    [bad] = read(missing)
    assert (bad.source, bad.line, bad.reason, bad.raw, bad.member) == (missing, None, R.UNREADABLE_FILE, b"", None)
    assert bad.detail.startswith("cannot open: ") and "missing.jsonl" in bad.detail
    forbidden = edge("f.jsonl", GOOD_A, open=PermissionError("forbidden"))
    assert read(forbidden) == [BadRecord(forbidden, None, R.UNREADABLE_FILE, b"", None, "cannot open: forbidden")]
    flaky = edge("g.jsonl", GOOD_A, open=TimeoutError("timed out"))
    with pytest.raises(TimeoutError):
        read(flaky)


@pytest.mark.parametrize("name, blob", [
    ("a.jsonl", GOOD_A * 1000), ("a.txt", GOOD_A * 1000), ("a.jsonl.zst", zst(GOOD_A * 1000)),
    ("a.json.gz", gzip.compress(GOOD_A * 1000)),
])
@pytest.mark.parametrize("error, detail", [(PermissionError("forbidden"), "read error: forbidden"),
                                           (PermissionError(), "read error: PermissionError")])
def test_a_file_that_cannot_be_read_at_all(edge, name, blob, error, detail):
    url = edge(name, blob, read=(0, error))
    assert read(url) == [BadRecord(url, None, R.UNREADABLE_FILE, b"", None, detail)]


def test_a_read_error_after_a_block_that_ends_a_line(edge):
    first = line(BLOCK - 1)  # with its newline, exactly the first block
    url = edge("a.jsonl", first + b"\n" + GOOD_B, read=(BLOCK, PermissionError("forbidden")))
    assert read(url) == [Document(0, (text(BLOCK - 1),)),
                         BadRecord(url, 2, R.TRUNCATED_STREAM, b"", None, "read error: forbidden")]


@pytest.mark.parametrize("cap", [None, 1000])  # the partial line is held, or only its preview
def test_a_read_error_inside_a_line_keeps_its_start_as_the_preview(edge, cap):
    first = line(BLOCK + 100)
    url = edge("a.jsonl", first + b"\n" + GOOD_B, read=(BLOCK, PermissionError("forbidden")))
    assert read(url, cap=cap) == [
        BadRecord(url, 1, R.TRUNCATED_STREAM, first[:KEEP], None, "read error: forbidden")]
    before, long = filler(BLOCK - 10), line(BLOCK + 500)  # `long` starts 10 bytes before block 2, ends in block 3
    url = edge("b.jsonl", b"\n".join(before + [long]) + b"\n", read=(2 * BLOCK, PermissionError("forbidden")))
    assert read(url, cap=cap) == docs_of(before) + [
        BadRecord(url, len(before) + 1, R.TRUNCATED_STREAM, long[:KEEP], None, "read error: forbidden")]


def test_a_seek_error_before_a_byte_range(edge):
    url = edge("a.jsonl", GOOD_A + GOOD_B, seek=PermissionError("forbidden"))
    assert read(url, byte_range=(5, None), first_line=1) == [
        BadRecord(url, None, R.UNREADABLE_FILE, b"", None, "seek error: forbidden")]
    flaky = edge("b.jsonl", GOOD_A + GOOD_B, seek=ConnectionResetError("reset"))
    with pytest.raises(ConnectionResetError):
        read(flaky, byte_range=(5, 100), first_line=1)


PARQUET = io.BytesIO()
pq.write_table(pa.table({"text": [f"doc {i}" for i in range(3000)]}), PARQUET, row_group_size=1000)
FORMATS = {
    "a.jsonl": GOOD_A * 3000,
    "a.txt": GOOD_A * 3000,
    "a.jsonl.zst": zst(GOOD_A * 3000),
    "a.json.gz": gzip.compress(GOOD_A * 3000),
    "a.jsonl.zst.tar": make_tar([("m.jsonl.zst", zst(GOOD_A * 3000))]),
    "a.parquet": PARQUET.getvalue(),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("where", ["start", "middle"])
def test_a_transient_storage_error_is_raised_for_a_retry(edge, name, where):
    blob = FORMATS[name]
    url = edge(name, blob, read=(0 if where == "start" else len(blob) // 2, TimeoutError("timed out")))
    with pytest.raises(TimeoutError):
        read(url)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_reads_are_bounded_blocks(edge, name):
    """Everything streams: no read asks the storage for the whole file, or for more than a block."""
    url = edge(name, FORMATS[name] if name != "a.txt" else GOOD_A * 200_000)
    assert not any(isinstance(r, BadRecord) for r in read(url))
    assert EdgeFS.reads and all(type(n) is int and 0 < n <= BLOCK for n in EdgeFS.reads), EdgeFS.reads


def test_short_reads_give_the_same_records(edge):
    jsonl = GOOD_A + b"{bad\n" + line(40) + b"\n" + line(30, "q")  # the last line has no newline
    url = edge("a.jsonl", jsonl, chunk=7)
    assert read(url, cap=35) == [
        Document(0, ("alpha",)),
        BadRecord(url, 2, R.JSON_DECODE, b"{bad", None,
                  "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        too_long(url, 3, line(40), 35), Document(3, (text(30, "q"),))]
    long = line(3000)
    url = edge("b.jsonl", long + b"\n" + GOOD_B, chunk=100)
    assert read(url, cap=2000) == [too_long(url, 1, long, 2000), Document(1, ("beta",))]
    words = "".join(f"word {i} " for i in range(500)).encode()
    url = edge("c.txt", words, chunk=100)
    assert read(url) == [Document(0, (words.decode(),))]
    assert read(url, cap=len(words) - 1) == [
        BadRecord(url, None, R.TOO_LONG, words[:KEEP], None, f"file longer than {len(words) - 1} bytes")]


def test_stream_position_counts_the_bytes_taken_from_storage(tmp_path):
    data = (line(1000) + b"\n") * 2700  # 2.6 MiB: three reads
    for name, blob in [("a.jsonl", data), ("a.jsonl.zst", zst(data)), ("a.json.gz", gzip.compress(data))]:
        position = StreamPosition()
        assert position.bytes == 0
        assert len(list(read_records(write(tmp_path, name, blob), ("text",), position=position))) == 2700
        assert position.bytes == len(blob), name


def test_a_decoder_reading_with_readinto_is_counted_too():
    position = StreamPosition()
    f = common._StorageFile(io.BytesIO(b"abcdef"), position)
    buffer = bytearray(4)
    assert f.readinto(buffer) == 4 and bytes(buffer) == b"abcd" and position.bytes == 4
    assert f.readinto(buffer) == 2 and bytes(buffer[:2]) == b"ef" and position.bytes == 6
    assert f.readinto(buffer) == 0 and position.bytes == 6
    assert common._StorageFile(io.BytesIO(b"ab")).readinto(buffer) == 2  # nobody counting


# ---------------------------------------------------------------- .jsonl.zst


def _hex_lines(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)  # random hex: compresses to about half, so the stream spans several blocks
    return [json.dumps({"text": rng.randbytes(rng.randint(20, 400)).hex()}).encode() for _ in range(n)]


def _expected_cut(path: str, decoded: bytes, detail: str) -> list:
    """The records of a stream cut short: its complete lines, then the partial one as TRUNCATED_STREAM."""
    *complete, partial = decoded.split(b"\n")
    return [Document(i, (json.loads(x)["text"],)) for i, x in enumerate(complete)] + [
        BadRecord(path, len(complete) + 1, R.TRUNCATED_STREAM, partial[:KEEP], None, detail)]


def test_zst_single_frame_cut_short(tmp_path):
    blob = zst(b"\n".join(_hex_lines(3000, 1)) + b"\n")
    cut = 600_000
    assert len(blob) > cut > 2 * IN_BLOCK
    path = write(tmp_path, "a.jsonl.zst", blob[:cut])
    decoded = zstandard.ZstdDecompressor().decompressobj().decompress(blob[:cut])
    assert read(path) == _expected_cut(path, decoded, f"zstd stream ends mid-frame after {cut} compressed bytes")


def test_zst_damage_after_an_empty_frame_is_a_truncation(tmp_path):
    path = write(tmp_path, "a.jsonl.zst", zst(b"") + b"not zstd at all")
    detail = "corrupt zstd data: zstd decompressor error: Unknown frame descriptor"
    assert read(path) == [BadRecord(path, 1, R.TRUNCATED_STREAM, b"", None, detail)]
    path = write(tmp_path, "b.jsonl.zst", b"not zstd at all")
    assert read(path) == [BadRecord(path, None, R.UNREADABLE_FILE, b"", None, detail)]


def _zst_with_a_corrupt_block(data: bytes, after: int) -> tuple[bytes, int]:
    """`data` as one zstd frame whose first block starting past `after` is marked with the reserved block type."""
    blob = bytearray(zst(data))
    at = zstandard.frame_header_size(bytes(blob))
    while True:
        header = int.from_bytes(blob[at:at + 3], "little")
        if at > after:
            blob[at:at + 3] = (header | 0b110).to_bytes(3, "little")  # type 3: reserved
            return bytes(blob), at
        assert not header & 1, "no block starts past `after`"
        at += 3 + (1 if (header >> 1) & 3 == 1 else header >> 3)


def _gz_with_a_corrupt_block(data: bytes, after: int) -> tuple[bytes, int]:
    """The lines of `data` up to about `after` compressed bytes as gzip, then a deflate block of reserved type."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    blob, start = b"", 0
    while len(blob) <= after:
        end = data.index(b"\n", start + 10_000) + 1
        blob += packer.compress(data[start:end]) + packer.flush(zlib.Z_FULL_FLUSH)  # ends on a byte boundary
        start = end
    return blob + b"\x06" + b"after the damage" * 100, len(blob)  # 0x06: BTYPE 11, reserved


@pytest.mark.parametrize("fmt", ["jsonl.zst", "json.gz"])
def test_damage_inside_a_stream_loses_at_most_the_read_block_that_holds_it(tmp_path, fmt):
    lines = _hex_lines(4000, 5)
    data = b"\n".join(lines) + b"\n"
    if fmt == "jsonl.zst":
        blob, at = _zst_with_a_corrupt_block(data, IN_BLOCK + 1000)
        detail = "corrupt zstd data: zstd decompressor error: Data corruption detected"

        def decoded(n: int) -> bytes:
            return zstandard.ZstdDecompressor().decompressobj().decompress(blob[:n])
    else:
        blob, at = _gz_with_a_corrupt_block(data, IN_BLOCK + 1000)
        detail = "corrupt gzip data: Error -3 while decompressing data: invalid block type"

        def decoded(n: int) -> bytes:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[:n])
    assert IN_BLOCK < at < 2 * IN_BLOCK  # the damage is in the second read block
    path = write(tmp_path, f"a.{fmt}", blob)
    *docs, bad = read(path)
    # Kept: at least the lines of the first read block, at most those before the damage.
    assert decoded(IN_BLOCK).count(b"\n") <= len(docs) <= decoded(at).count(b"\n")
    assert docs == docs_of(lines[:len(docs)])
    assert bad == BadRecord(path, len(docs) + 1, R.TRUNCATED_STREAM, bad.raw, None, detail)
    assert lines[len(docs)].startswith(bad.raw)


# ---------------------------------------------------------------- .json.gz

GZIP_HEADER_ERROR = "corrupt gzip data: Error -3 while decompressing data: incorrect header check"


def test_gzip_damage_after_a_member(tmp_path):
    path = write(tmp_path, "a.json.gz", gzip.compress(b"") + b"XX")
    assert read(path) == [BadRecord(path, 1, R.TRUNCATED_STREAM, b"", None, GZIP_HEADER_ERROR)]
    path = write(tmp_path, "b.json.gz", gzip.compress(GOOD_A) + b"garbage!")
    assert read(path) == [Document(0, ("alpha",)), BadRecord(path, 2, R.TRUNCATED_STREAM, b"", None,
                                                             GZIP_HEADER_ERROR)]


def test_a_zlib_stream_is_not_gzip(tmp_path):
    path = write(tmp_path, "a.json.gz", zlib.compress(GOOD_A))
    assert read(path) == [BadRecord(path, None, R.UNREADABLE_FILE, b"", None, GZIP_HEADER_ERROR)]


def test_gzip_zero_padding_longer_than_a_block(tmp_path):
    path = write(tmp_path, "a.json.gz", gzip.compress(GOOD_A) + bytes(IN_BLOCK + 1000) + gzip.compress(GOOD_B))
    assert read(path) == [Document(0, ("alpha",)), Document(1, ("beta",))]


def test_gzip_cut_short(tmp_path):
    blob = gzip.compress(b"\n".join(_hex_lines(3000, 2)) + b"\n")
    cut = 2 * IN_BLOCK + 12345
    path = write(tmp_path, "a.json.gz", blob[:cut])
    decoded = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[:cut])
    assert read(path) == _expected_cut(path, decoded, "gzip stream ends mid-member")


def test_gzip_cut_where_its_output_crosses_a_block(tmp_path):
    """The cut falls where the decoded text passes 1 MiB, in the middle of a back-reference."""
    rng = random.Random(3)
    words = [bytes(rng.choice(b"abc") for _ in range(rng.randint(1, 4))) for _ in range(20)]
    data = b"".join(b'{"text": "' + b" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) + b'"}\n'
                    for _ in range(10_000))
    blob = gzip.compress(data, 6)

    def decoded(n: int) -> bytes:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[:n])

    lo, hi = 0, len(blob)  # the shortest cut that decodes to a block or more
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(decoded(mid)) >= BLOCK else (mid + 1, hi)
    assert lo < IN_BLOCK  # all of it in one read
    for cut in range(lo - 2, lo + 3):
        path = write(tmp_path, f"{cut}.json.gz", blob[:cut])
        assert read(path) == _expected_cut(path, decoded(cut), "gzip stream ends mid-member"), cut


def test_a_huge_gzip_line_is_never_decoded_at_once(tmp_path):
    size = 64 << 20
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    blob = b"".join(packer.compress(b" " * (1 << 20)) for _ in range(size >> 20)) + packer.compress(b"\n")
    blob += packer.flush()
    assert len(blob) < IN_BLOCK  # one read holds what decodes to 64 MiB
    path = write(tmp_path, "a.json.gz", blob + gzip.compress(GOOD_B))
    tracemalloc.start()
    try:
        records = read(path, cap=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert records == [too_long(path, 1, b" " * KEEP, 1000)] + [Document(1, ("beta",))]
    assert peak < 16 << 20, peak


# ---------------------------------------------------------------- .jsonl.zst.tar


def test_tar_entries_that_are_not_files_are_skipped(tmp_path):
    blob = make_tar([("d", None), ("d/m0.jsonl.zst", zst(GOOD_A)), ("e", None), ("m1.jsonl.zst", zst(GOOD_B))])
    path = write(tmp_path, "a.jsonl.zst.tar", blob)
    assert read(path) == [Document(0, ("alpha",), "d/m0.jsonl.zst"), Document(0, ("beta",), "m1.jsonl.zst")]


def test_every_record_of_a_tar_member_names_it(tmp_path):
    long = line(2000)
    member = b'{"text": ["p1", "p2"]}\n"bare"\n' + long + b'\n\n{"text": ["a", 1]}\n'
    path = write(tmp_path, "a.jsonl.zst.tar", make_tar([("m.jsonl.zst", zst(member))]))
    assert read(path, cap=1000) == [
        Document(0, ("p1\n\np2",), "m.jsonl.zst"),
        Document(1, ("bare",), "m.jsonl.zst"),
        too_long(path, 3, long, 1000, "m.jsonl.zst"),
        BadRecord(path, 4, R.BLANK_LINE, b"", "m.jsonl.zst", "blank line"),
        BadRecord(path, 5, R.NOT_A_STRING, b'{"text": ["a", 1]}', "m.jsonl.zst", "key 'text' is list"),
    ]


def test_tar_damage_records(tmp_path):
    m0 = zst(GOOD_A)
    one = make_tar([("m0.jsonl.zst", m0)])
    cases = {
        "not a tar": (b"hello, not a tar" * 100, [], "not a readable tar: invalid header"),
        "an end, then data": (bytes(512) + b"junk" * 100, [],
                              "corrupt tar: a header that is not a tar header, then 400 bytes that were not read"),
        "cut in the padding of a member": (one[:512 + len(m0) + 10], [Document(0, ("alpha",), "m0.jsonl.zst")],
                                           "corrupt tar after member 'm0.jsonl.zst': unexpected end of data"),
        "a bad header, then more than a block": (
            one[:1024] + b"\xff" * 512 + b"j" * (BLOCK + 1234), [Document(0, ("alpha",), "m0.jsonl.zst")],
            (f"corrupt tar after member 'm0.jsonl.zst': a header that is not a tar header, then {BLOCK + 1234} "
             "bytes that were not read")),
    }
    for name, (blob, docs, detail) in cases.items():
        path = write(tmp_path, "a.jsonl.zst.tar", blob)
        assert read(path) == docs + [BadRecord(path, None, R.UNREADABLE_FILE, b"", None, detail)], name


def test_a_tar_member_named_nothing_is_still_named_in_the_damage(tmp_path):
    unnamed = make_tar([("", zst(GOOD_A))])
    for blob, detail in [
        (unnamed[:1024] + b"\xff" * 512 + b"j" * 300,
         "corrupt tar after member '': a header that is not a tar header, then 300 bytes that were not read"),
        (unnamed[:1000], "corrupt tar after member '': unexpected end of data"),
    ]:
        path = write(tmp_path, "a.jsonl.zst.tar", blob)
        assert read(path) == [Document(0, ("alpha",), ""), BadRecord(path, None, R.UNREADABLE_FILE, b"", None,
                                                                      detail)]


def test_tar_data_after_a_bad_header_that_cannot_be_read(edge):
    # tarfile reads a first header, then 10 KiB records: the bad header ends the first record, and
    # reading the next one fails.
    blob = make_tar([("m0.jsonl.zst", zst(GOOD_A))] + [(f"d{i}", None) for i in range(18)])[:10240]
    blob += b"\xff" * 512 + b"j" * 15000
    url = edge("a.jsonl.zst.tar", blob, read=(10752, PermissionError("forbidden")))
    assert read(url) == [
        Document(0, ("alpha",), "m0.jsonl.zst"),
        BadRecord(url, None, R.UNREADABLE_FILE, b"", None,
                  "corrupt tar after member 'd17': a header that is not a tar header, then 1 bytes that were not read"),
    ]


# ---------------------------------------------------------------- .txt


def test_txt_records(tmp_path, edge):
    path = write(tmp_path, "a.txt", b"hello")
    assert read(path, keys=("prompt", "completion")) == [
        BadRecord(path, None, R.MISSING_KEY, b"", None, "a .txt file has one text, not keys ['prompt', 'completion']")]
    path = write(tmp_path, "b.txt", b"caf\xe9 au lait")
    assert read(path) == [BadRecord(path, None, R.INVALID_UTF8, b"caf\xe9 au lait", None, "invalid UTF-8 at byte 3")]
    url = edge("c.txt", b"hello", read=(0, PermissionError("forbidden")))
    assert read(url) == [BadRecord(url, None, R.UNREADABLE_FILE, b"", None, "read error: forbidden")]


def test_txt_of_the_cap_and_one_byte_more(tmp_path):
    data = b"t" * 2001
    assert read(write(tmp_path, "a.txt", data[:2000]), cap=2000) == [Document(0, ("t" * 2000,))]
    path = write(tmp_path, "b.txt", data)
    assert read(path, cap=2000) == [BadRecord(path, None, R.TOO_LONG, data[:KEEP], None, "file longer than 2000 bytes")]


def test_txt_longer_than_a_cap_of_several_blocks(tmp_path):
    data = b"t" * (2 * BLOCK + BLOCK // 2)
    cap = BLOCK + BLOCK // 2
    path = write(tmp_path, "a.txt", data)
    assert read(path, cap=cap) == [
        BadRecord(path, None, R.TOO_LONG, data[:KEEP], None, f"file longer than {cap} bytes")]


# ---------------------------------------------------------------- .parquet


def _write_parquet(tmp_path: Path, name: str, table: pa.Table, **kwargs) -> str:
    path = str(tmp_path / name)
    pq.write_table(table, path, **kwargs)
    return path


def _strings(values: list) -> pa.Array:
    """A string array straight from bytes (None: null), so that it can hold invalid UTF-8."""
    offsets, data, valid = [0], b"", []
    for v in values:
        data += v or b""
        offsets.append(len(data))
        valid.append(v is not None)
    mask = pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(pa.string(), len(values), [mask, pa.array(offsets, pa.int32()).buffers()[1],
                                                            pa.py_buffer(data)])


def _spoil(path: str, chunks: list[tuple[int, str]]) -> None:
    """Overwrite the bytes of the given (row group, column) chunks of a parquet file."""
    meta = pq.ParquetFile(path).metadata
    data = bytearray(Path(path).read_bytes())
    for group, name in chunks:
        g = meta.row_group(group)
        [column] = [g.column(c) for c in range(g.num_columns) if g.column(c).path_in_schema == name]
        data[column.data_page_offset:column.data_page_offset + column.total_compressed_size] = (
            b"\xff" * column.total_compressed_size)
    Path(path).write_bytes(bytes(data))


def test_parquet_file_level_records(tmp_path):
    path = write(tmp_path, "a.parquet", b"PAR1 not really a parquet file")
    [bad] = read(path)
    assert (bad.source, bad.line, bad.reason, bad.raw, bad.member) == (path, None, R.UNREADABLE_FILE, b"", None)
    assert bad.detail.startswith("not a readable parquet file: Parquet magic bytes not found in footer")
    path = _write_parquet(tmp_path, "b.parquet", pa.table({"n": [1], "body": ["x"]}))
    assert read(path) == [BadRecord(path, None, R.MISSING_KEY, b"", None,
                                    "column(s) ['text'] not in parquet file (has ['body', 'n'])")]
    twice = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"]), pa.array(["c"])], names=["text", "n", "text"])
    path = _write_parquet(tmp_path, "c.parquet", twice)
    assert read(path, keys=("n", "text")) == [
        BadRecord(path, None, R.UNREADABLE_FILE, b"", None,
                  "column(s) ['text'] appear more than once in the parquet file")]
    assert parquet_shape(path, ("text",)) is None  # read whole, so that the reader says it once
    assert parquet_shape(path, ("n",))[0] == 1


def test_parquet_values_that_are_not_text(tmp_path):
    table = pa.table({"text": _strings([None, b"\xff", b"ok", b"caf\xc3\xa9"]),
                      "n": pa.array([1, 2, 3, None], pa.int64()),
                      "l": pa.array([["a", None], ["b"], [], None], pa.list_(pa.string()))})
    path = _write_parquet(tmp_path, "a.parquet", table)
    assert read(path) == [
        BadRecord(path, 0, R.NULL_TEXT, b"None", None, "column 'text' is NoneType"),
        BadRecord(path, 1, R.INVALID_UTF8, b"\xff", None, "column 'text'"),
        Document(2, ("ok",)), Document(3, ("caf\u00e9",)),
    ]
    assert read(path, keys=("l", "n")) == [
        BadRecord(path, 0, R.NOT_A_STRING, b"['a', None]", None, "column 'l' is list"),
        BadRecord(path, 1, R.NOT_A_STRING, b"2", None, "column 'n' is int"),
        BadRecord(path, 2, R.NOT_A_STRING, b"3", None, "column 'n' is int"),
        BadRecord(path, 3, R.NULL_TEXT, b"None", None, "column 'l' is NoneType"),
    ]
    assert read(path, keys=("l", "text"))[1:3] == [
        BadRecord(path, 1, R.INVALID_UTF8, b"\xff", None, "column 'text'"),
        Document(2, ("", "ok")),
    ]


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
def test_parquet_invalid_utf8_inside_a_list_is_one_record(tmp_path, list_type):
    n = 10_000  # two slices of rows: the bad values are the last of the first and the first of the second
    strings = [b"p%d" % i for i in range(n)]
    strings[8191] = b"\xfe"
    strings[8192] = b"\xff"
    offsets = list(range(n)) + [n]
    offsets[8193:] = [o + 2 for o in offsets[8193:]]  # row 8192 holds three values: "a", null, b"\xff"
    values = _strings(strings[:8192] + [b"a", None] + strings[8192:])
    column = pa.LargeListArray if list_type is pa.large_list else pa.ListArray
    lists = column.from_arrays(pa.array(offsets, pa.int64() if list_type is pa.large_list else pa.int32()), values)
    path = _write_parquet(tmp_path, "a.parquet", pa.table({"text": lists}))
    records = read(path)
    assert len(records) == n
    assert records[8191] == BadRecord(path, 8191, R.INVALID_UTF8, b"\xfe", None, "column 'text'")
    assert records[8192] == BadRecord(path, 8192, R.INVALID_UTF8, b"a\n\n\xff", None, "column 'text'")
    assert records[:8191] == [Document(i, (f"p{i}",)) for i in range(8191)]
    assert records[8193:] == [Document(i, (f"p{i}",)) for i in range(8193, n)]


def test_parquet_values_beyond_python(tmp_path):
    far = pa.array([10 ** 15, 5_000], pa.timestamp("ms"))  # the year 33658, then 1970-01-01 00:00:05
    nested = pa.StructArray.from_arrays([_strings([b"ok", b"\xff"])], names=["a"])
    path = _write_parquet(tmp_path, "a.parquet", pa.table({"text": far, "s": nested}))
    assert read(path) == [
        BadRecord(path, 0, R.NOT_A_STRING, b"", None, "column 'text' is timestamp[ms]: date value out of range"),
        BadRecord(path, 1, R.NOT_A_STRING, b"datetime.datetime(1970, 1, 1, 0, 0, 5)", None,
                  "column 'text' is datetime"),
    ]
    assert read(path, keys=("s",)) == [
        BadRecord(path, 0, R.NOT_A_STRING, b"{'a': 'ok'}", None, "column 's' is dict"),
        BadRecord(path, 1, R.INVALID_UTF8, b"", None, "column 's'"),
    ]


def test_parquet_row_ranges_inside_row_groups_and_across_slices(tmp_path):
    table = pa.table({"text": [f"r{i}" for i in range(20_000)]})
    path = _write_parquet(tmp_path, "a.parquet", table, row_group_size=10_000)  # Python strings: 8192 rows at a time
    for lo, hi in [(15, 30), (9_990, 10_010), (100, 8_400), (8_191, 8_193), (10_000, 18_193), (19_999, 20_000)]:
        assert read(path, rows=(lo, hi)) == [Document(i, (f"r{i}",)) for i in range(lo, hi)], (lo, hi)


def test_parquet_reads_only_the_key_columns(tmp_path):
    table = pa.table({"text": [f"row {i}" for i in range(30)], "other": [f"o{i}" for i in range(30)]})
    path = _write_parquet(tmp_path, "a.parquet", table, row_group_size=10, use_dictionary=False)
    _spoil(path, [(0, "other"), (1, "other"), (2, "other")])
    assert read(path) == [Document(i, (f"row {i}",)) for i in range(30)]


def test_parquet_row_group_that_cannot_be_read(tmp_path):
    table = pa.table({"text": [f"row {i}" for i in range(30)]})
    path = _write_parquet(tmp_path, "a.parquet", table, row_group_size=10, use_dictionary=False)
    _spoil(path, [(1, "text")])
    records = read(path)
    assert records[:10] == [Document(i, (f"row {i}",)) for i in range(10)]
    assert records[11:] == [Document(i, (f"row {i}",)) for i in range(20, 30)]
    bad = records[10]
    assert (bad.source, bad.line, bad.reason, bad.raw, bad.member) == (path, 10, R.UNREADABLE_FILE, b"", None)
    assert bad.detail.startswith("row group 1 (10 rows) unreadable: Couldn't deserialize thrift")
    # A row range that ends where the bad group starts, or starts where it ends, never touches it.
    assert read(path, rows=(0, 10)) == records[:10]
    assert read(path, rows=(20, 30)) == records[11:]
    spoiled_first = _write_parquet(tmp_path, "b.parquet", table, row_group_size=10, use_dictionary=False)
    _spoil(spoiled_first, [(0, "text")])
    assert read(spoiled_first, rows=(10, 20)) == [Document(i, (f"row {i}",)) for i in range(10, 20)]


# ---------------------------------------------------------------- planning: file_size, parquet_shape


def test_file_size(tmp_path, edge):
    assert file_size(write(tmp_path, "a.jsonl", GOOD_A)) == len(GOOD_A)
    assert file_size(str(tmp_path)) is None  # a directory
    assert file_size(str(tmp_path / "missing.jsonl")) is None
    assert file_size(edge("b.jsonl", GOOD_A * 3)) == 3 * len(GOOD_A)
    assert file_size(edge("c.jsonl", GOOD_A, info=PermissionError("forbidden"))) is None
    with pytest.raises(TimeoutError):
        file_size(edge("d.jsonl", GOOD_A, info=TimeoutError("timed out")))


def test_parquet_shape_of_list_columns_and_several_keys(tmp_path):
    table = pa.table({"text": pa.array([["a", "b"], ["c"]] * 50), "n": list(range(100)), "x": [1.5] * 100})
    path = _write_parquet(tmp_path, "a.parquet", table, row_group_size=30)
    rows, text_bytes = parquet_shape(path, ("text",))
    assert rows == 100 and text_bytes > 0
    # The bytes of several columns are the sum of each column's.
    assert parquet_shape(path, ("text", "n")) == (100, text_bytes + parquet_shape(path, ("n",))[1])
    assert parquet_shape(path, ("text", "body")) is None


def test_parquet_shape_errors(tmp_path, edge):
    blob = FORMATS["a.parquet"]
    assert parquet_shape(edge("a.parquet", blob), ("text",))[0] == 3000
    assert parquet_shape(edge("b.parquet", blob, open=PermissionError("forbidden")), ("text",)) is None
    assert parquet_shape(edge("c.parquet", blob, read=(0, PermissionError("forbidden"))), ("text",)) is None
    with pytest.raises(TimeoutError):
        parquet_shape(edge("d.parquet", blob, open=TimeoutError("timed out")), ("text",))
    with pytest.raises(TimeoutError):
        parquet_shape(edge("e.parquet", blob, read=(0, TimeoutError("timed out"))), ("text",))


def test_byte_ranges_partition_a_file_with_empty_lines(tmp_path):
    # An empty line is one b"\n": a range that ends just after it (its last byte is the line) must stop
    # there and not run on into the next line, which the next range reads.
    data = b'\n{"text": "a"}\n\n\n{"text": "b"}\n\n{"text": "c"}\n'
    path = write(tmp_path, "a.jsonl", data)
    whole = read(path)
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")][:-1]
    size = len(data)
    for a in range(size + 1):
        for b in range(a, size + 1):
            parts = []
            for lo, hi in ((0, a), (a, b), (b, None)):
                if hi is None or hi > lo:
                    first = sum(1 for s in starts if s < lo)
                    parts += read(path, byte_range=(lo, hi), first_line=first)
            assert parts == whole, (a, b)
