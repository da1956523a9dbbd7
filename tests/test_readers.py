"""Tests for transforms.io.readers: every format, every dead-letter reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import make_tar, zst
from transforms.core import records as R
from transforms.core.records import BadRecord, Document
from transforms.io.readers import read_records

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE = SHARED / "reference"


# ---------------------------------------------------------------- helpers


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def read(path: str, keys=("text",)) -> list:
    return list(read_records(path, keys))


def docs(records) -> list[Document]:
    return [r for r in records if isinstance(r, Document)]


def bads(records) -> list[BadRecord]:
    return [r for r in records if isinstance(r, BadRecord)]


def jline(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def make_parquet(tmp_path: Path, name: str, table: pa.Table, **kwargs) -> str:
    path = tmp_path / name
    pq.write_table(table, path, **kwargs)
    return str(path)


GOOD_A = jline({"text": "alpha"})
GOOD_B = jline({"text": "beta"})


# ---------------------------------------------------------------- .jsonl


def test_jsonl_objects_strings_and_lists(tmp_path):
    data = (
        jline({"text": "one", "other": 1})
        + jline("bare string")
        + jline({"text": ["para 1", "para 2"]})
        + jline({"text": ""})
    )
    records = read(write(tmp_path, "a.jsonl", data))
    assert records == [
        Document(0, ("one",)),
        Document(1, ("bare string",)),
        Document(2, ("para 1\n\npara 2",)),
        Document(3, ("",)),
    ]


def test_jsonl_other_single_key_takes_bare_strings(tmp_path):
    data = jline({"body": "x", "text": "ignored"}) + jline("  bare  ")
    records = read(write(tmp_path, "a.jsonl", data), keys=("body",))
    assert records == [Document(0, ("x",)), Document(1, ("  bare  ",))]


def test_jsonl_multi_key(tmp_path):
    data = (
        jline({"prompt": "p", "completion": ["c1", "c2"]})
        + jline("bare")
        + jline({"prompt": "p2"})
    )
    records = read(write(tmp_path, "s.jsonl", data), keys=("prompt", "completion"))
    assert records[0] == Document(0, ("p", "c1\n\nc2"))
    assert [(b.line, b.reason) for b in records[1:]] == [(2, R.MISSING_KEY), (3, R.MISSING_KEY)]
    assert "completion" in records[2].detail


BAD_LINES = {
    "malformed": (b'{"text": "oops', R.JSON_DECODE),
    "trailing_garbage": (b'{"text": "a"} x', R.JSON_DECODE),
    "two_objects_split_by_cr": (b'{"text": "a"}\r{"text": "b"}', R.JSON_DECODE),
    "blank": (b"", R.BLANK_LINE),
    "whitespace": (b" \t ", R.BLANK_LINE),
    "null": (b'{"text": null}', R.NULL_TEXT),
    "number": (b'{"text": 5}', R.NOT_A_STRING),
    "bool": (b'{"text": true}', R.NOT_A_STRING),
    "dict": (b'{"text": {"a": "b"}}', R.NOT_A_STRING),
    "list_of_non_strings": (b'{"text": ["a", 1]}', R.NOT_A_STRING),
    "missing_key": (b'{"other": "x"}', R.MISSING_KEY),
    "invalid_utf8": (b'{"text": "caf\xe9"}', R.INVALID_UTF8),
    "lone_surrogate_escape": (b'{"text": "a\\ud800b"}', R.INVALID_UTF8),
    "top_level_number": (b"42", R.NOT_A_STRING),
    "top_level_list": (b'["a"]', R.NOT_A_STRING),
    "top_level_null": (b"null", R.NULL_TEXT),
    "huge_int": (b'{"text": ' + b"9" * 5000 + b"}", R.JSON_DECODE),
    "deep_nesting": (b"[" * 100_000, R.TOO_DEEP),
    "deep_nesting_in_another_key": (b'{"text": "x", "meta": ' + b"[" * 300 + b"]" * 300 + b"}", R.TOO_DEEP),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_jsonl_bad_line_is_dead_lettered_and_neighbours_survive(tmp_path, name):
    bad_line, reason = BAD_LINES[name]
    path = write(tmp_path, "a.jsonl", GOOD_A + bad_line + b"\n" + GOOD_B)
    records = read(path)
    assert docs(records) == [Document(0, ("alpha",)), Document(2, ("beta",))]
    [bad] = bads(records)
    assert (bad.source, bad.line, bad.reason, bad.member) == (path, 2, reason, None)
    assert bad.raw == bad_line[: R.RAW_PREVIEW_BYTES + 1]
    assert bad.detail
    assert records[1] is bad


def test_jsonl_crlf(tmp_path):
    data = b'{"text": "a"}\r\n\r\n"b"\r\n{"text": "c\\r\\n"}\r\n'
    records = read(write(tmp_path, "a.jsonl", data))
    assert docs(records) == [Document(0, ("a",)), Document(2, ("b",)), Document(3, ("c\r\n",))]
    assert [(b.line, b.reason) for b in bads(records)] == [(2, R.BLANK_LINE)]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c"])
def test_jsonl_unicode_line_separators_are_not_line_breaks(tmp_path, char):
    text = f"before{char}after"
    raw = json.dumps({"text": text}, ensure_ascii=False).encode()
    if char in "\x0b\x0c\x1c":
        # Control characters are only legal escaped; they must not split a line either.
        raw = json.dumps({"text": text}).encode()
    records = read(write(tmp_path, "a.jsonl", GOOD_A + raw + b"\n" + GOOD_B))
    assert records == [Document(0, ("alpha",)), Document(1, (text,)), Document(2, ("beta",))]


def test_jsonl_final_line_without_newline_and_bom(tmp_path):
    data = b"\xef\xbb\xbf" + GOOD_A + b'{"text": "last"}'
    records = read(write(tmp_path, "a.jsonl", data))
    assert records == [Document(0, ("alpha",)), Document(1, ("last",))]


def test_jsonl_line_longer_than_a_read_block(tmp_path):
    long_text = "x" * 3_000_000
    data = GOOD_A + jline({"text": long_text}) + GOOD_B
    records = read(write(tmp_path, "a.jsonl", data))
    assert [r.index for r in records] == [0, 1, 2]
    assert records[1].values == (long_text,)


def test_huge_bad_line_keeps_only_a_preview(tmp_path):
    data = b'{"text": ' + b"x" * 100_000 + b"\n"
    [bad] = read(write(tmp_path, "a.jsonl", data))
    assert bad.reason == R.JSON_DECODE
    assert len(bad.raw) == R.RAW_PREVIEW_BYTES + 1
    assert bad.to_json()["raw_truncated"] is True


def test_many_lines_across_blocks(tmp_path):
    n = 40_000
    data = b"".join(jline({"text": f"doc {i} " + "y" * 50}) for i in range(n))
    records = read(write(tmp_path, "a.jsonl", data))
    assert len(records) == n
    assert all(r.index == i and r.text.startswith(f"doc {i} ") for i, r in enumerate(records))


# ---------------------------------------------------------------- .jsonl.zst


def test_zst_multi_frame_and_unterminated_last_line(tmp_path):
    data = zst(GOOD_A + b'{"text": "sp') + zst(b'lit"}\n') + zst(b"") + zst(b'"end"')
    records = read(write(tmp_path, "a.jsonl.zst", data))
    assert records == [Document(0, ("alpha",)), Document(1, ("split",)), Document(2, ("end",))]


def test_zst_bad_lines(tmp_path):
    data = zst(GOOD_A + b"\n" + b'{"text": null}\n' + GOOD_B)
    records = read(write(tmp_path, "a.jsonl.zst", data))
    assert docs(records) == [Document(0, ("alpha",)), Document(3, ("beta",))]
    assert [(b.line, b.reason) for b in bads(records)] == [(2, R.BLANK_LINE), (3, R.NULL_TEXT)]


def test_zst_truncated_keeps_complete_lines(tmp_path):
    second = zst(b"".join(jline({"text": f"t{i}"}) for i in range(50)))
    data = zst(GOOD_A + GOOD_B + b'{"text": "partial') + second[: len(second) // 2]
    path = write(tmp_path, "a.jsonl.zst", data)
    records = read(path)
    assert docs(records) == [Document(0, ("alpha",)), Document(1, ("beta",))]
    [bad] = bads(records)
    assert (bad.reason, bad.line, bad.raw) == (R.TRUNCATED_STREAM, 3, b'{"text": "partial')
    assert records[-1] is bad


def test_zst_truncated_on_line_boundary(tmp_path):
    whole = zst(GOOD_B * 10)
    data = zst(GOOD_A) + whole[:-3]
    records = read(write(tmp_path, "a.jsonl.zst", data))
    assert docs(records) == [Document(0, ("alpha",))]
    assert [(b.reason, b.line, b.raw) for b in bads(records)] == [(R.TRUNCATED_STREAM, 2, b"")]


def test_zst_garbage_after_good_frame(tmp_path):
    data = zst(GOOD_A) + b"this is not zstd at all"
    records = read(write(tmp_path, "a.jsonl.zst", data))
    assert docs(records) == [Document(0, ("alpha",))]
    assert [b.reason for b in bads(records)] == [R.TRUNCATED_STREAM]


def test_zst_not_zstd_is_unreadable(tmp_path):
    records = read(write(tmp_path, "a.jsonl.zst", GOOD_A))
    assert [(b.reason, b.line) for b in records] == [(R.UNREADABLE_FILE, None)]


# ---------------------------------------------------------------- .jsonl.zst.tar


def test_tar_members_restart_index(tmp_path):
    tar = make_tar([
        ("m0.jsonl.zst", zst(GOOD_A + GOOD_B)),
        ("sub/m1.jsonl.zst", zst(GOOD_B + b"\n" + GOOD_A)),
    ])
    records = read(write(tmp_path, "c.jsonl.zst.tar", tar))
    assert docs(records) == [
        Document(0, ("alpha",), "m0.jsonl.zst"),
        Document(1, ("beta",), "m0.jsonl.zst"),
        Document(0, ("beta",), "sub/m1.jsonl.zst"),
        Document(2, ("alpha",), "sub/m1.jsonl.zst"),
    ]
    [bad] = bads(records)
    assert (bad.reason, bad.line, bad.member) == (R.BLANK_LINE, 2, "sub/m1.jsonl.zst")


def test_tar_with_non_zst_member_continues(tmp_path):
    tar = make_tar([
        ("m0.jsonl.zst", zst(GOOD_A)),
        ("readme.txt", b"plain text, not zstd\n"),
        ("m2.jsonl.zst", zst(GOOD_B)),
    ])
    records = read(write(tmp_path, "c.jsonl.zst.tar", tar))
    assert records[0] == Document(0, ("alpha",), "m0.jsonl.zst")
    assert (records[1].reason, records[1].member) == (R.UNREADABLE_FILE, "readme.txt")
    assert records[2] == Document(0, ("beta",), "m2.jsonl.zst")
    assert len(records) == 3


def test_tar_that_is_not_a_tar(tmp_path):
    records = read(write(tmp_path, "c.jsonl.zst.tar", b"hello, not a tar" * 100))
    assert [(b.reason, b.member) for b in records] == [(R.UNREADABLE_FILE, None)]


def test_truncated_tar_keeps_earlier_members(tmp_path):
    big = zst(b"".join(jline({"text": f"t{i}"}) for i in range(2000)))
    tar = make_tar([("m0.jsonl.zst", zst(GOOD_A)), ("m1.jsonl.zst", big)])
    records = read(write(tmp_path, "c.jsonl.zst.tar", tar[: 1536 + len(big) // 2]))
    assert records[0] == Document(0, ("alpha",), "m0.jsonl.zst")
    [bad] = bads(records)
    assert bad.member == "m1.jsonl.zst"
    assert bad.reason in (R.TRUNCATED_STREAM, R.UNREADABLE_FILE)
    assert records[-1] is bad


def test_a_header_tarfile_cannot_read_is_not_a_quiet_end(tmp_path):
    """tarfile ends an archive quietly at a header it cannot read: what follows must not vanish unnoticed."""
    m0, m1 = zst(GOOD_A), zst(GOOD_B)
    tar = bytearray(make_tar([("m0.jsonl.zst", m0), ("m1.jsonl.zst", m1)]))
    second = 512 + -(-len(m0) // 512) * 512
    tar[second:second + 512] = b"\xff" * 512
    records = read(write(tmp_path, "c.jsonl.zst.tar", bytes(tar)))
    assert records[0] == Document(0, ("alpha",), "m0.jsonl.zst")
    [bad] = bads(records)
    assert bad.reason == R.UNREADABLE_FILE and "after member 'm0.jsonl.zst'" in bad.detail
    assert "not a tar header" in bad.detail
    # A real end, with the zero padding tar writers add, is no error.
    assert not bads(read(write(tmp_path, "d.jsonl.zst.tar", make_tar([("m0.jsonl.zst", m0)]) + bytes(8192))))


# ---------------------------------------------------------------- .json.gz


def test_json_gz_strings_are_stripped_objects_are_not(tmp_path):
    data = jline("  padded string \n") + jline({"text": "  object  "}) + b"{bad\n"
    records = read(write(tmp_path, "b.json.gz", gzip.compress(data)))
    assert docs(records) == [Document(0, ("padded string",)), Document(1, ("  object  ",))]
    assert [(b.line, b.reason) for b in bads(records)] == [(3, R.JSON_DECODE)]


def test_json_gz_multi_member_and_padding(tmp_path):
    data = gzip.compress(GOOD_A) + b"\x00" * 10 + gzip.compress(GOOD_B)
    records = read(write(tmp_path, "b.json.gz", data))
    assert records == [Document(0, ("alpha",)), Document(1, ("beta",))]


def test_json_gz_large_output_is_complete(tmp_path):
    n = 60_000
    data = b"".join(jline(f"document number {i:06d} " + "z" * 40) for i in range(n))
    records = read(write(tmp_path, "b.json.gz", gzip.compress(data)))
    assert len(records) == n
    assert records[-1] == Document(n - 1, (f"document number {n - 1:06d} " + "z" * 40,))


def test_json_gz_not_gzip(tmp_path):
    records = read(write(tmp_path, "b.json.gz", GOOD_A))
    assert [(b.reason, b.line) for b in records] == [(R.UNREADABLE_FILE, None)]


def test_json_gz_truncated(tmp_path):
    import random

    rng = random.Random(0)
    data = b"".join(jline({"text": f"{i} {rng.random()}"}) for i in range(5000))
    blob = gzip.compress(data)
    records = read(write(tmp_path, "b.json.gz", blob[: len(blob) // 2]))
    good = docs(records)
    assert 0 < len(good) < 5000
    assert [d.index for d in good] == list(range(len(good)))
    [bad] = bads(records)
    assert (bad.reason, bad.line) == (R.TRUNCATED_STREAM, len(good) + 1)
    assert records[-1] is bad


# ---------------------------------------------------------------- .parquet


def test_parquet_row_groups_and_indices(tmp_path):
    table = pa.table({"text": [f"row {i}" for i in range(25)], "n": list(range(25))})
    path = make_parquet(tmp_path, "p.parquet", table, row_group_size=10)
    assert pq.ParquetFile(path).num_row_groups == 3
    assert read(path) == [Document(i, (f"row {i}",)) for i in range(25)]


def test_parquet_multi_key_lists_nulls_and_non_strings(tmp_path):
    table = pa.table({
        "prompt": ["p0", None, "p2", "p3"],
        "completion": [["a", "b"], ["c"], [], None],
    })
    path = make_parquet(tmp_path, "p.parquet", table)
    records = read(path, keys=("prompt", "completion"))
    assert docs(records) == [Document(0, ("p0", "a\n\nb")), Document(2, ("p2", ""))]
    assert [(b.line, b.reason) for b in bads(records)] == [(1, R.NULL_TEXT), (3, R.NULL_TEXT)]


def test_parquet_non_string_column(tmp_path):
    path = make_parquet(tmp_path, "p.parquet", pa.table({"text": [1, 2]}))
    assert [(b.line, b.reason) for b in read(path)] == [(0, R.NOT_A_STRING), (1, R.NOT_A_STRING)]


def test_parquet_missing_column_is_one_record(tmp_path):
    path = make_parquet(tmp_path, "p.parquet", pa.table({"body": ["x"] * 100}))
    [bad] = read(path)
    assert (bad.reason, bad.line) == (R.MISSING_KEY, None)
    assert "text" in bad.detail


def test_parquet_zero_rows(tmp_path):
    path = make_parquet(tmp_path, "p.parquet", pa.table({"text": pa.array([], pa.string())}))
    assert read(path) == []


def test_parquet_corrupt(tmp_path):
    good = make_parquet(tmp_path, "good.parquet", pa.table({"text": ["a"] * 50}))
    data = Path(good).read_bytes()
    records = read(write(tmp_path, "p.parquet", data[: len(data) // 2]))
    assert [b.reason for b in records] == [R.UNREADABLE_FILE]


def test_parquet_invalid_utf8_string(tmp_path):
    offsets = pa.array([0, 2, 3, 5], type=pa.int32()).buffers()[1]
    strings = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"ok\xffhi")])
    path = make_parquet(tmp_path, "p.parquet", pa.table({"text": strings}))
    records = read(path)
    assert docs(records) == [Document(0, ("ok",)), Document(2, ("hi",))]
    assert [(b.line, b.reason, b.raw) for b in bads(records)] == [(1, R.INVALID_UTF8, b"\xff")]


# ---------------------------------------------------------------- .txt


def test_txt_is_one_document_with_universal_newlines(tmp_path):
    path = write(tmp_path, "d.txt", b"  line1\r\nline2\rline3\n\n  ")
    assert read(path) == [Document(0, ("  line1\nline2\nline3\n\n  ",))]


def test_txt_any_single_key(tmp_path):
    path = write(tmp_path, "d.txt", "caf\u00e9".encode())
    assert read(path, keys=("body",)) == [Document(0, ("caf\u00e9",))]


def test_txt_multi_key_and_invalid_utf8(tmp_path):
    path = write(tmp_path, "d.txt", b"hello")
    assert [b.reason for b in read(path, keys=("prompt", "completion"))] == [R.MISSING_KEY]
    bad = write(tmp_path, "e.txt", b"caf\xe9")
    assert [(b.reason, b.raw) for b in read(bad)] == [(R.INVALID_UTF8, b"caf\xe9")]


# ---------------------------------------------------------------- any format


@pytest.mark.parametrize(
    "name, expected",
    [
        ("z.jsonl", []),
        ("z.jsonl.zst", []),
        ("z.json.gz", []),
        ("z.jsonl.zst.tar", []),
        ("z.txt", [Document(0, ("",))]),
        ("z.parquet", [R.UNREADABLE_FILE]),
    ],
)
def test_zero_byte_files(tmp_path, name, expected):
    records = read(write(tmp_path, name, b""))
    assert [r.reason if isinstance(r, BadRecord) else r for r in records] == expected


@pytest.mark.parametrize("name", ["missing.jsonl", "missing.parquet", "missing.txt"])
def test_missing_file_is_unreadable(tmp_path, name):
    records = read(str(tmp_path / name))
    assert [(b.reason, b.line) for b in records] == [(R.UNREADABLE_FILE, None)]


def test_directory_is_unreadable(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    assert [b.reason for b in read(str(tmp_path / "dir.jsonl"))] == [R.UNREADABLE_FILE]


def test_caller_mistakes_raise(tmp_path):
    with pytest.raises(ValueError, match="extension"):
        read(write(tmp_path, "a.csv", b"x"))
    with pytest.raises(ValueError, match="key"):
        read(write(tmp_path, "a.jsonl", GOOD_A), keys=())


def test_remote_url_via_fsspec():
    fs = fsspec.filesystem("memory")
    fs.pipe("/readers-test/a.jsonl.zst", zst(GOOD_A + GOOD_B))
    try:
        records = read("memory://readers-test/a.jsonl.zst")
    finally:
        fs.rm("/readers-test", recursive=True)
    assert records == [Document(0, ("alpha",)), Document(1, ("beta",))]


# ---------------------------------------------------------------- reference inputs


def _reference_formats() -> Path:
    formats = REFERENCE / "inputs" / "formats"
    if not formats.is_dir():
        pytest.skip(f"reference inputs not available at {formats}")
    return formats


@pytest.mark.parametrize(
    "name, count",
    [("a.jsonl.zst", 60), ("b.json.gz", 30), ("c.jsonl.zst.tar", 20), ("d.txt", 1), ("e.txt", 1)],
)
def test_reference_format_inputs_read_cleanly(name, count):
    path = _reference_formats() / name
    records = read(str(path))
    assert bads(records) == []
    assert len(records) == count
    assert all(isinstance(r.text, str) for r in records)


def test_reference_txt_is_whole_file():
    path = _reference_formats() / "d.txt"
    [doc] = read(str(path))
    with open(path, encoding="utf-8") as fh:
        assert doc == Document(0, (fh.read(),))


def test_reference_tar_members():
    records = read(str(_reference_formats() / "c.jsonl.zst.tar"))
    members = sorted({r.member for r in records})
    assert members == ["member_0.jsonl.zst", "member_1.jsonl.zst"]
    for member in members:
        indices = [r.index for r in records if r.member == member]
        assert indices == list(range(len(indices)))


def test_reference_metadata_listing_reads_cleanly(monkeypatch):
    _reference_formats()
    monkeypatch.chdir(REFERENCE)
    names = [n.strip() for n in Path("inputs/formats_meta.txt").read_text().splitlines() if n.strip()]
    assert len(names) == 5
    for name in names:
        assert bads(read(name)) == []


# ---------------------------------------------------------------- property


def expected_line_count(data: bytes) -> int:
    lines = data.split(b"\n")
    return len(lines) - (1 if lines[-1] == b"" else 0)


line_bytes = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([GOOD_A[:-1], b'"s"', b"", b"\r", b"null", b"{}", b'{"text": [1]}', b"\xef\xbb\xbf"]),
    st.text(max_size=20).map(lambda t: json.dumps({"text": t}, ensure_ascii=False).encode()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line_bytes, max_size=12), terminated=st.booleans())
def test_random_lines_never_raise_and_are_all_accounted_for(tmp_path, lines, terminated):
    data = b"\n".join(lines) + (b"\n" if terminated and lines else b"")
    path = write(tmp_path, "h.jsonl", data)
    records = read(path)
    assert len(records) == expected_line_count(data)
    assert [r.index if isinstance(r, Document) else r.line - 1 for r in records] == list(
        range(len(records))
    )
