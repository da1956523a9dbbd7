"""The dead-letter sink on its own (transforms/io/dead_letters.py, transforms/stages/dead_letters.py): parts
written, then assembled in file order.

The rules, from the sink's description and the README: one JSONL file per source under OUT/dead_letter/, named
readably and safely with a digest of the whole path; records in file order whatever order their parts arrive
in and however the source was cut into work units and parts; unit-relative line numbers turned into file line
numbers; the final file appears complete or not at all; a part count that disagrees with its records is refused.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import ROOT, run_job
from transforms.core.records import BadRecord, DeadLetterPart, InputFile
from transforms.io import dead_letters as sink
from transforms.io import fs, read_corpus
from transforms.io.dead_letters import DEAD_LETTER_DIR, dead_letter_file_name
from transforms.io.read_corpus import plan_units
from transforms.stages.dead_letters import WriteDeadLetters
from transforms.stages.read_corpus import DEAD_LETTERS, _ReadUnitFn

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
NAME = re.compile(r"^[A-Za-z0-9._-]+\.[0-9a-f]{12}\.jsonl$")  # readable tail . digest . jsonl


# ---------------------------------------------------------------- file names


def test_a_dead_letter_file_is_named_after_its_source():
    name = dead_letter_file_name("/data/my corpus/part-1.jsonl.zst")
    assert NAME.match(name)
    assert name.startswith("data_my_corpus_part-1.jsonl.zst.")  # unsafe runs become one "_", ends trimmed
    assert dead_letter_file_name("/data/my corpus/part-1.jsonl.zst") == name  # the same name on every run
    assert dead_letter_file_name("gs://bucket/x.jsonl").startswith("gs_bucket_x.jsonl.")


def test_sources_whose_readable_names_collide_get_different_files():
    sources = ["/a/b c.jsonl", "/a/b_c.jsonl", "/a/b?c.jsonl", "a/b c.jsonl", "/a/b c.jsonl ", "/a/b c.jsonL"]
    names = [dead_letter_file_name(s) for s in sources]
    assert len(set(names)) == len(sources)
    assert len({n.rsplit(".", 2)[0] for n in names[:3]}) == 1  # the readable part alone would collide


def test_a_long_source_keeps_the_tail_of_its_path():
    source = "/" + "/".join(f"directory{i:03d}" for i in range(40)) + "/the-file.jsonl"
    name = dead_letter_file_name(source)
    readable = name[:-len(".0123456789ab.jsonl")]
    assert NAME.match(name) and readable.endswith("directory039_the-file.jsonl")
    assert len(readable) <= 100 and len(readable) >= 95  # about 100 characters: the end of the path
    assert not readable.startswith(("_", ".", "-"))
    # cut right after a separator: the leading "_" goes, and nothing else
    cut = "x" * 200 + "/" + "X" * 99
    assert dead_letter_file_name(cut).startswith("X" * 99 + ".")


def test_only_separators_are_trimmed_from_both_ends():
    assert dead_letter_file_name("/data/dir/").startswith("data_dir.")
    assert dead_letter_file_name("-data.jsonl.").startswith("data.jsonl.")
    assert dead_letter_file_name(" data.jsonl ").startswith("data.jsonl.")  # spaces are unsafe: "_", trimmed
    assert dead_letter_file_name("XX/a.jsonl_X").startswith("XX_a.jsonl_X.")  # letters are kept, whatever they are


def test_names_that_sanitize_to_nothing_and_paths_that_are_not_utf8():
    assert dead_letter_file_name("///").startswith("source.")
    assert dead_letter_file_name("...").startswith("source.")
    assert dead_letter_file_name("///") != dead_letter_file_name("...")
    undecodable = os.fsdecode(b"/data/caf\xe9.jsonl")  # a lone surrogate, as Python lists such a file
    name = dead_letter_file_name(undecodable)
    assert NAME.match(name) and name.startswith("data_caf_.jsonl.")
    assert name != dead_letter_file_name(os.fsdecode(b"/data/caf\xe8.jsonl"))


# ---------------------------------------------------------------- one part


def test_a_part_is_written_at_once_and_referred_to(tmp_path):
    out = str(tmp_path / "out")
    source = "/data/a.jsonl"
    records = [BadRecord(source, 3, "json_decode", "{é ∑".encode("utf-8")), BadRecord(source, None, "unreadable")]
    ref = sink.write_part(DeadLetterPart(source, 4, 7, 2, records, True, 120), out)
    assert (ref.source, ref.first_group, ref.end_group, ref.part, ref.records, ref.relative, ref.lines) == \
        (source, 4, 7, 2, 2, True, 120)
    path = Path(ref.path)
    # in the scratch space, removed with it, apart from everything else there (OUT/.tmp/dead_letter/)
    assert path.is_relative_to(tmp_path / "out" / fs.TMP_DIR / "dead_letter")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert [json.loads(line) for line in lines] == [r.to_json() for r in records]
    assert all(line.endswith("\n") for line in lines)
    # readable and stable: the raw preview's characters as they are, keys in order
    assert "{é ∑" in lines[0] and lines[0] == json.dumps(records[0].to_json(), sort_keys=True,
                                                         ensure_ascii=False) + "\n"
    # parts of another unit, or another part of the unit, or another source, never share a file
    others = [sink.write_part(DeadLetterPart(source, 4, 7, 3, records[:1]), out),
              sink.write_part(DeadLetterPart(source, 5, 7, 2, records[:1]), out),
              sink.write_part(DeadLetterPart("/data/b.jsonl", 4, 7, 2, records[:1]), out)]
    assert len({ref.path} | {o.path for o in others}) == 4
    assert not list(path.parent.glob("*" + fs.PARTIAL_SUFFIX))


def test_a_part_without_records_writes_nothing(tmp_path):
    ref = sink.write_part(DeadLetterPart("/data/a.jsonl", 2, 3, 0, [], True, 7), str(tmp_path))
    assert ref.path is None and ref.records == 0 and ref.lines == 7
    assert list(tmp_path.iterdir()) == []


def test_parts_on_an_object_store(tmp_path):
    import uuid

    out = f"memory://dl-{uuid.uuid4().hex[:8]}/out"
    src = "/data/r.jsonl"
    refs = [sink.write_part(DeadLetterPart(src, 0, 1, p, [BadRecord(src, p + 1, "blank_line")]), out)
            for p in range(3)]
    assert all(fs.exists(r.path) for r in refs)
    assert sink.assemble((src, refs[::-1]), out) == 3
    final = fs.join(out, DEAD_LETTER_DIR, dead_letter_file_name(src))
    assert [json.loads(line)["line"] for line in fs.read_bytes(final).decode().splitlines()] == [1, 2, 3]


# ---------------------------------------------------------------- assembling a source


def _final(out, source) -> Path:
    return Path(out) / DEAD_LETTER_DIR / dead_letter_file_name(source)


def _lines(out, source) -> list:
    return [json.loads(line)["line"] for line in _final(out, source).open(encoding="utf-8")]


def test_a_source_without_written_parts_gets_no_file(tmp_path):
    out = str(tmp_path)
    refs = [sink.write_part(DeadLetterPart("/data/a.jsonl", g, g + 1, 0, [], True, 5), out) for g in range(3)]
    assert sink.assemble(("/data/a.jsonl", refs), out) == 0
    assert not (tmp_path / DEAD_LETTER_DIR).exists()


def test_parts_are_assembled_by_unit_then_part(tmp_path):
    """Units ordered by their first group, parts by number within a unit: the file's order."""
    out = str(tmp_path)
    src = "/data/a.jsonl"
    refs, line = [], 0
    for first in (0, 2, 5):  # three units, three parts each, absolute line numbers
        for part in range(3):
            records = [BadRecord(src, line + i + 1, "json_decode") for i in range(2)]
            line += 2
            refs.append(sink.write_part(DeadLetterPart(src, first, first + 2, part, records), out))
    random.Random(0).shuffle(refs)
    assert sink.assemble((src, refs), out) == 18
    assert _lines(out, src) == list(range(1, 19))


def test_relative_lines_become_file_lines_and_others_are_kept(tmp_path):
    out = str(tmp_path)
    src = "/data/s.jsonl"
    units = [  # (first, end, lines read, [relative line numbers of bad records])
        (0, 2, 10, [3, None]),
        (2, 3, 7, []),  # no bad record: only its line count
        (3, 5, 4, [1, 4]),
        (5, 6, 9, [2]),
    ]
    refs = []
    for first, end, lines, bad in units:
        records = [BadRecord(src, n, "blank_line") for n in bad]
        refs.append(sink.write_part(DeadLetterPart(src, first, end, 0, records, True, lines), out))
    assert sink.assemble((src, refs[::-1]), out) == 5
    assert _lines(out, src) == [3, None, 18, 21, 23]
    # every other field is copied as written
    rows = [json.loads(line) for line in _final(out, src).open(encoding="utf-8")]
    assert {r["reason"] for r in rows} == {"blank_line"} and {r["source"] for r in rows} == {src}


def test_a_record_moved_by_its_base_stays_readable(tmp_path):
    out = str(tmp_path)
    src = "/data/u.jsonl"
    raw = "naïve ∑ text".encode("utf-8")
    refs = [sink.write_part(DeadLetterPart(src, 0, 1, 0, [], True, 3), out),
            sink.write_part(DeadLetterPart(src, 1, 2, 0, [BadRecord(src, 2, "json_decode", raw)], True, 5), out)]
    assert sink.assemble((src, refs), out) == 1
    (line,) = _final(out, src).read_text(encoding="utf-8").splitlines(keepends=True)
    assert json.loads(line)["line"] == 5
    assert line == json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False) + "\n"  # as a part line is
    assert "naïve ∑ text" in line


def test_absolute_lines_of_a_file_read_whole_are_kept(tmp_path):
    """Parts of a unit that counts lines from the file's start carry no line count: nothing is added."""
    out = str(tmp_path)
    src = "/data/w.jsonl"
    refs = [sink.write_part(DeadLetterPart(src, 0, 1, p, [BadRecord(src, 10 * p + 4, "blank_line")]), out)
            for p in range(2)]
    assert sink.assemble((src, refs), out) == 2
    assert _lines(out, src) == [4, 14]


def test_the_final_file_appears_complete_or_not_at_all(tmp_path, monkeypatch):
    out = str(tmp_path)
    src = "/data/a.jsonl"
    refs = [sink.write_part(DeadLetterPart(src, 0, 1, 0, [BadRecord(src, 1, "x"), BadRecord(src, 2, "x")]), out)]
    scratch = Path(fs.local_scratch_dir(out))
    before = set(scratch.iterdir())

    def failing(tmp, final):
        assert Path(tmp).parent == scratch and Path(tmp).read_text().count("\n") == 2
        assert Path(tmp).name.startswith(Path(final).name + ".")  # a leftover says which file it was to become
        raise OSError("no space left")

    monkeypatch.setattr(sink.fs, "commit_local_file", failing)
    with pytest.raises(OSError, match="no space left"):
        sink.assemble((src, refs), out)
    assert not _final(out, src).exists()
    assert set(scratch.iterdir()) == before  # the temporary copy is removed
    monkeypatch.undo()
    assert sink.assemble((src, refs), out) == 2
    assert set(scratch.iterdir()) == before


def test_a_part_with_fewer_records_than_announced_is_refused(tmp_path):
    out = str(tmp_path)
    src = "/data/a.jsonl"
    ref = sink.write_part(DeadLetterPart(src, 0, 1, 0, [BadRecord(src, 1, "x"), BadRecord(src, 2, "x")]), out)
    Path(ref.path).write_text(Path(ref.path).read_text().splitlines(keepends=True)[0])  # one line lost
    with pytest.raises(RuntimeError, match=r"^dead letters of /data/a.jsonl: 1 records in the parts, 2 expected$"):
        sink.assemble((src, [ref]), out)


# ---------------------------------------------------------------- from the reader: several units, several parts


def _bad_heavy_jsonl(path: Path, n: int) -> list[int]:
    """A .jsonl with a bad line after every good one but a few; returns the bad lines' numbers (1-based)."""
    lines, bad = [], []
    for i in range(n):
        if i % 5 == 4:
            lines.append(json.dumps({"text": f"good line {i} " + "w" * (i % 13)}))
        else:
            lines.append("{broken " + str(i))
            bad.append(i + 1)
    path.write_text("\n".join(lines) + "\n")
    return bad


def _reader_parts(path: Path, group_bytes: int) -> list:
    fn = _ReadUnitFn(("text",), True, group_bytes, 1 << 20)
    units = plan_units(InputFile(0, str(path), path.name, path.stat().st_size), ("text",), group_bytes, 1)
    assert len(units) >= 3
    parts = [o.value for u in units for o in fn.process(u)
             if isinstance(o, pvalue.TaggedOutput) and o.tag == DEAD_LETTERS]
    return parts


def test_dead_letters_of_a_source_read_in_several_units_come_out_in_file_order(tmp_path, monkeypatch):
    """More bad lines per unit than a part holds: several parts per unit, units read apart, parts in any order."""
    monkeypatch.setattr(read_corpus, "DEAD_LETTER_PART_RECORDS", 7)
    path = tmp_path / "a.jsonl"
    bad = _bad_heavy_jsonl(path, 400)
    parts = _reader_parts(path, group_bytes=1500)
    by_unit = {}
    for p in parts:
        by_unit.setdefault(p.first_group, []).append(p.part)
    assert len(by_unit) >= 4 and all(max(ps) >= 2 for ps in by_unit.values())  # several units, several parts
    out = str(tmp_path / "out")
    refs = [sink.write_part(p, out) for p in parts]
    random.Random(1).shuffle(refs)
    assert sink.assemble((str(path), refs), out) == len(bad)
    assert _lines(out, str(path)) == bad


def test_the_composite_writes_one_file_per_source_and_counts_them(tmp_path, monkeypatch):
    monkeypatch.setattr(read_corpus, "DEAD_LETTER_PART_RECORDS", 7)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    bad_a, bad_b = _bad_heavy_jsonl(a, 200), _bad_heavy_jsonl(b, 90)
    parts = _reader_parts(a, 700) + _reader_parts(b, 500)
    random.Random(2).shuffle(parts)
    out = str(tmp_path / "out")
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    counted = p | beam.Create(parts, reshuffle=False) | WriteDeadLetters(out)
    assert_that(counted, equal_to([len(bad_a) + len(bad_b)]))
    p.run().wait_until_finish()
    assert sorted(os.listdir(Path(out) / DEAD_LETTER_DIR)) == sorted(dead_letter_file_name(str(s)) for s in (a, b))
    assert _lines(out, str(a)) == bad_a and _lines(out, str(b)) == bad_b


def test_a_job_writes_the_dead_letters_of_a_file_read_in_several_units_in_file_order(tmp_path, monkeypatch):
    """The whole job, in process: units read apart, more bad lines per unit than a part holds."""
    from pipelines.config import load_config
    from pipelines.job import run

    monkeypatch.setattr(read_corpus, "DEAD_LETTER_PART_RECORDS", 7)
    src = tmp_path / "in"
    src.mkdir()
    bad = _bad_heavy_jsonl(src / "a.jsonl", 400)
    argv = ["LMData", "--input_dir", str(src), "--output_dir", str(tmp_path / "out"), "--tokenizer_type",
            "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "16", "--runner", "FnApiRunner"]
    config, beam_args = load_config(argv)
    params = run(config, beam_args, {"group_bytes": 1500, "unit_groups": 1, "fan_out_bytes": None})
    assert params["input"]["bad"] == len(bad)
    assert len(plan_units(InputFile(0, str(src / "a.jsonl"), "a.jsonl", (src / "a.jsonl").stat().st_size),
                          ("text",), 1500, 1)) >= 4  # the job's units
    (final,) = (tmp_path / "out" / DEAD_LETTER_DIR).iterdir()
    assert [json.loads(line)["line"] for line in final.open()] == bad
