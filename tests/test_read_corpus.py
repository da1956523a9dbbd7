"""The reader DoFn on its own: every record of a unit is counted in exactly one group, whatever the format."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam import pvalue

from tests.helpers import ROOT, run_job, zst
from transforms.core.records import InputFile
from transforms.io.read_corpus import DEAD_LETTERS, _ReadUnitFn, plan_units

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
KEYS = ("text",)


def _read(path, group_bytes: int, unit_groups: int = 1):
    """(groups, dead-letter parts) the reader makes of a file, over all its units."""
    fn = _ReadUnitFn(KEYS, True, group_bytes, 1 << 20)
    groups, parts = [], []
    f = InputFile(0, str(path), path.name, path.stat().st_size)
    for unit in plan_units(f, KEYS, group_bytes, unit_groups):
        for out in fn.process(unit):
            if isinstance(out, pvalue.TaggedOutput):
                (parts if out.tag == DEAD_LETTERS else groups).append(out.value)
            else:
                groups.append(out)
    return groups, parts


def _totals(groups) -> Counter:
    total = Counter()
    for g in groups:
        total.update(g.stats.totals)
    return Counter({k: v for k, v in total.items() if not k.startswith("time.")})


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
    from transforms.io import read_corpus

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(_line("fine") + b"{bad\n")
    real = read_corpus._DeadLetters.add

    def add_twice(self, record):  # a reader that writes one dead letter more than it counts
        real(self, record)
        return real(self, record)

    monkeypatch.setattr(read_corpus._DeadLetters, "add", add_twice)
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
