"""Cerebras 2.10's inputs that 2.1.1 lacks: a .txt read a line a record, and `setup.data.type: huggingface`.

2.10 reads a .txt with Hugging Face's "text" builder: every line is a record (universal newlines), while the
2.1.1 interface (`create_hdf5_dataset LMData --input_dir`) keeps a .txt one document. Blank lines are read,
counted and dropped (`blank_line`), never tokens and never dead letters. A Hugging Face dataset's split is
resolved at launch to its files, which the job reads with its own readers: here a local directory laid out
as a Hub snapshot (README.md `configs:`), since the tests have no network.
"""

from __future__ import annotations

import io
import json
import os
import string
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, RUNNER, read_rows
from transforms.core.records import BLANK_LINE, INVALID_UTF8, BadRecord, Document, InputFile, SkippedRecord
from transforms.core.units import jsonl_units
from transforms.io.read_corpus import plan_units
from transforms.io.readers import read_records

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
HOOKS = "cerebras.modelzoo.data_preparation.data_preprocessing.hooks"

# As tests/data/cerebras210/autoregressive_lm_preprocessing.yaml (2.10's shipped config), with a smaller
# max_seq_length so that a small input makes many rows.
PRETRAINING = string.Template("""\
setup:
  data:
$data
  mode: pretraining
  output_dir: $out
  processes: 1
processing:
  custom_tokenizer: gpt2tokenizer
  tokenizer_params:
    vocab_file: $gpt2/vocab.bpe
    encoder_file: $gpt2/encoder.json
  max_seq_length: 64
  short_seq_prob: 0.0
  write_in_batch: true
  resume_from_checkpoint: false
  seed: 0
  read_hook: $hooks:text_read_hook
  read_hook_kwargs:
    text_key: $text_key
  shuffle_seed: 0
  shuffle: false
  use_ftfy: true
  ftfy_normalizer: NFC
  wikitext_detokenize: false
  UNSAFE_skip_jsonl_decoding_errors: false
dataset:
  pack_sequences: true
""")


def _config(tmp: Path, data: dict, name: str = "cfg", text_key: str = "text") -> Path:
    lines = "\n".join(f"    {k}: {json.dumps(v)}" for k, v in data.items())
    path = tmp / f"{name}.yaml"
    path.write_text(PRETRAINING.substitute(data=lines, out=tmp / f"{name}_out", gpt2=GPT2, hooks=HOOKS,
                                           text_key=text_key))
    return path


def _run_210(config: Path, *flags: str, **plan_changes) -> dict:
    from pipelines.config import load_config
    from pipelines.job import run

    cfg, beam_args = load_config(["--config", str(config), *flags, *RUNNER])
    return run(cfg, beam_args, plan_changes)


def _out(config: Path) -> Path:
    return config.parent / f"{config.stem}_out"


def _records(path: Path, **kwargs) -> list:
    return [_fields(r) for r in read_records(str(path), ("text",), txt_lines=True, **kwargs)]


def _fields(r) -> tuple:
    if type(r) is Document:
        return ("doc", r.index, r.values)
    if type(r) is SkippedRecord:
        return ("skip", r.index, r.reason)
    return ("bad", r.line, r.reason, r.raw)


# ---------------------------------------------------------------- the reader


def test_a_txt_line_is_a_record(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\rthree\n\n \t \nfour\xff\nfive\xe2\x80\xa8still five\n")
    assert _records(path) == [
        ("doc", 0, ("one",)),  # the byte order mark is dropped; "\r\n" is one break
        ("doc", 1, ("two",)),  # a lone "\r" ends a line, as open() in text mode makes it
        ("doc", 2, ("three",)),
        ("skip", 3, BLANK_LINE),  # empty
        ("skip", 4, BLANK_LINE),  # only whitespace: 2.10's text_read_hook strips it to nothing
        ("bad", 6, INVALID_UTF8, b"four\xff"),  # line 6 (1-based), and only that line
        ("doc", 6, ("five\u2028still five",)),  # U+2028 is text, not a break (as in the text builder)
    ]  # a break at the end of the file starts no line
    # 2.1.1's reading, unchanged: the whole file is one document (here, one refused for its invalid UTF-8).
    assert [type(r) for r in read_records(str(path), ("text",))] == [BadRecord]
    (tmp_path / "b.txt").write_text("x\n\ny\n")
    assert [r.values for r in read_records(str(tmp_path / "b.txt"), ("text",))] == [("x\n\ny\n",)]


def test_the_key_of_a_txt_line_is_its_one_column(tmp_path):
    """A .txt has one column: it is read under whatever name the one key has (2.10 calls it "text")."""
    path = tmp_path / "a.txt"
    path.write_text("x\ny\n")
    assert [r.values for r in read_records(str(path), ("content",), txt_lines=True)] == [("x",), ("y",)]
    (bad,) = read_records(str(path), ("prompt", "completion"), txt_lines=True)
    assert bad.reason == "missing_key" and bad.line is None  # the file, once: no mode reads two columns of it


_PIECE = st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
                   st.sampled_from(["", " ", "\t", "\u2028", "\x85", "\x0c"]))
_BREAK = st.sampled_from(["\n", "\r\n", "\r", "\r\r\n", "\n\r"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.tuples(_PIECE, _BREAK), max_size=20), tail=_PIECE)
def test_lines_are_those_of_the_text_builder(tmp_path, pieces, tail):
    """The records are the lines Hugging Face's text builder reads: open() in text mode (universal newlines),
    then StringIO.readlines() without the "\\n" [datasets/packaged_modules/text/text.py]; blank ones skipped."""
    content = "".join(p + b for p, b in pieces) + tail
    path = tmp_path / "t.txt"
    path.write_bytes(content.encode("utf-8"))
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in io.StringIO(f.read()).readlines()]
    expected = [("skip", i, BLANK_LINE) if not line or line.isspace() else ("doc", i, (line,))
                for i, line in enumerate(lines)]
    assert _records(path) == expected


def test_lines_equal_the_text_builders_own(tmp_path):
    datasets = pytest.importorskip("datasets")
    content = "a first line\r\nsecond\rthird\n\n   \nlast without a break"
    path = tmp_path / "t.txt"
    path.write_bytes(content.encode("utf-8"))
    rows = [r["text"] for r in datasets.load_dataset("text", data_files=str(path), split="train", streaming=True)]
    ours = read_records(str(path), ("text",), txt_lines=True)
    assert [r.values[0] if type(r) is Document else "" for r in ours] == [r.strip() and r for r in rows]


def test_a_crlf_cut_between_two_blocks_is_one_break():
    from transforms.io.readers.txt import _universal_newlines

    blocks = [b"a\r", b"\nb\r", b"\r", b"\n", b"\n", b"c\r"]
    assert b"".join(_universal_newlines(blocks)) == b"a\nb\n\n\nc\n"
    assert b"".join(_universal_newlines([b"\r", b"\n"])) == b"\n"


_LINE = st.one_of(st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
                  st.sampled_from([b"", b"   ", b"\xff\xfe", b"\xef\xbb\xbf"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.tuples(_LINE, st.sampled_from([b"\n", b"\r\n", b"\r"])), max_size=25),
       bom=st.booleans(), window=st.integers(1, 60), cap=st.sampled_from([1 << 20, 10]))
def test_byte_windows_partition_the_lines_of_a_txt(tmp_path, lines, bom, window, cap):
    """A .txt read by line is split into work units exactly as a .jsonl: the records do not depend on the cut,
    a "\\r\\n" across a window's end included."""
    content = (b"\xef\xbb\xbf" if bom else b"") + b"".join(line + brk for line, brk in lines)
    path = tmp_path / "f.txt"
    path.write_bytes(content)
    whole = _records(path, max_record_bytes=cap)
    got, line = [], 0
    for u in jsonl_units(InputFile(0, str(path), "f.txt", len(content)), len(content), window):
        end = None if u.first_group == u.num_groups - 1 else u.end_group * window
        records = _records(path, max_record_bytes=cap, byte_range=(u.first_group * window, end), first_line=line)
        line += len(records)
        got.extend(records)
    assert got == whole


def test_a_large_txt_is_planned_as_units_only_when_read_by_line(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"a line of text\n" * 1000)
    f = InputFile(0, str(path), "big.txt", os.path.getsize(path))
    units = plan_units(f, ("text",), group_bytes=4000, unit_groups=1, txt_lines=True)
    assert len(units) == 4 and {u.kind for u in units} == {"bytes"}
    assert len(plan_units(f, ("text",), group_bytes=4000, unit_groups=1)) == 1  # one document: one unit
    assert len(plan_units(f, ("a", "b"), group_bytes=4000, unit_groups=1, txt_lines=True)) == 1  # refused once


# ---------------------------------------------------------------- a 2.10 config over .txt input


TEXT = ["The first line of the corpus.", "", "A second line, after a blank one.", "   ",
        "Ein dritter Satz mit Umlauten: äöü.", "The last line; the file ends with a break."]


def _txt_and_jsonl(tmp: Path, newline: str) -> tuple[Path, Path]:
    """The same text as one .txt (a line a record) and as the .jsonl of its non-blank lines."""
    txt, jsonl = tmp / "txt", tmp / "jsonl"
    txt.mkdir()
    jsonl.mkdir()
    lines = TEXT * 40
    (txt / "corpus.txt").write_bytes(newline.join(lines).encode() + newline.encode())
    (jsonl / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines if t.strip()))
    return txt, jsonl


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_210_config_reads_a_txt_a_line_a_record(tmp_path, newline):
    txt, jsonl = _txt_and_jsonl(tmp_path, newline)
    from_txt = _run_210(_config(tmp_path, {"source": str(txt), "type": "local"}, "from_txt"))
    from_jsonl = _run_210(_config(tmp_path, {"source": str(jsonl), "type": "local"}, "from_jsonl"))
    read = from_txt["input"]
    lines, blank = len(TEXT) * 40, 2 * 40
    assert read["documents_read"] == lines == read["good"]  # every line accounted for
    assert read["used"] == lines - blank == from_jsonl["input"]["used"]
    assert read["dropped_by_reason"] == {"blank_line": blank} and read["bad"] == 0
    assert not (_out(tmp_path / "from_txt.yaml") / "dead_letter").exists()
    assert from_txt["setup"]["txt_lines"] is True
    # Each line is a document of its own (its own EOS), stripped as 2.10's hook strips it: the rows are those
    # of the .jsonl of the non-blank lines, token for token (CRLF or not).
    ours, theirs = read_rows(_out(tmp_path / "from_txt.yaml")), read_rows(_out(tmp_path / "from_jsonl.yaml"))
    assert ours.shape == theirs.shape and np.array_equal(ours, theirs)


def test_211_interface_keeps_a_txt_one_document(tmp_path):
    from tests.helpers import run_job

    txt, _ = _txt_and_jsonl(tmp_path, "\n")
    argv = ["LMData", "--input_dir", str(txt), "--tokenizer_type", "GPT2Tokenizer", "--vocab_file",
            str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"), "--max_seq_length", "64"]
    params = run_job([*argv, "--output_dir", str(tmp_path / "one")])
    assert params["input"]["documents_read"] == 1 and params["setup"]["txt_lines"] is False
    # ... unless asked: the setting reads it as 2.10 does.
    params = run_job([*argv, "--output_dir", str(tmp_path / "lines"), "--txt_lines", "True"])
    assert params["input"]["documents_read"] == len(TEXT) * 40
    assert params["input"]["dropped_by_reason"] == {"blank_line": 80}


def test_210_large_txt_split_into_units_gives_the_same_rows(tmp_path):
    """2.5 MiB of .txt lines in packing groups of 1 MiB: read as three work units or as one, the same rows; a
    bad line of the last unit is a dead letter with its line in the file."""
    src = tmp_path / "in"
    src.mkdir()
    lines = [f"Line {i}: " + " ".join(TEXT[i % len(TEXT)] for _ in range(1 + i % 5)) for i in range(30_000)]
    for i in range(0, len(lines), 997):
        lines[i] = ""
    data = "\r\n".join(lines).encode()
    bad_line = 29_000
    data = data.replace(lines[bad_line].encode(), b"broken \xff UTF-8", 1)
    (src / "big.txt").write_bytes(data)
    assert os.path.getsize(src / "big.txt") > 2.5 * (1 << 20)
    config = _config(tmp_path, {"source": str(src), "type": "local"}, "units")
    split = _run_210(config, "--packing_group_mb", "1", unit_groups=1)
    rows_split = read_rows(_out(config))
    whole_config = _config(tmp_path, {"source": str(src), "type": "local"}, "whole")
    whole = _run_210(whole_config, "--packing_group_mb", "1", unit_groups=1000)
    assert np.array_equal(rows_split, read_rows(_out(whole_config)))
    big = InputFile(0, str(src / "big.txt"), "big.txt", os.path.getsize(src / "big.txt"))
    assert len(plan_units(big, ("text",), 1 << 20, unit_groups=1, txt_lines=True)) == 3  # what unit_groups=1 read
    assert split["input"] == whole["input"]
    assert split["input"]["documents_read"] == len(lines)
    assert split["input"]["bad_by_reason"] == {"invalid_utf8": 1}
    assert split["input"]["dropped_by_reason"].get("blank_line") == len(range(0, len(lines), 997))
    for config in (config, whole_config):
        (letters,) = (_out(config) / "dead_letter").glob("*big.txt*")
        (letter,) = map(json.loads, letters.read_text().splitlines())
        assert letter["line"] == bad_line + 1 and letter["raw"].startswith("broken")


# ---------------------------------------------------------------- setup.data.type: huggingface


CARD = """\
---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: validation
    path: data/validation-*.parquet
---
# A dataset laid out as a Hub snapshot
"""


@pytest.fixture
def snapshot(tmp_path) -> Path:
    """A dataset directory as the Hub lays one out: train in two parquet shards, validation in one."""
    root = tmp_path / "snapshot"
    (root / "data").mkdir(parents=True)
    train = [f"Training document {i}: " + TEXT[i % len(TEXT)] + " More words follow here." for i in range(60)]
    validation = [f"Validation document {i} is another text entirely, held out." for i in range(25)]
    for k, part in enumerate((train[:40], train[40:])):
        pq.write_table(pa.table({"id": list(range(len(part))), "content": part}),
                       root / "data" / f"train-0000{k}-of-00002.parquet")
    pq.write_table(pa.table({"id": list(range(25)), "content": validation}),
                   root / "data" / "validation-00000-of-00001.parquet")
    (root / "README.md").write_text(CARD)
    return root


def test_hf_dataset_split_is_read_from_its_files(tmp_path, snapshot):
    pytest.importorskip("datasets")
    got = {}
    for split in ("train", "validation"):
        config = _config(tmp_path, {"source": str(snapshot), "split": split, "type": "huggingface"}, split,
                         text_key="content")
        got[split] = _run_210(config)
    train, validation = got["train"]["input"], got["validation"]["input"]
    assert train["documents_read"] == train["used"] == 60 and train["bad"] == 0
    assert validation["documents_read"] == validation["used"] == 25
    assert sorted(Path(p).name for p in train["per_source"]) == ["train-00000-of-00002.parquet",
                                                                  "train-00001-of-00002.parquet"]
    assert [Path(p).name for p in validation["per_source"]] == ["validation-00000-of-00001.parquet"]
    rows = {split: read_rows(_out(tmp_path / f"{split}.yaml")) for split in got}
    assert not np.array_equal(rows["train"][:1], rows["validation"][:1])
    params = got["train"]
    assert params["setup"]["hf_dataset"] == str(snapshot) and params["setup"]["hf_split"] == "train"
    assert params["setup"]["data"]["type"] == "huggingface"  # 2.10's own keys, as 2.10 records them


def test_hf_dataset_of_json_lines_with_its_key_columns(tmp_path):
    """prompt/completion columns of .jsonl files, read by 2.10's prompt_completion_text_read_hook."""
    pytest.importorskip("datasets")
    root = tmp_path / "pairs"
    (root / "data").mkdir(parents=True)
    for split, n in (("train", 30), ("test", 7)):
        with open(root / "data" / f"{split}.jsonl", "w") as f:
            for i in range(n):
                pair = {"question": f"What does {split} question number {i} ask of the model?",
                        "answer": f"It asks for answer number {i}, which is this one.", "n": i}
                f.write(json.dumps(pair) + "\n")
    config = tmp_path / "pairs.yaml"
    text = _config(tmp_path, {"source": str(root), "split": "test", "type": "huggingface"}, "pairs").read_text()
    text = text.replace("mode: pretraining", "mode: finetuning").replace(
        f"read_hook: {HOOKS}:text_read_hook", f"read_hook: {HOOKS}:prompt_completion_text_read_hook").replace(
        "    text_key: text", "    prompt_key: question\n    completion_key: answer")
    config.write_text(text)
    params = _run_210(config)
    assert params["input"]["documents_read"] == params["input"]["used"] == 7
    assert [Path(p).name for p in params["input"]["per_source"]] == ["test.jsonl"]


def _refusal(tmp_path, capsys, data: dict) -> str:
    from pipelines.create_hdf5_dataset import main

    config = _config(tmp_path, data, "refused")
    assert main(["--config", str(config), *RUNNER]) == 2
    assert not _out(config).exists()  # refused before anything was read or written
    return capsys.readouterr().err


def test_hf_missing_split_is_named_with_the_splits_there_are(tmp_path, capsys, snapshot):
    pytest.importorskip("datasets")
    err = _refusal(tmp_path, capsys, {"source": str(snapshot), "split": "test", "type": "huggingface"})
    assert "no split 'test'; its splits: train, validation" in err, err


def test_hf_formats_that_cannot_be_read_are_named(tmp_path, capsys):
    pytest.importorskip("datasets")
    csv = tmp_path / "csv"
    (csv / "data").mkdir(parents=True)
    (csv / "data" / "train.csv").write_text("text\nhello\n")
    err = _refusal(tmp_path, capsys, {"source": str(csv), "split": "train", "type": "huggingface"})
    assert "is csv data (train.csv), a format this tool does not read" in err, err
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / "train.json").write_text('{"text": "one JSON document"}')
    err = _refusal(tmp_path, capsys, {"source": str(doc), "split": "train", "type": "huggingface"})
    assert "holds train.json, json data in a file this tool does not read" in err, err
    script = tmp_path / "scripted"
    script.mkdir()
    (script / "scripted.py").write_text("import datasets\n")
    err = _refusal(tmp_path, capsys, {"source": str(script), "split": "train", "type": "huggingface"})
    assert "loading script" in err, err


def test_hf_split_slicing_and_record_settings_are_refused(tmp_path, snapshot):
    pytest.importorskip("datasets")
    from transforms.io.hf_datasets import HfDatasetError, resolve_split_files

    with pytest.raises(HfDatasetError, match=r"slicing \(train\[:10%\]\)"):
        resolve_split_files(str(snapshot), "train[:10%]")
    both = resolve_split_files(str(snapshot), "train+validation")
    assert [Path(f).name for f in both.files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet",
                                                  "validation-00000-of-00001.parquet"]
    assert both.root == str(snapshot) and both.builder == "parquet"
    text = tmp_path / "paragraphs"
    text.mkdir()
    (text / "train.txt").write_text("a\n\nb\n")
    (text / "README.md").write_text("---\nconfigs:\n- config_name: default\n  sample_by: paragraph\n  data_files:\n"
                                    "  - split: train\n    path: train.txt\n---\n")
    with pytest.raises(HfDatasetError, match="sample_by='paragraph', which changes what a record is"):
        resolve_split_files(str(text), "train")


def test_hf_without_the_library_says_how_to_install_it(monkeypatch):
    from transforms.io.hf_datasets import HfDatasetError, resolve_split_files

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now raises ImportError
    with pytest.raises(HfDatasetError, match=r"pip install 'create-hdf5-dataset\[huggingface\]'"):
        resolve_split_files("user/dataset", "train")


def test_hf_config_translation(tmp_path):
    """2.10's keys onto ours; what only tunes 2.10's own copy is a notice; what cannot be done is refused."""
    from pipelines.cerebras210 import translate
    from pipelines.config import ConfigError, load_config

    config, _ = load_config(["--config", str(_config(tmp_path, {
        "type": "huggingface", "source": "user/dataset", "split": "train", "name": "en", "revision": "v1.0",
        "cache_dir": "/tmp/cache", "format": "parquet"}))])
    assert (config.hf_dataset, config.hf_split) == ("user/dataset", "train")
    assert json.loads(config.hf_options) == {"name": "en", "revision": "v1.0"}
    assert config.txt_lines and config.input_dir is None
    assert any(n.startswith("setup.data.cache_dir: accepted, no effect") for n in config.notices)

    def refused(data: dict) -> str:
        with pytest.raises(ConfigError) as e:
            translate({"setup": {"mode": "pretraining", "data": data}}, "cfg.yaml")
        return str(e.value)

    assert "setup.data.split (e.g. train) is required" in refused({"type": "huggingface", "source": "u/d"})
    assert "HF_TOKEN" in refused({"type": "huggingface", "source": "u/d", "split": "train", "token": "hf_x"})
    assert "streaming_mode: not supported" in refused(
        {"type": "huggingface", "source": "u/d", "split": "train", "streaming_mode": 1})
    assert "do not apply to type huggingface" in refused(
        {"type": "huggingface", "source": "u/d", "split": "train", "subsets": ["a"]})


def test_hf_settings_of_the_211_interface(tmp_path):
    from pipelines.config import ConfigError, load_config

    base = ["LMData", "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", "v", "--encoder_file", "e"]
    config, _ = load_config([*base, "--hf_dataset", "user/ds", "--hf_split", "train", "--hf_options",
                             '{"data_dir": "en"}'])
    assert config.txt_lines and json.loads(config.hf_options) == {"data_dir": "en"}
    for extra, message in [(["--hf_dataset", "u/d"], "hf_split is required"),
                           (["--hf_dataset", "u/d", "--hf_split", "train", "--input_dir", "x"], "both set"),
                           (["--hf_dataset", "u/d", "--hf_split", "train", "--txt_lines", "False"], "txt_lines False"),
                           (["--hf_dataset", "u/d", "--hf_split", "train", "--hf_options", "[1]"], "a mapping"),
                           (["--hf_dataset", "u/d", "--hf_split", "train", "--hf_options", '{"x": 1}'],
                            "x: not supported"),
                           (["--input_dir", "x", "--hf_split", "train"], "hf_split applies to hf_dataset")]:
        with pytest.raises(ConfigError, match=message):
            load_config([*base, *extra])


def test_hf_hub_files_are_read_through_fsspec(tmp_path, snapshot, monkeypatch):
    """A Hub dataset resolves to hf://datasets/NAME@SHA/... URLs, which the workers open with fsspec's "hf"
    filesystem (huggingface_hub's). Offline, a stand-in filesystem serves the snapshot under that protocol."""
    datasets = pytest.importorskip("datasets")
    import fsspec
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem

    assert fsspec.get_filesystem_class("hf").__module__.startswith("huggingface_hub")  # what workers get
    sha = "0123456789abcdef0123456789abcdef01234567"
    hub = tmp_path / "hub"
    (hub / "datasets" / "user").mkdir(parents=True)
    (hub / "datasets" / "user" / f"ds@{sha}").symlink_to(snapshot)

    class OfflineHub(DirFileSystem):
        protocol = "hf"

        def __init__(self, *args, **kwargs):
            super().__init__(path=str(hub), fs=LocalFileSystem())

    real = datasets.load_dataset_builder

    def as_from_the_hub(source, **kwargs):  # the builder of the snapshot, with the Hub's URLs
        assert source == "user/ds"
        builder = real(str(snapshot), **kwargs)
        base = f"hf://datasets/user/ds@{sha}"
        builder.base_path = base
        builder.config.data_files = {split: [f.replace(str(snapshot), base) for f in files]
                                     for split, files in builder.config.data_files.items()}
        return builder

    hf_filesystem = fsspec.get_filesystem_class("hf")
    fsspec.register_implementation("hf", OfflineHub, clobber=True)
    try:
        monkeypatch.setattr(datasets, "load_dataset_builder", as_from_the_hub)
        config = _config(tmp_path, {"source": "user/ds", "split": "train", "type": "huggingface"}, "hub",
                         text_key="content")
        params = _run_210(config)
    finally:
        fsspec.register_implementation("hf", hf_filesystem, clobber=True)
    assert sorted(params["input"]["per_source"]) == [f"hf://datasets/user/ds@{sha}/data/train-0000{k}-of-00002.parquet"
                                                     for k in range(2)]
    assert params["input"]["documents_read"] == params["input"]["used"] == 60
    monkeypatch.undo()
    _run_210(_config(tmp_path, {"source": str(snapshot), "split": "train", "type": "huggingface"}, "local",
                     text_key="content"))
    assert np.array_equal(read_rows(_out(config)), read_rows(_out(tmp_path / "local.yaml")))
