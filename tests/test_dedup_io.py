"""Deduplication's files (transforms/io/dedup_index.py, transforms/io/listing.py): an index part's arrays and
name as a later job reads them, index.json's text, the parts found in a directory, and OUT/dedup/'s listing files
and their counts, with exact values."""

from __future__ import annotations

import hashlib
import locale
import os

import numpy as np
import pytest

from transforms.core.dedup import EARLIER, THIS_JOB, earlier_node
from transforms.io.dead_letters import dead_letter_file_name
from transforms.io.dedup_index import (INDEX_FILE, PARTS_DIR, index_parts, read_index_meta, read_index_part,
                                       write_index_meta, write_index_part)
from transforms.io.listing import DEDUP_DIR, listing_counts, write_listing


def _part_name(relpath: str, group: int) -> str:
    return f"{hashlib.sha256(relpath.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}-{group:09d}.npz"


def _exact(n: int) -> bytes:
    return bytes(range(n, n + 16))


def _near_records():
    """Three kept records of a tar file as the stage hands them over, out of file order: (member, line, exact key,
    band keys' bytes, signature's bytes)."""
    bands = {n: np.array([n, -n, 2**62 + n], dtype=np.int64) for n in (1, 2, 3)}
    sigs = {n: np.array([n, 65535, 7 * n, 0], dtype=np.uint16) for n in (1, 2, 3)}
    # (Exact keys in the other order than lines: a part is in file order, not in its keys'.)
    return [("b/1.txt", 4, _exact(3), bands[3].tobytes(), sigs[3].tobytes()),
            ("a/9.txt", 12, _exact(1), bands[2].tobytes(), sigs[2].tobytes()),
            ("a/9.txt", 5, _exact(2), bands[1].tobytes(), sigs[1].tobytes())], bands, sigs


def test_a_near_index_part_holds_its_records_in_file_order_under_its_files_digest_and_group(tmp_path):
    """The part's name (the relpath's digest and the zero-padded group), and its arrays, of the dtypes and shapes a
    later job reads: the index is a format between jobs."""
    records, bands, sigs = _near_records()
    assert write_index_part((("d/t.tar", 3), records), str(tmp_path / "index")) == 3
    name = hashlib.sha256(b"d/t.tar").hexdigest()[:16] + "-000000003.npz"
    assert os.listdir(tmp_path / "index") == [PARTS_DIR] and os.listdir(tmp_path / "index" / PARTS_DIR) == [name]
    data = np.load(tmp_path / "index" / PARTS_DIR / name)
    assert sorted(data.files) == ["bands", "exact", "lines", "members", "relpath", "signatures"]
    assert str(data["relpath"]) == "d/t.tar" and data["relpath"].shape == ()
    assert data["members"].tolist() == ["a/9.txt", "a/9.txt", "b/1.txt"] and data["members"].dtype.kind == "U"
    assert data["lines"].tolist() == [5, 12, 4] and data["lines"].dtype == np.int64
    assert data["exact"].dtype == np.uint8 and data["exact"].shape == (3, 16)
    assert [bytes(row) for row in data["exact"]] == [_exact(2), _exact(1), _exact(3)]
    assert data["bands"].dtype == np.int64 and data["bands"].tolist() == [bands[n].tolist() for n in (1, 2, 3)]
    assert data["signatures"].dtype == np.uint16
    assert data["signatures"].tolist() == [sigs[n].tolist() for n in (1, 2, 3)]


def test_an_exact_index_part_has_no_bands_nor_signatures(tmp_path):
    """An exact job's records (band keys None): only the relpath, members, lines and exact keys are stored."""
    records = [("", 7, _exact(7), None, None), ("", 2, _exact(2), None, None)]
    assert write_index_part((("a.jsonl", 0), records), str(tmp_path)) == 2
    data = np.load(tmp_path / PARTS_DIR / _part_name("a.jsonl", 0))
    assert sorted(data.files) == ["exact", "lines", "members", "relpath"]
    assert data["members"].tolist() == ["", ""] and data["lines"].tolist() == [2, 7]
    assert data["exact"].shape == (2, 16) and bytes(data["exact"][0]) == _exact(2)


def test_a_part_of_one_record(tmp_path):
    """A packing group with one kept record (a short file): a part of one row, near or exact."""
    records, bands, sigs = _near_records()
    assert write_index_part((("one.jsonl", 0), records[:1]), str(tmp_path / "near")) == 1
    data = np.load(tmp_path / "near" / PARTS_DIR / _part_name("one.jsonl", 0))
    assert data["lines"].tolist() == [4] and data["exact"].shape == (1, 16)
    assert data["bands"].tolist() == [bands[3].tolist()] and data["signatures"].tolist() == [sigs[3].tolist()]
    assert write_index_part((("one.jsonl", 0), [("", 1, _exact(0), None, None)]), str(tmp_path / "exact")) == 1
    data = np.load(tmp_path / "exact" / PARTS_DIR / _part_name("one.jsonl", 0))
    assert sorted(data.files) == ["exact", "lines", "members", "relpath"] and data["lines"].tolist() == [1]


def test_a_part_name_digests_any_path_a_file_system_gives():
    """A path with an undecodable byte (a lone surrogate, as os.fsdecode gives it) names a part as its
    surrogatepass UTF-8 bytes digest: two such paths never share a part."""
    from transforms.io.dedup_index import _part_name as part_name

    odd = "d/\udcff.jsonl"
    assert part_name(odd, 12) == hashlib.sha256(b"d/\xed\xb3\xbf.jsonl").hexdigest()[:16] + "-000000012.npz"
    assert part_name("a.jsonl", 123456789) == _part_name("a.jsonl", 123456789)
    assert part_name("a.jsonl", 123456789).endswith("-123456789.npz")


def test_a_part_reads_back_as_the_earlier_records_fingerprints(tmp_path):
    """read_index_part gives, per record in file order, its key (exact key, (earlier node, band keys' bytes)) and,
    near, its signature: the records a later job compares with."""
    records, bands, sigs = _near_records()
    write_index_part((("d/t.tar", 3), records), str(tmp_path))
    got = list(read_index_part(str(tmp_path / PARTS_DIR / _part_name("d/t.tar", 3))))
    nodes = [(EARLIER, "d/t.tar", 0, "a/9.txt", 5, -1), (EARLIER, "d/t.tar", 0, "a/9.txt", 12, -1),
             (EARLIER, "d/t.tar", 0, "b/1.txt", 4, -1)]
    expected = []
    for node, n, key in zip(nodes, (1, 2, 3), (2, 1, 3)):
        expected += [("key", (_exact(key), (node, bands[n].tobytes()))), ("sig", (node, sigs[n].tobytes()))]
    assert got == expected
    assert all(type(value[1][0][4]) is int for kind, value in got if kind == "key")
    assert nodes[0] == earlier_node("d/t.tar", "a/9.txt", 5)


def test_an_exact_part_reads_back_as_keys_without_bands(tmp_path):
    """An exact index's part reads back as keys with band keys None, and no signatures."""
    records = [("", 7, _exact(7), None, None), ("", 2, _exact(2), None, None)]
    write_index_part((("a.jsonl", 0), records), str(tmp_path))
    got = list(read_index_part(str(tmp_path / PARTS_DIR / _part_name("a.jsonl", 0))))
    assert got == [("key", (_exact(2), ((EARLIER, "a.jsonl", 0, "", 2, -1), None))),
                   ("key", (_exact(7), ((EARLIER, "a.jsonl", 0, "", 7, -1), None)))]


def test_index_json_is_the_settings_and_the_records_sorted_and_indented(tmp_path):
    """index.json, written last: the settings with the records count, keys sorted, 4-space indent, a final
    newline; read back as written, None where there is none."""
    index = tmp_path / "new" / "index"
    assert read_index_meta(str(index)) is None
    settings = {"kind": "near", "tokenizer": "tök", "seed": 3}
    assert write_index_meta(str(index), settings, 42) == 42
    assert os.listdir(index) == [INDEX_FILE]
    assert (index / INDEX_FILE).read_bytes() == (
        '{\n    "kind": "near",\n    "records": 42,\n    "seed": 3,\n    "tokenizer": "t\\u00f6k"\n}\n').encode()
    assert read_index_meta(str(index)) == {"kind": "near", "records": 42, "seed": 3, "tokenizer": "tök"}
    assert settings == {"kind": "near", "tokenizer": "tök", "seed": 3}  # the caller's settings untouched


@pytest.fixture
def ascii_locale():
    """The process's LC_CTYPE set to "C" (ASCII, as on a machine without a UTF-8 locale, where Python is not in
    UTF-8 mode), then restored: a text file opened without an encoding is then read as ASCII."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield locale.getencoding()
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_read_index_meta_reads_utf8_whatever_the_locale(tmp_path, ascii_locale):
    """index.json is read as UTF-8, not in the machine's locale encoding (an index.json written by another tool
    may hold non-ASCII raw)."""
    (tmp_path / INDEX_FILE).write_bytes('{"tokenizer": "tök", "records": 3}'.encode("utf-8"))
    assert read_index_meta(str(tmp_path)) == {"tokenizer": "tök", "records": 3}


def test_index_parts_are_the_npz_files_of_parts_sorted(tmp_path):
    """Only the .npz files of DIR/parts/ (not a temporary file a killed write left, nor index.json), sorted, as
    paths; none for a directory without parts."""
    assert index_parts(str(tmp_path)) == ()
    parts = tmp_path / PARTS_DIR
    parts.mkdir()
    for name in ("b-000000001.npz", "a-000000002.npz", "a-000000002.npz.tmp123", "notes.txt"):
        (parts / name).write_bytes(b"")
    (tmp_path / INDEX_FILE).write_text("{}")
    assert index_parts(str(tmp_path)) == (str(parts / "a-000000002.npz"), str(parts / "b-000000001.npz"))


def _listed(node, kind="exact"):
    return {"file": node[1], "line": node[4], "kind": kind}


def test_a_listing_file_holds_its_records_in_file_order_one_json_line_each(tmp_path):
    """OUT/dedup/<the dead-letter name of the file>: the records sorted by node (group, then record), each one
    line of json_line (sorted keys, raw non-ASCII, U+2028 escaped); the count returned."""
    nodes = [(THIS_JOB, "d/a.jsonl", 1, "", 0, -1), (THIS_JOB, "d/a.jsonl", 0, "", 9, -1),
             (THIS_JOB, "d/a.jsonl", 0, "", 2, -1)]
    records = [(nodes[0], {"line": 11, "kind": "near", "file": "d/a.jsonl"}),
               (nodes[1], {"line": 10, "kind": "exact", "file": "d/a.jsonl", "note": "é\u2028"}),
               (nodes[2], {"line": 3, "kind": "exact", "file": "d/a.jsonl"})]
    assert write_listing(("d/a.jsonl", iter(records)), str(tmp_path)) == 3
    assert os.listdir(tmp_path) == [DEDUP_DIR]
    assert os.listdir(tmp_path / DEDUP_DIR) == [dead_letter_file_name("d/a.jsonl")]
    text = (tmp_path / DEDUP_DIR / dead_letter_file_name("d/a.jsonl")).read_bytes().decode("utf-8")
    assert text == ('{"file": "d/a.jsonl", "kind": "exact", "line": 3}\n'
                    '{"file": "d/a.jsonl", "kind": "exact", "line": 10, "note": "é\\u2028"}\n'
                    '{"file": "d/a.jsonl", "kind": "near", "line": 11}\n')


def test_listing_counts_count_every_files_lines_per_kind(tmp_path):
    """listing_counts: None without OUT/dedup/ (or with it empty); else the lines per kind over every file."""
    assert listing_counts(str(tmp_path)) is None
    (tmp_path / DEDUP_DIR).mkdir()
    assert listing_counts(str(tmp_path)) is None
    a, b = (THIS_JOB, "a.jsonl", 0, "", 1, -1), (THIS_JOB, "b.jsonl", 0, "", 1, -1)
    write_listing(("a.jsonl", [(a, _listed(a, "near")), (a[:4] + (2, -1), _listed(a)), (a[:4] + (3, -1), _listed(a))]),
                  str(tmp_path))
    write_listing(("b.jsonl", [(b, {"kind": "near", "note": "ü\u2029"})]), str(tmp_path))
    assert listing_counts(str(tmp_path)) == {"exact": 2, "near": 2}
    write_listing(("c.jsonl", []), str(tmp_path))  # an empty file counts nothing
    assert listing_counts(str(tmp_path)) == {"exact": 2, "near": 2}
    # A write killed between its write and its rename leaves its temporary: not a listing, not counted again.
    name = dead_letter_file_name("a.jsonl")
    (tmp_path / DEDUP_DIR / f"{name}.0123abcd.partial").write_bytes((tmp_path / DEDUP_DIR / name).read_bytes())
    assert listing_counts(str(tmp_path)) == {"exact": 2, "near": 2}


def test_listing_counts_read_utf8_whatever_the_locale(tmp_path, ascii_locale):
    """The listing holds non-ASCII raw (json_line): `verify` counts it on a machine whose locale is not UTF-8."""
    a = (THIS_JOB, "a.jsonl", 0, "", 1, -1)
    write_listing(("a.jsonl", [(a, {"kind": "exact", "file": "ä.jsonl"}), (a[:4] + (2, -1), _listed(a, "near"))]),
                  str(tmp_path))
    assert (tmp_path / DEDUP_DIR / dead_letter_file_name("a.jsonl")).read_bytes().count("ä".encode()) == 1
    assert listing_counts(str(tmp_path)) == {"exact": 1, "near": 1}
