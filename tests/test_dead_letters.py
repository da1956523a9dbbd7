"""The dead-letter sink: bounded memory whatever a source's number of bad records, file order, retry-safe."""

from __future__ import annotations

import json
import os
import tracemalloc

from apache_beam import pvalue

from tests.helpers import ROOT, run_job
from transforms.core.records import BadRecord, DeadLetterPart, InputFile
from transforms.io import dead_letters as sink
from transforms.io import read_corpus
from transforms.io.read_corpus import plan_units
from transforms.stages.read_corpus import DEAD_LETTERS, _ReadUnitFn

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def _bad_heavy_file(path, n_bad: int, every: int = 10) -> list[int]:
    """A .jsonl of blank-ish bad lines with a good line every `every`; returns the bad lines' numbers."""
    lines, bad = [], []
    for i in range(n_bad + n_bad // every):
        if i % (every + 1) == every:
            lines.append(json.dumps({"text": f"good {i}"}))
        else:
            lines.append("{not json " + str(i))
            bad.append(i + 1)
    path.write_text("\n".join(lines) + "\n")
    return bad


def test_a_reader_hands_bad_records_on_in_bounded_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(read_corpus, "DEAD_LETTER_PART_RECORDS", 100)
    path = tmp_path / "a.jsonl"
    bad = _bad_heavy_file(path, 1234)
    fn = _ReadUnitFn(("text",), True, 1 << 30, 1 << 20)
    (unit,) = plan_units(InputFile(0, str(path), "a.jsonl"), ("text",), 1 << 30, 1)
    parts = [o.value for o in fn.process(unit) if isinstance(o, pvalue.TaggedOutput) and o.tag == DEAD_LETTERS]
    assert max(len(p.records) for p in parts) <= 100
    assert [p.part for p in parts] == list(range(len(parts)))
    assert [r.line for p in parts for r in p.records] == bad  # every one, in file order


def _part(source: str, first: int, part: int, records: list, **kw) -> DeadLetterPart:
    return DeadLetterPart(source, first, first + 1, part, records, **kw)


def test_a_heavy_source_is_assembled_in_bounded_memory(tmp_path):
    out = str(tmp_path / "out")
    source = "/data/heavy.jsonl"
    refs, n = [], 0
    for p in range(30):  # 30 parts x 1000 records x ~1 KiB of preview: ~35 MB of dead letters
        records = [BadRecord(source, p * 1000 + i + 1, "json_decode", b"x" * 1024) for i in range(1000)]
        refs.append(sink.write_part(_part(source, 0, p, records), out))
        n += len(records)
    tracemalloc.start()
    try:
        assert sink.assemble((source, list(reversed(refs))), out) == n
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"assembling held {peak / 2**20:.1f} MiB"
    final = os.path.join(out, "dead_letter", sink.dead_letter_file_name(source))
    lines = [json.loads(line)["line"] for line in open(final)]
    assert lines == list(range(1, n + 1))  # parts in order, whatever order they arrived in
    before = open(final, "rb").read()
    assert sink.assemble((source, refs), out) == n  # a retry: the same file again
    assert open(final, "rb").read() == before


def test_unit_relative_lines_become_file_lines(tmp_path):
    out = str(tmp_path / "out")
    src = "/data/split.jsonl"
    refs = [
        sink.write_part(DeadLetterPart(src, 0, 2, 0, [BadRecord(src, 3, "blank_line")], False, 10), out),
        sink.write_part(DeadLetterPart(src, 2, 3, 0, [], True, 7), out),  # a unit without bad records
        sink.write_part(DeadLetterPart(src, 3, 4, 0, [BadRecord(src, 1, "blank_line"),
                                                       BadRecord(src, None, "unreadable_file")], True, 4), out),
    ]
    assert refs[1].path is None
    assert sink.assemble((src, refs), out) == 3
    final = os.path.join(out, "dead_letter", sink.dead_letter_file_name(src))
    assert [json.loads(line)["line"] for line in open(final)] == [3, 18, None]


def test_a_job_with_thousands_of_bad_lines_writes_them_all(tmp_path, monkeypatch):
    monkeypatch.setattr(read_corpus, "DEAD_LETTER_PART_RECORDS", 500)
    src = tmp_path / "in"
    src.mkdir()
    bad = _bad_heavy_file(src / "a.jsonl", 5000)
    params = run_job(["LMData", "--input_dir", str(src), "--output_dir", str(tmp_path / "out"),
                      "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
                      "--encoder_file", str(GPT2 / "encoder.json"), "--max_seq_length", "64"])
    assert params["input"]["bad"] == 5000 and params["input"]["good"] == 500
    (final,) = (tmp_path / "out" / "dead_letter").iterdir()
    assert [json.loads(line)["line"] for line in final.open()] == bad
    assert not (tmp_path / "out" / ".tmp").exists()  # the parts went with the temporary directory


def test_a_dead_letter_is_one_line_for_every_line_splitter(tmp_path):
    """JSON allows U+0085, U+2028 and U+2029 raw in a string, and str.splitlines (and many editors) break lines
    at them: they are written escaped, so that every reader sees one record per line, decoding to the same."""
    lines = ['{"text": 1, "note": "a\u0085b\u2028c\u2029d\x1ce"}', "not json \u2028 either"]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    run_job(["LMData", "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
             "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(gpt2 / "vocab.bpe"),
             "--encoder_file", str(gpt2 / "encoder.json")])
    (path,) = (tmp_path / "out" / "dead_letter").iterdir()
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2 and text.count("\n") == 2
    assert [json.loads(line)["raw"] for line in text.splitlines()] == lines


def test_records_moved_by_a_line_base_keep_their_line_breakers_escaped(tmp_path):
    """A .jsonl read as several units: the sink rewrites each record of a later unit (its line number plus the
    lines before the unit), and the rewritten line must escape U+0085, U+2028 and U+2029 as the part did. A
    single-unit job (above) never rewrites a record, so it cannot tell."""
    out = str(tmp_path / "out")
    src = "/data/split.jsonl"
    breakers = "a\u0085b\u2028c\u2029d"
    refs = [
        sink.write_part(DeadLetterPart(src, 0, 1, 0, [BadRecord(src, 2, "json_decode", f"one {breakers}".encode())],
                                        True, 3), out),  # base 0: copied as written
        sink.write_part(DeadLetterPart(src, 1, 2, 0, [BadRecord(src, 1, "json_decode", f"two {breakers}".encode()),
                                                       BadRecord(src, None, "unreadable", breakers.encode())],
                                        True, 4), out),
        sink.write_part(DeadLetterPart(src, 2, 3, 0, [BadRecord(src, 4, "blank_line", f"{breakers} three".encode())],
                                        True, 6), out),  # base 3 + 4 = 7
    ]
    assert sink.assemble((src, refs[::-1]), out) == 4
    final = os.path.join(out, "dead_letter", sink.dead_letter_file_name(src))
    with open(final, encoding="utf-8", newline="") as f:
        text = f.read()
    assert len(text.splitlines()) == 4 and text.count("\n") == 4  # one line per record, for every splitter
    escaped = "a\\u0085b\\u2028c\\u2029d"

    def line(number, reason, raw):
        return (f'{{"detail": "", "line": {number}, "member": null, "raw": "{raw}", "raw_truncated": false, '
                f'"reason": "{reason}", "source": "{src}"}}\n')

    assert text.splitlines(keepends=True) == [
        line(2, "json_decode", f"one {escaped}"),
        line(4, "json_decode", f"two {escaped}"),  # 1 + 3 lines before its unit
        line("null", "unreadable", escaped),
        line(11, "blank_line", f"{escaped} three"),  # 4 + 3 + 4
    ]
    assert [json.loads(x)["raw"] for x in text.splitlines()] == [f"one {breakers}", f"two {breakers}", breakers,
                                                                  f"{breakers} three"]
