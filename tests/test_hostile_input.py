"""Hostile and everyday input that used to stop a job or lose a record (issue #33, defects 1-4 and 8).

- JSON nested past the interpreter's recursion limit: a TOO_DEEP dead letter at a fixed depth, whatever the
  stack of the caller (a runner's worker calls the reader from deeper than a test does);
- an output no document reaches (a 1 % split of a small input, a subset of bad records or of an empty file):
  a valid empty dataset with its directory and data_params.json, listed in the summary, accepted by verify;
  a fraction of 0 is refused before the job;
- a symbolic link loop, a FIFO among the inputs: unreadable_file dead letters, never a failed or hung job;
- a Chat or DPO record refused by the conversation check: its dead letter holds the whole raw line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, RUNNER, SHARED, h5_files, require_shared, run_job
from transforms.core.records import MAX_JSON_DEPTH, TOO_DEEP, BadRecord, Document, JsonKey
from transforms.io.readers import read_records

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
CONVERSATION = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]


def _lm(input_dir, out, *extra) -> list[str]:
    return ["LMData", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "16", *extra]


def _chat(mode, input_dir, out, *extra) -> list[str]:
    return [mode, "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type", "HuggingFaceTokenizer",
            "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "128", *extra]


def _jsonl(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join((ln if isinstance(ln, bytes) else json.dumps(ln).encode()) + b"\n" for ln in lines))
    return path


def _dead_letters(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in p.read_text().splitlines()]


def _verify(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", "verify", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _nested(depth: int) -> bytes:
    """A JSON array nested `depth` levels deep."""
    return b"[" * depth + b"1" + b"]" * depth


# ---------------------------------------------------------------- 1. nesting


def _at_stack_depth(frames: int, fn):
    """fn() called from `frames` Python frames deeper than here: as a runner's worker calls a reader."""
    if frames == 0:
        return fn()
    return _at_stack_depth(frames - 1, fn)


@pytest.mark.parametrize("frames", [0, 150, 400, 600])
def test_nesting_is_refused_at_a_fixed_depth_whatever_the_callers_stack(tmp_path, frames):
    """The messages value nested from just under the limit to past Python's recursion limit: read, or TOO_DEEP
    with its raw line, at the same depth for every caller. (Before: json.loads read a line that json.dumps of the
    same value then could not write, from a deep enough stack: a RecursionError ended the job.)"""
    depths = [MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 500, 900, 960, 965,
              970, 990, 1100, 5000]
    lines = [b'{"id": %d, "messages": [{"role": "user", "content": "hi", "extra": %s}]}' % (d, _nested(d - 3))
             for d in depths]
    path = _jsonl(tmp_path / "a.jsonl", lines)
    records = _at_stack_depth(frames, lambda: list(read_records(str(path), (JsonKey("messages"),))))
    for depth, line, record in zip(depths, lines, records):
        if depth <= MAX_JSON_DEPTH:
            assert type(record) is Document, (depth, record)
        else:
            assert type(record) is BadRecord and record.reason == TOO_DEEP, (depth, record)
            assert record.raw == line[:1025] and record.line == depths.index(depth) + 1


def test_brackets_inside_strings_are_text_not_nesting(tmp_path):
    text = "[" * 5000 + "{" * 5000 + '\\"[[' * 100
    path = _jsonl(tmp_path / "a.jsonl", [{"text": text, "meta": [[["ok"]]]}])
    (record,) = read_records(str(path), ("text",))
    assert record == Document(0, (text,))


def test_a_chat_job_with_deeply_nested_records_finishes_and_accounts_for_them(tmp_path):
    lines = [{"id": 0, "messages": CONVERSATION}]
    lines += [b'{"id": %d, "messages": [{"role": "user", "content": "hi", "x": %s}, '
              b'{"role": "assistant", "content": "ok"}]}' % (d, _nested(d)) for d in (300, 962, 964, 966, 2000)]
    _jsonl(tmp_path / "in" / "a.jsonl", lines)
    out = tmp_path / "out"
    params = run_job(_chat("Chat", tmp_path / "in", out))
    assert params["input"]["bad_by_reason"] == {TOO_DEEP: 5} and params["input"]["used"] == 1
    letters = _dead_letters(out)
    assert [d["line"] for d in letters] == [2, 3, 4, 5, 6]
    assert all(d["raw"].startswith('{"id": ') for d in letters)


# ---------------------------------------------------------------- 2. outputs that get no document


def test_a_split_no_document_reaches_is_an_empty_dataset_verify_accepts(tmp_path):
    _jsonl(tmp_path / "in" / "a.jsonl", [{"text": f"document number {i} with a few words"} for i in range(5)])
    out = tmp_path / "out"
    summary = run_job(_lm(tmp_path / "in", out, "--data_splits", "train=0.99,validation=0.01"))
    rows = {o["path"]: o for o in summary["outputs"]}
    assert rows["validation"]["documents"] == 0 and rows["validation"]["sequences"] == 0
    assert rows["train"]["documents"] == 5
    empty = json.loads((out / "validation" / "data_params.json").read_text())
    assert empty["files"] == {} and empty["post-process"]["n_examples"] == 0 and "empty" in empty
    assert not h5_files(out / "validation")
    assert "empty" not in json.loads((out / "train" / "data_params.json").read_text())
    proc = _verify(out)
    assert proc.returncode == 0, proc.stdout
    assert "validation: an empty dataset" in proc.stdout


def test_subsets_of_bad_records_or_of_an_empty_file_are_empty_datasets(tmp_path):
    _jsonl(tmp_path / "in" / "good" / "a.jsonl", [{"text": f"document number {i} with a few words"} for i in range(4)])
    _jsonl(tmp_path / "in" / "bad" / "a.jsonl", [b"not json", {"other": 1}])
    (tmp_path / "in" / "empty").mkdir()
    (tmp_path / "in" / "empty" / "a.jsonl").write_bytes(b"")
    out = tmp_path / "out"
    summary = run_job(_lm(tmp_path / "in", out, "--top_level_as_subsets", "True"))
    sequences = {o["path"]: o["sequences"] for o in summary["outputs"]}
    assert sequences["bad"] == sequences["empty"] == 0 and sequences["good"] > 0
    assert summary["input"]["bad"] == 2
    for name in ("bad", "empty"):
        assert json.loads((out / name / "data_params.json").read_text())["files"] == {}
    assert _verify(out).returncode == 0


def test_a_job_that_writes_no_sequence_verifies_as_empty(tmp_path):
    _jsonl(tmp_path / "in" / "a.jsonl", [b"not json", {"other": 1}])
    out = tmp_path / "out"
    params = run_job(_lm(tmp_path / "in", out))
    assert params["post-process"]["n_examples"] == 0 and params["files"] == {}
    proc = _verify(out)
    assert proc.returncode == 0 and "an empty dataset" in proc.stdout, proc.stdout


# ---------------------------------------------------------------- 3. the file system's oddities


def _loops_and_fifo(root: Path) -> Path:
    _jsonl(root / "a.jsonl", [{"text": f"document number {i} with a few words"} for i in range(3)])
    os.symlink("l2.jsonl", root / "l1.jsonl")
    os.symlink("l1.jsonl", root / "l2.jsonl")
    os.symlink("nowhere.jsonl", root / "dangling.jsonl")
    os.symlink("selfloop", root / "selfloop")  # a directory-like name without an extension
    os.mkfifo(root / "pipe.jsonl")  # opening it would wait for a writer forever
    return root


def test_link_loops_dangling_links_and_fifos_are_dead_letters_not_failures(tmp_path):
    inputs = _loops_and_fifo(tmp_path / "in")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *_lm(inputs, out), *RUNNER],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    params = json.loads((out / "data_params.json").read_text())
    assert params["input"]["bad_by_reason"] == {"unreadable_file": 4} and params["input"]["used"] == 3
    details = {Path(d["source"]).name: d["detail"] for d in _dead_letters(out)}
    assert "Too many levels of symbolic links" in details["l1.jsonl"]
    assert "Too many levels of symbolic links" in details["l2.jsonl"]
    assert details["pipe.jsonl"] == "not a regular file: a FIFO (named pipe)"
    assert "dangling.jsonl" in details
    # The self-looping name is a link that leads nowhere, not "a file without a valid extension".
    assert "link(s)" in proc.stderr and "selfloop" in proc.stderr
    assert "without a valid extension" not in proc.stderr


def test_a_link_loop_is_a_permanent_error_not_one_to_retry(tmp_path):
    from transforms.io.readers import file_size

    os.symlink("b.jsonl", tmp_path / "a.jsonl")
    os.symlink("a.jsonl", tmp_path / "b.jsonl")
    assert file_size(str(tmp_path / "a.jsonl")) is None  # the reader then says why, as for a missing file
    (record,) = read_records(str(tmp_path / "a.jsonl"), ("text",))
    assert record.reason == "unreadable_file" and "symbolic links" in record.detail


# ---------------------------------------------------------------- 4. chat dead letters hold the record


def test_chat_and_dpo_dead_letters_hold_the_whole_raw_line(tmp_path):
    chat = [{"id": "keep-me", "messages": CONVERSATION},
            {"id": "chat-7", "source": "forum", "messages": [{"role": "wizard", "content": "x"},
                                                             {"role": "assistant", "content": "y"}]}]
    _jsonl(tmp_path / "chat" / "a.jsonl", chat)
    out = tmp_path / "out_chat"
    params = run_job(_chat("Chat", tmp_path / "chat", out))
    assert params["input"]["bad_by_reason"] == {"unknown_role": 1}
    (letter,) = _dead_letters(out)
    assert json.loads(letter["raw"]) == chat[1] and letter["line"] == 2

    dpo = [{"id": "pair-1", "prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"},
           {"id": "pair-2", "prompt": [{"role": "wizard", "content": "q"}], "chosen": "a", "rejected": "b"}]
    _jsonl(tmp_path / "dpo" / "a.jsonl", dpo)
    out = tmp_path / "out_dpo"
    params = run_job(_chat("DPO", tmp_path / "dpo", out, "--prompt_key", "prompt"))
    assert params["input"]["bad"] == 1
    (letter,) = _dead_letters(out)
    assert json.loads(letter["raw"]) == dpo[1] and letter["line"] == 2
