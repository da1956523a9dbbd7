"""Evaluation sets for decontamination (issue #47): every string of every record, in any format the job reads, each
with its file, line and field; a set that cannot be read whole is an error naming where."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from transforms.io.eval_sets import EvalItem, EvalSetError, eval_files, read_eval_items

MMLU = {"question": "Which planet is largest?", "choices": ["Mars", "Jupiter", "Venus", "Earth"], "answer": 1,
        "meta": {"subject": "astronomy", "source": None}}
GSM8K = {"question": "Natalia sold clips to 48 of her friends.", "answer": "She sold 48 clips. #### 48"}


def _lines(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_every_string_of_a_record_at_any_depth_in_order(tmp_path):
    path = tmp_path / "mmlu.jsonl"
    path.write_bytes(_lines(MMLU) + b"\n" + _lines(GSM8K))  # a blank line is not an item, and counts as a line
    items = list(read_eval_items(str(path)))
    assert [(i.line, i.field, i.text) for i in items] == [
        (1, "question", "Which planet is largest?"), (1, "choices[0]", "Mars"), (1, "choices[1]", "Jupiter"),
        (1, "choices[2]", "Venus"), (1, "choices[3]", "Earth"), (1, "meta.subject", "astronomy"),
        (3, "question", GSM8K["question"]), (3, "answer", GSM8K["answer"])]
    assert items[0] == EvalItem(str(path), 1, "question", "Which planet is largest?")


def test_keys_choose_the_fields_and_a_dotted_key_reaches_inside(tmp_path):
    path = tmp_path / "mmlu.jsonl"
    path.write_bytes(_lines(MMLU, GSM8K))
    assert [(i.line, i.field) for i in read_eval_items(str(path), keys=["choices", "meta.subject", "answer"])] == [
        (1, "choices[0]"), (1, "choices[1]"), (1, "choices[2]"), (1, "choices[3]"), (1, "meta.subject"),
        (2, "answer")]  # MMLU's answer is a number: not text
    assert list(read_eval_items(str(path), keys=["nowhere.at.all"])) == []


def test_every_format_the_job_reads_gives_the_same_items(tmp_path):
    data = _lines(MMLU, GSM8K)
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member = zstandard.ZstdCompressor().compress(data)
        info = tarfile.TarInfo("part-0.jsonl.zst")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    (tmp_path / "a.jsonl.zst.tar").write_bytes(buf.getvalue())
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in MMLU.items() if k != "meta"},
                                         {"question": GSM8K["question"], "choices": None, "answer": None}]),
                   tmp_path / "a.parquet")
    for keys in (None, ["choices", "answer"]):
        want = [(i.line, i.field, i.text) for i in read_eval_items(str(tmp_path / "a.jsonl"), keys)]
        for name in ("a.jsonl.zst", "a.json.gz", "a.jsonl.zst.tar", "a.parquet"):
            got = list(read_eval_items(str(tmp_path / name), keys))
            assert {i.source for i in got} == {str(tmp_path / name)}, name
            expected = want if name != "a.parquet" else [  # (the parquet table has no meta, no GSM8K answer)
                w for w in want if not w[1].startswith("meta") and w[:2] != (2, "answer")]
            assert [(i.line, i.field, i.text) for i in got] == expected, (name, keys)
    (tmp_path / "b.txt").write_text("A whole file is one item.\nLike a document.\n")
    whole = EvalItem(str(tmp_path / "b.txt"), 1, "text", "A whole file is one item.\nLike a document.\n")
    assert list(read_eval_items(str(tmp_path / "b.txt"))) == list(read_eval_items(str(tmp_path / "b.txt"),
                                                                                   ["text"])) == [whole]
    assert list(read_eval_items(str(tmp_path / "b.txt"), ["question"])) == []  # its one field is "text"


def test_files_under_paths_each_once_sorted(tmp_path):
    (tmp_path / "suite" / "sub").mkdir(parents=True)
    for name in ("suite/b.jsonl", "suite/sub/a.parquet", "suite/notes.md", "c.jsonl"):
        (tmp_path / name).write_bytes(b"")
    listed = tmp_path / "list.txt"
    listed.write_text(f"{tmp_path / 'c.jsonl'}\n")
    found = eval_files([str(tmp_path / "suite"), str(listed), str(tmp_path / "suite" / "b.jsonl")])
    assert found == sorted([str(tmp_path / "c.jsonl"), str(tmp_path / "suite" / "b.jsonl"),
                            str(tmp_path / "suite" / "sub" / "a.parquet")])
    nothing = tmp_path / "nothing.list"
    nothing.write_text("\n")
    with pytest.raises(EvalSetError, match=f"^evaluation set {nothing}: no input files with extensions .* found "
                                           "listed in "):
        eval_files([str(nothing)])
    with pytest.raises(EvalSetError, match="nothing-.*.jsonl: no input files with extensions"):
        eval_files([str(tmp_path / "suite" / "sub" / "nothing-*.jsonl")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalSetError, match="empty: "):
        eval_files([str(tmp_path / "empty")])


def test_a_set_that_cannot_be_read_whole_is_an_error_naming_where(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_lines(GSM8K) + b"{not json\n")
    with pytest.raises(EvalSetError, match=r"bad.jsonl, line 2: not JSON"):
        list(read_eval_items(str(bad)))
    bad.write_bytes(b'["a list"]\n')
    with pytest.raises(EvalSetError, match=r"bad.jsonl, line 1: a JSON list, not an object"):
        list(read_eval_items(str(bad)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member = zstandard.ZstdCompressor().compress(_lines(GSM8K) + b"oops\n")
        info = tarfile.TarInfo("part-7.jsonl.zst")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    (tmp_path / "bad.jsonl.zst.tar").write_bytes(buf.getvalue())
    with pytest.raises(EvalSetError, match=r"bad.jsonl.zst.tar:part-7.jsonl.zst, line 2: not JSON"):
        list(read_eval_items(str(tmp_path / "bad.jsonl.zst.tar")))
    broken = tmp_path / "broken.jsonl.zst"
    broken.write_bytes(zstandard.ZstdCompressor().compress(_lines(GSM8K))[:-4])
    with pytest.raises(EvalSetError, match="broken.jsonl.zst: cannot be read: zstd stream ends mid-frame"):
        list(read_eval_items(str(broken)))
    with pytest.raises(EvalSetError, match="missing.jsonl: cannot be read: FileNotFoundError"):
        list(read_eval_items(str(tmp_path / "missing.jsonl")))
    with pytest.raises(EvalSetError, match="not a format the job reads"):
        list(read_eval_items(str(tmp_path / "x.csv")))
