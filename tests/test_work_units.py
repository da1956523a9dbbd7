"""Parallel work inside large files: byte and row ranges, unit planning, and output independent of the split."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.config import load_config
from pipelines.job import run
from tests.helpers import MULTI_PROCESSING, RUNNER, SHARED, ROOT, require_shared, zst
from transforms.core.records import BYTES, ROWS, WHOLE, Document, InputFile
from transforms.core.units import jsonl_units, line_bases, parquet_group_rows, parquet_units, shares, whole_file
from transforms.io.read_corpus import plan_units
from transforms.io.readers import read_records

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def _fields(record) -> tuple:
    if isinstance(record, Document):
        return ("doc", record.index, record.values)
    return ("bad", record.line, record.reason, record.raw, record.detail)


# ---------------------------------------------------------------- byte ranges of .jsonl

_line = st.one_of(
    st.builds(lambda t: json.dumps({"text": t}, ensure_ascii=False).encode("utf-8"), st.text(max_size=30)),
    st.sampled_from([b"", b"   ", b"{broken", b'{"other": 1}', b'"bare"', b"\xff\xfe", b"\r"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line, max_size=25), bom=st.booleans(), final_newline=st.booleans(),
       window=st.integers(1, 80), data=st.data())
def test_byte_windows_partition_the_lines_of_a_file(tmp_path, lines, bom, final_newline, window, data):
    content = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path / "f.jsonl"
    path.write_bytes(content)
    cap = data.draw(st.sampled_from([1 << 20, 12]))  # 12: some lines are too long and skipped unread
    whole = [_fields(r) for r in read_records(str(path), ("text",), cap)]
    units = jsonl_units(InputFile(0, str(path), "f.jsonl", len(content)), len(content), window)
    got, line = [], 0
    for u in units:
        assert u.kind == BYTES and u.end_group == u.first_group + 1
        k = u.first_group
        end = None if k == u.num_groups - 1 else (k + 1) * window
        records = list(read_records(str(path), ("text",), cap, byte_range=(k * window, end), first_line=line))
        line += len(records)
        got.extend(_fields(r) for r in records)
    assert got == whole


def test_byte_window_examples(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "bb"}\n{"text": "c"}\n')  # lines start at 0, 14, 29

    def texts(start, end):
        return [r.text for r in read_records(str(path), ("text",), byte_range=(start, end))]

    assert texts(0, 14) == ["a"]  # the line starting at 14 belongs to the next window
    assert texts(0, 15) == ["a", "bb"]  # a line that starts inside the window is read to its end
    assert texts(14, 29) == ["bb"]
    assert texts(15, 29) == []  # no line starts in [15, 29)
    assert texts(1, None) == ["bb", "c"]
    with pytest.raises(ValueError, match="byte range"):
        list(read_records(str(tmp_path / "x.jsonl.zst"), ("text",), byte_range=(0, 10)))


# ---------------------------------------------------------------- row ranges of .parquet


def _parquet(path: Path, values: list, row_group_size: int) -> None:
    pq.write_table(pa.table({"text": pa.array(values, type=pa.string()), "n": list(range(len(values)))}), path,
                   row_group_size=row_group_size)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=20)), max_size=60), rg=st.integers(1, 20),
       group_rows=st.integers(1, 70))
def test_row_ranges_partition_the_rows_of_a_parquet_file(tmp_path, values, rg, group_rows):
    path = tmp_path / "f.parquet"
    _parquet(path, values, rg)
    whole = [_fields(r) for r in read_records(str(path), ("text",))]
    got = []
    for lo in range(0, max(len(values), 1), group_rows):
        got.extend(_fields(r) for r in read_records(str(path), ("text",), rows=(lo, lo + group_rows)))
    assert got == whole


# ---------------------------------------------------------------- planning


def test_plan_units(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_bytes(b'{"text": "x"}\n' * 1000)  # 14 000 bytes
    f = InputFile(0, str(jsonl), "a.jsonl")
    units = plan_units(f, ("text",), group_bytes=5000, unit_groups=2)
    assert [(u.kind, u.first_group, u.end_group, u.num_groups) for u in units] == [(BYTES, 0, 2, 3), (BYTES, 2, 3, 3)]
    assert plan_units(f, ("text",), group_bytes=1 << 20, unit_groups=1)[0].num_groups == 1

    parquet = tmp_path / "b.parquet"
    _parquet(parquet, [f"{i:04d}" + "y" * 96 for i in range(1000)], 300)  # ~100 kB of text
    units = plan_units(InputFile(1, str(parquet), "b.parquet"), ("text",), group_bytes=30_000, unit_groups=1)
    assert {u.kind for u in units} == {ROWS} and len(units) > 1
    rows = [u.span for u in units]
    assert rows[0][0] == 0 and rows[-1][1] == 1000 and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
    # A missing column, a broken footer, a missing file, a compressed stream: read whole, in order.
    assert plan_units(InputFile(1, str(parquet), "b.parquet"), ("body",), 30_000, 1)[0].kind == WHOLE
    broken = tmp_path / "c.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert plan_units(InputFile(2, str(broken), "c.parquet"), ("text",), 10, 1)[0].kind == WHOLE
    assert plan_units(InputFile(3, str(tmp_path / "gone.jsonl"), "gone.jsonl"), ("text",), 10, 1)[0].kind == WHOLE
    assert plan_units(InputFile(4, str(tmp_path / "d.jsonl.zst"), "d.jsonl.zst"), ("text",), 10, 1)[0].kind == WHOLE


def test_only_large_files_read_in_order_hand_their_groups_on(tmp_path):
    compressed = tmp_path / "d.jsonl.zst"
    compressed.write_bytes(zst(b'{"text": "x"}\n' * 1000))
    size = compressed.stat().st_size
    f = InputFile(0, str(compressed), "d.jsonl.zst")  # the size unknown, as for a remote listing
    assert plan_units(f, ("text",), 10, 1, fan_out_bytes=size - 1)[0].fan_out
    assert not plan_units(f, ("text",), 10, 1, fan_out_bytes=size)[0].fan_out
    assert not plan_units(f, ("text",), 10, 1, fan_out_bytes=None)[0].fan_out  # local runners: never
    missing = InputFile(1, str(tmp_path / "gone.json.gz"), "gone.json.gz")
    assert not plan_units(missing, ("text",), 10, 1, fan_out_bytes=0)[0].fan_out  # the reader reports it


def test_unit_math():
    f = InputFile(0, "a.jsonl", "a.jsonl")
    (whole,) = whole_file(f, 10, fan_out_bytes=5)
    assert (whole.file, whole.kind, whole.fan_out, whole.first_group, whole.end_group) == (f, WHOLE, True, 0, 1)
    assert not whole_file(f, 10, fan_out_bytes=10)[0].fan_out and not whole_file(f)[0].fan_out
    assert {u.file for u in jsonl_units(f, 250, 100)} == {f} and {u.file for u in parquet_units(f, 9, 300, 100)} == {f}
    with pytest.raises(ValueError, match="unit_groups must be positive, got 0"):
        jsonl_units(f, 250, 100, 0)
    assert parquet_group_rows(5, 50, 100) == 5  # a small file: one group, whatever its row count
    assert parquet_group_rows(1, 10, 100) == 1 and parquet_group_rows(0, 500, 100) == 1
    assert parquet_group_rows(10, 1000, 10) == 1  # rows larger than a group: one row per group
    assert len(parquet_units(f, 10, 50, 100)) == 1
    assert [u.span for u in jsonl_units(f, 250, 100, 2)] == [(0, 200), (200, 250)]
    assert [u.span for u in jsonl_units(f, 0, 100)] == [(0, 0)]  # an empty file is one (empty) group
    assert parquet_group_rows(1000, 100, 100) == 1000  # at most group_bytes of data: one group
    assert parquet_group_rows(1000, 101, 100) == 991
    assert [u.span for u in parquet_units(f, 10, 300, 100)] == [(0, 4), (4, 8), (8, 10)]
    assert line_bases([(0, 1, 5), (1, 3, 0), (3, 4, 2)]) == {0: 0, 1: 5, 3: 5}
    with pytest.raises(ValueError, match="missing"):
        line_bases([(0, 1, 5), (2, 3, 1)])


# ---------------------------------------------------------------- the whole job, however the work is split


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory) -> Path:
    """One corpus three times: a .jsonl with bad lines in later windows, a parquet of small row groups, a .zst."""
    corpus = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_bytes()
    root = tmp_path_factory.mktemp("big")
    lines = corpus.splitlines(keepends=True)
    with_bad = []
    for i, line in enumerate(lines):
        with_bad.append(line)
        if i % 97 == 5:
            with_bad.append(b'{"text": broken ' + str(i).encode() + b"\n")
    (root / "a.jsonl").write_bytes(b"".join(with_bad))
    texts = [json.loads(line)["text"] for line in lines]
    _parquet(root / "b.parquet", texts, 50)
    (root / "c.jsonl.zst").write_bytes(zst(corpus))
    return root


def _run(inputs: Path, out: Path, runner: list[str], *extra: str, **plan_changes) -> dict:
    argv = ["LMData", "--input_dir", str(inputs), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "256", "--packing_group_mb", "1", "--files_per_record", "1500", *extra]
    config, beam_args = load_config(argv + runner)
    return run(config, beam_args, plan_changes)


def _output_digests(out: Path) -> dict:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "data_params.json"}


SPLITS = {
    "one_group_per_unit_fanned_out": (RUNNER, dict(unit_groups=1, fan_out_bytes=0)),
    "two_groups_per_unit": (RUNNER, dict(unit_groups=2, fan_out_bytes=None)),
    "whole_files_two_processes": (MULTI_PROCESSING + ["--direct_num_workers", "2"],
                                  dict(unit_groups=1000, fan_out_bytes=10 << 20)),
}


@pytest.fixture(scope="module")
def split_run(big_inputs, tmp_path_factory):
    """(data_params, output digests) of the big inputs read in one of SPLITS, run once per module."""
    done = {}

    def run_split(name: str, shuffle: bool):
        if (name, shuffle) not in done:
            runner, changes = SPLITS[name]
            out = tmp_path_factory.mktemp(f"{name}_{shuffle}")
            extra = ("--shuffle", "True") if shuffle else ()
            done[name, shuffle] = (_run(big_inputs, out, runner, *extra, **changes), _output_digests(out))
        return done[name, shuffle]

    return run_split


def _assert_same_output(split_run, big_inputs, name: str, shuffle: bool) -> None:
    params, digests = split_run(name, shuffle)
    first_params, first = split_run("one_group_per_unit_fanned_out", shuffle)
    assert sum(name.endswith(".h5") for name in first) >= 3
    assert any(name.startswith("dead_letter/") for name in first)
    assert digests == first
    assert params["input"] == first_params["input"]
    assert params["input"]["per_source"][str(big_inputs / "a.jsonl")]["bad"] == 5


@pytest.mark.parametrize("shuffle", [False, True])
def test_output_does_not_depend_on_how_the_work_is_split(split_run, big_inputs, shuffle):
    _assert_same_output(split_run, big_inputs, "two_groups_per_unit", shuffle)


@pytest.mark.worker_processes
@pytest.mark.parametrize("shuffle", [False, True])
def test_output_of_whole_files_in_two_processes_is_the_same(split_run, big_inputs, shuffle):
    _assert_same_output(split_run, big_inputs, "whole_files_two_processes", shuffle)


def test_dead_letter_lines_of_a_split_jsonl_are_file_lines(big_inputs, tmp_path):
    _run(big_inputs, tmp_path / "out", RUNNER, unit_groups=1)
    (letters,) = (tmp_path / "out" / "dead_letter").glob("*a.jsonl*")
    got = [(r["line"], r["raw"]) for r in map(json.loads, letters.read_text().splitlines())]
    lines = (big_inputs / "a.jsonl").read_bytes().splitlines()
    expected = [(i + 1, line.decode()) for i, line in enumerate(lines) if line.startswith(b'{"text": broken')]
    assert len(expected) == 5 and got == expected
    assert os.path.getsize(big_inputs / "a.jsonl") > 2 << 20  # the bad lines are spread over three windows


@given(total=st.integers(0, 10**12), weights=st.lists(st.integers(0, 10**6), max_size=50))
def test_shares_add_up_exactly_and_follow_the_weights(total, weights):
    parts = shares(total, weights)
    assert len(parts) == len(weights)
    if weights:
        assert sum(parts) == total and min(parts) >= 0
    if weights and sum(weights):
        for part, w in zip(parts, weights):
            assert abs(part - total * w / sum(weights)) <= 1
    if weights and not sum(weights):  # nothing to go by: parts as equal as integers allow, the larger last
        assert parts == sorted(parts) and max(parts) - min(parts) <= 1


def test_shares_by_hand():
    assert shares(10, [1, 1, 1]) == [3, 3, 4]
    assert shares(5, [0, 0]) == [2, 3] and shares(7, []) == [] and shares(0, [1, 2]) == [0, 0]
    assert shares(9, [0, 3, 0]) == [0, 9, 0] and shares(100, [1, 3]) == [25, 75] and shares(7, [-1, -1]) == [3, 4]
    # A weight of 1 is a weight like any other: the one weighted part takes everything.
    assert shares(10, [0, 1, 0]) == [0, 10, 0]
