"""Tests for transforms.io.discover: which files a run reads, and in which order."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import fsspec
import pytest

from transforms.io.discover import VALID_EXTENSIONS, discover_input_files, extension_of

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE = SHARED / "reference"


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


@pytest.mark.parametrize(
    "name, ext",
    [
        ("a.jsonl", ".jsonl"),
        ("a.json.gz", ".json.gz"),
        ("a.jsonl.zst", ".jsonl.zst"),
        ("a.jsonl.zst.tar", ".jsonl.zst.tar"),
        ("dir.jsonl/a.txt", ".txt"),
        ("a.parquet", ".parquet"),
        ("a.tar", None),
        ("a.zst", None),
        ("a.json", None),
        ("a.jsonl.gz", None),
        ("a.JSONL", None),
        ("a.jsonl.zst.tar.bak", None),
    ],
)
def test_extension_of(name, ext):
    assert extension_of(name) == ext


def test_recursive_sorted_relative_paths(tmp_path, monkeypatch, caplog):
    root = tmp_path / "inputs"
    touch(
        root,
        "z.jsonl",
        "b/deep/x.parquet",
        "a.jsonl.zst.tar",
        "a.jsonl.zst",
        "c.json.gz",
        "notes.txt",
        "skip.tar",
        "skip.csv",
        ".DS_Store",
    )
    (root / "dir.jsonl").mkdir()  # a directory is never an input file
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        files = discover_input_files("inputs", None)
    assert files == [
        "inputs/a.jsonl.zst",
        "inputs/a.jsonl.zst.tar",
        "inputs/b/deep/x.parquet",
        "inputs/c.json.gz",
        "inputs/notes.txt",
        "inputs/z.jsonl",
    ]
    [warning] = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert "skipped 3 file(s)" in warning.getMessage()


@pytest.mark.parametrize("spelling", ["inputs/", "./inputs", "inputs//"])
def test_local_spelling_is_normalized_like_pathlib(tmp_path, monkeypatch, spelling):
    touch(tmp_path / "inputs", "a.jsonl")
    monkeypatch.chdir(tmp_path)
    assert discover_input_files(spelling, None) == ["inputs/a.jsonl"]


def test_absolute_input_dir(tmp_path):
    touch(tmp_path, "sub/a.txt")
    assert discover_input_files(str(tmp_path), None) == [str(tmp_path / "sub" / "a.txt")]


def test_missing_input_dir(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="nope"):
        discover_input_files(missing, None)


def test_input_dir_is_a_file(tmp_path):
    touch(tmp_path, "a.jsonl")
    with pytest.raises(NotADirectoryError):
        discover_input_files(str(tmp_path / "a.jsonl"), None)


def test_nothing_found(tmp_path):
    touch(tmp_path, "a.csv")
    with pytest.raises(ValueError, match=r"no input files with extensions .*\.parquet.* found under"):
        discover_input_files(str(tmp_path), None)


def test_neither_given():
    with pytest.raises(ValueError):
        discover_input_files(None, None)


def test_metadata_files(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    Path("m1.txt").write_text("  data/b.jsonl \n\n data/a.parquet\nbad.csv\ndata/b.jsonl\n")
    Path("m2.txt").write_text("data/c.txt\r\nm1.txt\n")
    with caplog.at_level(logging.WARNING):
        files = discover_input_files(None, ["m1.txt", "m2.txt"])
    # Listed paths are not checked for existence: the reader dead-letters them.
    assert files == ["data/a.parquet", "data/b.jsonl", "data/c.txt"]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "bad.csv" in messages
    assert "m1.txt" in messages  # a metadata file listed as data is reported and dropped


def test_metadata_as_comma_string(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("m1.txt").write_text("a.jsonl\n")
    Path("m2.txt").write_text("b.jsonl\n")
    assert discover_input_files(None, "m1.txt,m2.txt") == ["a.jsonl", "b.jsonl"]


def test_metadata_wins_over_input_dir(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    touch(tmp_path / "dir", "ignored.jsonl")
    Path("m.txt").write_text("listed.jsonl\n")
    with caplog.at_level(logging.WARNING):
        assert discover_input_files("dir", ["m.txt"]) == ["listed.jsonl"]
    assert any("metadata_files" in r.getMessage() for r in caplog.records)


def test_missing_metadata_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing_meta.txt"):
        discover_input_files(None, [str(tmp_path / "missing_meta.txt")])


def test_metadata_without_valid_names(tmp_path):
    meta = tmp_path / "m.txt"
    meta.write_text("a.csv\n\n")
    with pytest.raises(ValueError, match="listed in"):
        discover_input_files(None, [str(meta)])


def test_remote_filesystem_keeps_protocol():
    fs = fsspec.filesystem("memory")
    fs.pipe("/discover-test/b/x.jsonl", b"")
    fs.pipe("/discover-test/a.parquet", b"")
    fs.pipe("/discover-test/skip.bin", b"")
    try:
        files = discover_input_files("memory://discover-test", None)
        with pytest.raises(FileNotFoundError):
            discover_input_files("memory://discover-test-missing", None)
    finally:
        fs.rm("/discover-test", recursive=True)
    assert files == ["memory:///discover-test/a.parquet", "memory:///discover-test/b/x.jsonl"]


def test_reference_metadata_file(monkeypatch):
    meta = REFERENCE / "inputs" / "formats_meta.txt"
    if not meta.is_file():
        pytest.skip(f"reference inputs not available at {meta}")
    monkeypatch.chdir(REFERENCE)
    files = discover_input_files(None, ["inputs/formats_meta.txt"])
    assert files == [
        "inputs/formats/a.jsonl.zst",
        "inputs/formats/b.json.gz",
        "inputs/formats/c.jsonl.zst.tar",
        "inputs/formats/d.txt",
        "inputs/formats/e.txt",
    ]
    assert all(os.path.isfile(f) for f in files)


def test_reference_input_dir(monkeypatch):
    formats = REFERENCE / "inputs" / "formats"
    if not formats.is_dir():
        pytest.skip(f"reference inputs not available at {formats}")
    monkeypatch.chdir(REFERENCE)
    assert discover_input_files("inputs/formats", None) == discover_input_files(
        None, ["inputs/formats_meta.txt"]
    )


def test_valid_extensions_order_matches_reference():
    assert VALID_EXTENSIONS == (".jsonl", ".json.gz", ".jsonl.zst", ".jsonl.zst.tar", ".txt", ".parquet")
