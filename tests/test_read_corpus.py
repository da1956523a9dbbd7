"""The reader DoFn on its own: every record of a unit is counted in exactly one group, whatever the format."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam import pvalue

from tests.helpers import ROOT, make_tar, run_job, zst
from transforms.core.records import ROWS, WHOLE, Document, InputFile, WorkUnit
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress, read_corpus
from transforms.io.read_corpus import plan_units
from transforms.io.readers import parquet_shape
from transforms.stages import read_corpus as read_stage
from transforms.stages.read_corpus import DEAD_LETTERS, DOCS, ReadCorpus, _ReadUnitFn

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
KEYS = ("text",)


_LISTED = object()


def _fn_outputs(fn, unit):
    """(groups, dead-letter parts, fanned-out groups) of one unit: a unit's groups are handed on (by the graph:
    ReadCorpus reads such units apart) when the unit says so."""
    groups, parts = [], []
    for out in fn.process(unit):
        if isinstance(out, pvalue.TaggedOutput):
            assert out.tag == DEAD_LETTERS, out.tag
            parts.append(out.value)
        else:
            groups.append(out)
    return ([], parts, groups) if unit.fan_out else (groups, parts, [])


def _read(path, group_bytes: int, unit_groups: int = 1, max_record_bytes: int = 1 << 20, size=_LISTED,
          check=None):
    """(groups, dead-letter parts) the reader makes of a file, over all its units.

    size: the file's size as listed (default: its size on disk; None: unknown).
    """
    fn = _ReadUnitFn(KEYS, True, group_bytes, max_record_bytes, check)
    f = InputFile(0, str(path), path.name, path.stat().st_size if size is _LISTED else size)
    groups, parts = [], []
    for unit in plan_units(f, KEYS, group_bytes, unit_groups):
        g, p, fanned = _fn_outputs(fn, unit)
        groups += g + fanned
        parts += p
    return groups, parts


def _totals(groups) -> Counter:
    total = Counter()
    for g in groups:
        total.update(g.stats.totals)
    return Counter({k: v for k, v in total.items() if not k.startswith(TIME_PREFIX)})


def _line(text: str) -> bytes:
    return json.dumps({"text": text}).encode() + b"\n"


def test_bad_records_after_the_last_full_group_are_counted(tmp_path):
    """A file read in order whose last good document closes a group, then only bad lines: still counted."""
    data = _line("x" * 600) + _line("y" * 500) + b"{bad\n" + b"\n"  # the group closes at 1 000 characters
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zst(data))
    groups, parts = _read(path, group_bytes=1000)
    assert [len(g.docs) for g in groups] == [2, 0]  # an empty last group carries the two bad lines
    totals = _totals(groups)
    assert totals["docs_read"] == 4 and totals["docs_good"] == 2
    assert totals["bad.json_decode"] == 1 and totals["bad.blank_line"] == 1
    assert sum(len(p.records) for p in parts) == 2


def test_the_job_refuses_dead_letters_it_did_not_count(tmp_path, monkeypatch):
    """The dataset's statistics are checked against the dead letters written before they are published."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(_line("fine") + b"{bad\n")
    real = read_corpus.DeadLetterParts.add

    def add_twice(self, record):  # a reader that writes one dead letter more than it counts
        real(self, record)
        return real(self, record)

    monkeypatch.setattr(read_corpus.DeadLetterParts, "add", add_twice)
    argv = ["LMData", "--input_dir", str(src), "--output_dir", str(tmp_path / "out"), "--tokenizer_type",
            "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json")]
    with pytest.raises(Exception, match="2 dead letters written, 1 bad records counted"):
        run_job(argv)
    assert not (tmp_path / "out" / "data_params.json").exists()


@pytest.mark.parametrize("kind", ["jsonl", "zst", "parquet"])
@pytest.mark.parametrize("unit_groups", [1, 2, 100])
def test_every_record_is_counted_once_whatever_the_units(tmp_path, kind, unit_groups):
    lines = []
    for i in range(300):
        lines.append(_line(f"document {i} " + "w" * (i % 37)))
        if i % 41 == 7:
            lines.append(b"{broken " + str(i).encode() + b"\n")
    data = b"".join(lines)
    if kind == "jsonl":
        path = tmp_path / "a.jsonl"
        path.write_bytes(data)
    elif kind == "zst":
        path = tmp_path / "a.jsonl.zst"
        path.write_bytes(zst(data))
    else:
        path = tmp_path / "a.parquet"
        texts = [json.loads(line)["text"] if not line.startswith(b"{broken") else None for line in lines]
        pq.write_table(pa.table({"text": pa.array(texts, type=pa.string())}), path, row_group_size=64)
    groups, parts = _read(path, group_bytes=1500, unit_groups=unit_groups)
    totals = _totals(groups)
    assert totals["docs_read"] == len(lines)
    assert totals["docs_good"] == 300 == sum(len(g.docs) for g in groups)
    bad = sum(v for k, v in totals.items() if k.startswith("bad."))
    assert bad == len(lines) - 300 == sum(len(p.records) for p in parts)
    assert [d.values[0] for g in groups for d in g.docs] == [f"document {i} " + "w" * (i % 37) for i in range(300)]
    slices = [g.group.slice_index for g in groups]
    assert slices == list(range(len(slices))) and len(slices) > 2  # every group once, in order
    assert sum(g.progress_bytes for g in groups) == path.stat().st_size


# ---------------------------------------------------------------- the rules of one unit, stated by hand


def _serial(tmp_path, lengths, name="a.jsonl.zst") -> Path:
    path = tmp_path / name
    path.write_bytes(zst(b"".join(_line(chr(97 + i % 26) * n) for i, n in enumerate(lengths))))
    return path


def test_a_serial_file_is_cut_at_the_first_document_that_fills_a_group(tmp_path):
    groups, _ = _read(_serial(tmp_path, [600, 399, 1, 500, 499, 1, 7]), group_bytes=1000)
    assert [[len(d.text) for d in g.docs] for g in groups] == [[600, 399, 1], [500, 499, 1], [7]]
    # A file that ends with a full group has no empty group after it; an empty file has one, for its counts.
    groups, _ = _read(_serial(tmp_path, [600, 400], "b.jsonl.zst"), group_bytes=1000)
    assert [[len(d.text) for d in g.docs] for g in groups] == [[600, 400]]
    groups, _ = _read(_serial(tmp_path, [], "c.jsonl.zst"), group_bytes=1000)
    assert [len(g.docs) for g in groups] == [0] and groups[0].group.slice_index == 0


def test_keys_are_joined_only_when_asked_and_a_document_keeps_its_place(tmp_path):
    member = b"".join(json.dumps({"a": f"a{i}", "b": f"b{i}"}).encode() + b"\n" for i in range(3))
    path = tmp_path / "x.jsonl.zst.tar"
    path.write_bytes(make_tar([("part/0.jsonl.zst", zst(member))]))
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    (unit,) = plan_units(f, ("a", "b"), 1 << 20, 1)
    joined, _, _ = _fn_outputs(_ReadUnitFn(("a", "b"), True, 1 << 20, 1 << 20), unit)
    apart, _, _ = _fn_outputs(_ReadUnitFn(("a", "b"), False, 1 << 20, 1 << 20), unit)
    assert [(d.index, d.values, d.member) for d in joined[0].docs] == [
        (i, (f"a{i}\n\nb{i}",), "part/0.jsonl.zst") for i in range(3)]
    assert [(d.index, d.values, d.member) for d in apart[0].docs] == [
        (i, (f"a{i}", f"b{i}"), "part/0.jsonl.zst") for i in range(3)]


@pytest.mark.parametrize("kind", ["jsonl_split", "zst"])
def test_a_record_over_the_limit_is_a_dead_letter_in_every_kind_of_unit(tmp_path, kind):
    data = _line("short") + _line("L" * 500) + _line("tail")
    path = tmp_path / ("a.jsonl" if kind == "jsonl_split" else "a.jsonl.zst")
    path.write_bytes(data if kind == "jsonl_split" else zst(data))
    groups, parts = _read(path, group_bytes=100, max_record_bytes=200)
    assert [d.text for g in groups for d in g.docs] == ["short", "tail"]
    assert [(r.reason, r.line) for p in parts for r in p.records] == [("too_long", 2)]


def test_dead_letter_parts_say_how_many_lines_only_for_a_split_jsonl(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(_line("x" * 80) + b"{bad\n" + _line("y" * 80) + _line("z" * 80))
    _, whole = _read(path, group_bytes=1 << 20)  # one unit
    assert [(p.records[0].line, p.lines, p.relative) for p in whole] == [(2, None, False)]
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(_line("fine"))
    assert _read(clean, group_bytes=1 << 20)[1] == []  # nothing to say of a clean file read whole
    # In windows of 100 bytes every unit reports its lines, bad records or not: the sink numbers lines by them.
    _, split = _read(path, group_bytes=100)
    assert [(p.first_group, len(p.records), p.lines, p.relative) for p in split] == [
        (0, 1, 3, False), (1, 0, 1, True), (2, 0, 0, True)]  # lines start at bytes 0, 93, 98 | 191 |


@pytest.mark.parametrize("group_rows, expected", [(1, [1, 0, 0, 0, 1, 0, 0, 0, 1]), (4, [1, 1, 1])])
def test_a_bad_row_is_counted_in_the_group_that_holds_it(tmp_path, group_rows, expected):
    path = tmp_path / "a.parquet"
    texts = [None if i % 4 == 0 else f"t{i}" for i in range(9)]  # rows 0, 4 and 8 are bad: each opens a group
    pq.write_table(pa.table({"text": pa.array(texts, type=pa.string())}), path, row_group_size=4)
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    n = len(expected)
    fn = _ReadUnitFn(KEYS, True, 1, 1 << 20)
    groups, _, _ = _fn_outputs(fn, WorkUnit(f, ROWS, 0, n, n, group_rows, 9))
    assert [g.stats.totals.get("bad.null_text", 0) for g in groups] == expected


def test_the_reader_counts_bad_records_for_the_bar(tmp_path, monkeypatch):
    counted = []
    monkeypatch.setattr(progress, "count", lambda name, n=1: counted.append((name, n)))
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zst(_line("x" * 600) + b"{bad\n" + b"\n" + _line("y" * 600) + b"[1]\n"))
    _read(path, group_bytes=1000)
    assert counted == [("bad", 2), ("bad", 1)]


def test_a_unit_that_fans_out_hands_every_group_on(tmp_path):
    path = _serial(tmp_path, [600, 500, 700, 10])
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    (unit,) = plan_units(f, KEYS, 1000, 1, fan_out_bytes=10)
    assert unit.fan_out
    groups, _, fanned = _fn_outputs(_ReadUnitFn(KEYS, True, 1000, 1 << 20), unit)
    assert groups == [] and [len(g.docs) for g in fanned] == [2, 2]
    (unit,) = plan_units(f, KEYS, 1000, 1, fan_out_bytes=f.size)  # not larger than the limit: read here
    assert not unit.fan_out


# ---------------------------------------------------------------- planning


def test_a_txt_file_is_one_unit_read_whole_and_its_size_is_not_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(read_corpus, "file_size", lambda path: pytest.fail("asked the storage for a size"))
    f = InputFile(0, str(tmp_path / "a.txt"), "a.txt", None)
    assert plan_units(f, KEYS, 10, 1, fan_out_bytes=0) == [WorkUnit(f, WHOLE)]


def test_parquet_units_follow_the_group_bytes_and_unit_groups(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["x" * 10] * 100}), path, row_group_size=25)
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    rows, data_bytes = parquet_shape(str(path), KEYS)
    assert rows == 100
    units = plan_units(f, KEYS, data_bytes // 5, 2)  # a fifth of the text a group: 20 rows; 2 groups a unit
    assert [(u.kind, u.first_group, u.end_group, u.num_groups, u.group_size, u.total) for u in units] == [
        (ROWS, 0, 2, 5, 20, 100), (ROWS, 2, 4, 5, 20, 100), (ROWS, 4, 5, 5, 20, 100)]


def test_a_parquet_file_whose_layout_cannot_be_read_is_one_whole_unit(tmp_path):
    path = tmp_path / "a.parquet"
    path.write_bytes(b"not a parquet file at all")
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    assert plan_units(f, KEYS, 200, 2) == [WorkUnit(f, WHOLE)]
    groups, _ = _read(path, group_bytes=200)
    assert _totals(groups)["bad.unreadable_file"] == 1


# ---------------------------------------------------------------- progress shares


def _shares_and_advances(monkeypatch, path, group_bytes, size=_LISTED):
    """Each group's share of the file's bytes, and what the reader advanced the bar by beside them."""
    advanced = []
    monkeypatch.setattr(progress, "advance", advanced.append)
    groups, _ = _read(path, group_bytes, size=size)
    return [g.progress_bytes for g in groups], advanced


def test_a_serial_file_s_shares_follow_the_bytes_read_and_add_up_to_its_size(tmp_path, monkeypatch):
    # Random text barely compresses: the .zst is read in several blocks, so groups close at different points.
    text = os.urandom(400_000).hex()
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zst(b"".join(_line(text[i:i + 200_000]) for i in range(0, 800_000, 200_000))))
    shares, advanced = _shares_and_advances(monkeypatch, path, 200_000)
    assert sum(shares) + sum(advanced) == path.stat().st_size
    assert len(shares) == 4 and shares[0] > 0 and shares[1] > 0


def test_a_file_that_ends_on_a_full_group_advances_what_remains(tmp_path, monkeypatch):
    # tarfile stops at the end-of-archive blocks; the reader then drains the padding after the last record.
    path = tmp_path / "a.jsonl.zst.tar"
    path.write_bytes(make_tar([("a.jsonl.zst", zst(_line("x" * 600) + _line("y" * 400)))]) + bytes(1 << 20))
    shares, advanced = _shares_and_advances(monkeypatch, path, 1000)
    assert len(shares) == 1 and advanced and advanced[0] > 0
    assert sum(shares) + sum(advanced) == path.stat().st_size


def test_shares_never_pass_the_listed_size(tmp_path, monkeypatch):
    """A file listed smaller than it is read (it grew, or the reader read a block twice) still adds up."""
    path = _serial(tmp_path, [600, 500, 700, 10])
    shares, advanced = _shares_and_advances(monkeypatch, path, 1000, size=7)
    assert sum(shares) + sum(advanced) == 7


def test_a_file_of_unknown_size_advances_by_the_bytes_read(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_bytes(b"some words " * 100)
    shares, advanced = _shares_and_advances(monkeypatch, path, 10, size=None)
    assert sum(shares) + sum(advanced) == 1100


@pytest.mark.parametrize("lengths, shares, advanced", [([600, 600, 5], [200, 800], []), ([600, 600], [200], [800])])
def test_the_last_group_takes_what_the_reader_left_of_the_file(tmp_path, monkeypatch, lengths, shares, advanced):
    """A reader that stops before the end of its file (it gave up on it): the rest is the last group's."""
    def stops_early(path, keys, cap, *, position, **_):
        for i, n in enumerate(lengths):
            position.bytes = 100 * (i + 1)
            yield Document(i, ("x" * n,))

    monkeypatch.setattr(read_corpus, "read_records", stops_early)
    got = []
    monkeypatch.setattr(progress, "advance", got.append)
    f = InputFile(0, str(tmp_path / "a.jsonl.zst"), "a.jsonl.zst", 1000)
    groups, _, _ = _fn_outputs(_ReadUnitFn(KEYS, True, 1000, 1 << 20), WorkUnit(f, WHOLE))
    assert [g.progress_bytes for g in groups] == shares and got == advanced


def test_the_read_stage_finishes_the_bytes_each_output_stands_for(tmp_path, monkeypatch):
    """The bar's "read" stage is at work while the reader makes each output, and has then finished the input bytes
    that output stands for: a group's share, handed on or not (a file's shares add up to its size), none for a
    dead-letter part."""
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zst(_line("x" * 600) + b"{bad\n" + _line("y" * 500) + _line("z" * 700)))
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    for fan_out in (False, True):
        calls = []
        monkeypatch.setattr(progress, "begin", lambda stage: calls.append(("begin", stage)))
        monkeypatch.setattr(progress, "end", lambda stage, nbytes=0: calls.append(("end", stage, nbytes)))
        outputs = list(_ReadUnitFn(KEYS, True, 1000, 1 << 20).process(WorkUnit(f, WHOLE, fan_out=fan_out)))
        # Two groups (600 + 500 characters fill the first), then the bad line's dead-letter part.
        assert [type(getattr(o, "value", o)).__name__ for o in outputs] == ["DocBatch", "DocBatch",
                                                                             "DeadLetterPart"]
        # Groups leave on the main output, handed on or not (the graph reads such units apart); the dead-letter
        # part is tagged.
        assert [isinstance(o, pvalue.TaggedOutput) for o in outputs] == [False, False, True]
        assert outputs[2].tag == DEAD_LETTERS
        # Each output made between a begin and an end of the read stage, and one last look that found no more.
        assert calls[0::2] == [("begin", "read")] * 4
        ends = calls[1::2]
        assert [stage for _, stage, _ in ends] == ["read"] * 4 and ends[-1][2] == 0
        first, second, letters = (n for _, _, n in ends[:3])
        assert first > 0 and first + second == path.stat().st_size and letters == 0
        assert [first, second] == [o.progress_bytes for o in outputs[:2]]


def test_a_parquet_unit_of_a_file_of_unknown_size_has_no_bytes_to_share():
    """The bar's total counts a file by its listed size: with none (or 0) its groups have nothing to share."""
    from transforms.io.read_corpus import ProgressShares
    from transforms.io.readers import StreamPosition

    for size in (None, 0):
        unit = WorkUnit(InputFile(0, "a.parquet", "a.parquet", size), ROWS, 0, 2, 2, 5, 10)
        shares = ProgressShares(unit, StreamPosition())
        assert [shares(0, False), shares(1, True)] == [0, 0]


@pytest.mark.parametrize("fan_out_bytes", [None, 5])
def test_the_groups_are_typed_for_their_coder(fan_out_bytes):
    """ReadCorpus's groups are typed DocBatch, so Beam encodes and sizes them with BatchCoder instead of pickling
    each one to measure it (transforms/stages/coders.py), also where a large file's groups are handed on to
    other workers (a distributed runner's fan-out). The graph is built, not run."""
    import shutil

    import apache_beam as beam
    from apache_beam import coders

    from transforms.core.records import DocBatch
    from transforms.stages.coders import BatchCoder

    pipeline = beam.Pipeline()
    read = (pipeline | beam.Create([InputFile(0, "a.jsonl", "a.jsonl", 1)])
            | ReadCorpus(keys=KEYS, join_keys=True, group_bytes=10, unit_groups=1, fan_out_bytes=fan_out_bytes))
    shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)  # made by Pipeline() and removed only by run()
    assert read[DOCS].element_type is DocBatch
    assert isinstance(coders.registry.get_coder(read[DOCS].element_type), BatchCoder)


def test_a_parquet_file_of_no_rows_is_one_group_of_all_its_bytes(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": pa.array([], type=pa.string())}), path)
    groups, _ = _read(path, group_bytes=1000)
    assert [(len(g.docs), g.progress_bytes) for g in groups] == [(0, path.stat().st_size)]


def test_read_corpus_in_a_pipeline_reads_as_told_and_counts_for_monitoring(tmp_path):
    """Its settings reach the reader, and the counters a Dataflow job shows (docs/dataflow.md) add up."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    def doc(i):
        return json.dumps({"a": chr(97 + i) * 100, "b": chr(65 + i) * 100}).encode() + b"\n"

    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zst(doc(0) + doc(1) + b"{bad\n" + _line("L" * 400) + doc(2) + doc(3) + doc(4)))
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    read = (p | beam.Create([InputFile(0, str(path), path.name, path.stat().st_size)])
            | ReadCorpus(keys=("a", "b"), join_keys=True, group_bytes=1000, max_record_bytes=300, unit_groups=1,
                         fan_out_bytes=0))
    joined = [(chr(97 + i) * 100 + "\n\n" + chr(65 + i) * 100,) for i in range(5)]
    assert_that(read[DOCS] | beam.Map(lambda b: [d.values for d in b.docs]), equal_to([joined]), label="docs")
    assert_that(read[DEAD_LETTERS] | beam.Map(lambda part: [(r.line, r.reason) for r in part.records]),
                equal_to([[(3, "json_decode"), (4, "too_long")]]), label="dead_letters")
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter())["counters"]
                if c.key.metric.namespace == "read"}
    # 5 documents of 202 characters close one group of 1,010, handed on (the file is over 0 bytes).
    assert counters == {"documents": 5, "bad_records": 2, "text_bytes": 1010, "groups_fanned_out": 1}


def test_each_group_records_the_milliseconds_spent_reading_it(tmp_path, monkeypatch):
    """From when the previous group was handed on (downstream work in between is not reading)."""
    class OneSecondPerLook:
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 1.0
            return cls.now

    monkeypatch.setattr(read_stage, "time", OneSecondPerLook)
    groups, _ = _read(_serial(tmp_path, [600, 500, 700, 10]), group_bytes=1000)
    # The clock is read once when reading starts or resumes and once when a group closes: one second each.
    assert [g.stats.totals["time_ms.read"] for g in groups] == [1000, 1000]


def _no_x(values):
    """A record check: a text holding "x" is bad."""
    return ("has_x", f"{values[0][:3]!r}") if "x" in values[0] else None


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.zst", "a.parquet", "a.txt"])
def test_a_record_check_dead_letters_in_file_order_and_counts_it_bad(tmp_path, name):
    texts = ["ok", "xa", "ok too", "bxb", "fine"] * 3
    path = tmp_path / name
    if name == "a.jsonl":
        path.write_bytes(b"".join(_line(t) for t in texts))
    elif name == "a.jsonl.zst":
        path.write_bytes(zst(b"".join(_line(t) for t in texts)))
    elif name == "a.parquet":
        pq.write_table(pa.table({"text": texts}), path, row_group_size=4)
    else:
        path.write_text("a text with x")
    groups, parts = _read(path, group_bytes=20 if name != "a.jsonl" else 1 << 20, check=_no_x)
    letters = [r for p in sorted(parts, key=lambda p: (p.first_group, p.part)) for r in p.records]
    totals = _totals(groups)
    if name == "a.txt":
        assert [(r.line, r.reason, r.detail) for r in letters] == [(None, "has_x", "'a t'")]
        assert totals["bad.has_x"] == 1 and not totals["docs_good"]
        return
    first = 0 if name == "a.parquet" else 1
    bad_at = [i for i, t in enumerate(texts) if "x" in t]
    assert [(r.line, r.reason) for r in letters] == [(i + first, "has_x") for i in bad_at]
    # The record as it was in the file: the whole line (a parquet row: its key columns as one JSON object).
    assert letters[0].raw == b'{"text": "xa"}' and letters[0].detail == "'xa'" and letters[0].source == str(path)
    assert totals["bad.has_x"] == len(bad_at) and totals["docs_good"] == len(texts) - len(bad_at)
    assert totals["docs_read"] == len(texts)
    kept = [d.values[0] for g in groups for d in g.docs]
    assert kept == [t for t in texts if "x" not in t]


def test_a_record_check_in_a_split_jsonl_numbers_lines_of_the_file(tmp_path):
    texts = [f"{'x' if i % 7 == 3 else 'o'}{'.' * 40}" for i in range(60)]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(_line(t) for t in texts))
    groups, parts = _read(path, group_bytes=400, unit_groups=1, check=_no_x)
    assert sum(1 for _ in plan_units(InputFile(0, str(path), path.name, path.stat().st_size), KEYS, 400, 1)) > 3
    # Later units number from their own start; the sink turns them into file lines as for the readers' own.
    from transforms.core.units import line_bases

    assert any(p.relative for p in parts)
    bases = line_bases((p.first_group, p.end_group, p.lines) for p in parts if p.lines is not None)
    lines = [r.line + (bases[p.first_group] if p.relative else 0)
             for p in sorted(parts, key=lambda p: (p.first_group, p.part)) for r in p.records]
    assert lines == [i + 1 for i, t in enumerate(texts) if t.startswith("x")]


def _first_has_y(values):
    """A record check over two keys: bad when the first holds "y"."""
    return ("has_y", "") if "y" in values[0] else None


def test_a_record_checks_dead_letter_keeps_the_whole_line_member_and_preview(tmp_path):
    """The dead letter holds the record's raw line, every key of it (its id too), not only the values read."""
    fn = _ReadUnitFn(("a", "b"), False, 1 << 20, 1 << 20, _first_has_y)
    member = zst(b"".join(json.dumps({"id": n, "a": a, "b": b}).encode() + b"\n"
                          for n, (a, b) in enumerate([("ok", "1"), ("y" * 600, "z" * 600), ("fine", "2")])))
    path = tmp_path / "a.jsonl.zst.tar"
    path.write_bytes(make_tar([("m0.jsonl.zst", member)]))
    unit = WorkUnit(InputFile(0, str(path), path.name, path.stat().st_size))
    groups, parts, _ = _fn_outputs(fn, unit)
    (record,) = [r for p in parts for r in p.records]
    assert (record.line, record.reason, record.member) == (2, "has_y", "m0.jsonl.zst")
    # The line, previewed as the readers preview any raw line.
    line = json.dumps({"id": 1, "a": "y" * 600, "b": "z" * 600}).encode()
    assert record.raw == line[:1025]  # 1,025 bytes: one past the preview
    assert record.to_json()["raw_truncated"] is True
    assert [d.values for g in groups for d in g.docs] == [("ok", "1"), ("fine", "2")]


def test_read_corpus_hands_its_check_to_the_reader(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    path = tmp_path / "a.jsonl"
    path.write_bytes(_line("ok") + _line("xa") + _line("fine"))
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    read = (p | beam.Create([InputFile(0, str(path), path.name, path.stat().st_size)])
            | ReadCorpus(keys=KEYS, join_keys=True, group_bytes=1 << 20, unit_groups=1, check=_no_x))
    assert_that(read[DOCS] | beam.Map(lambda b: [d.values[0] for d in b.docs]), equal_to([["ok", "fine"]]),
                label="docs")
    assert_that(read[DEAD_LETTERS] | beam.Map(lambda part: [(r.line, r.reason) for r in part.records]),
                equal_to([[(2, "has_x")]]), label="dead_letters")
    p.run().wait_until_finish()
