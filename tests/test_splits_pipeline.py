"""Splits, sequence-length splits and subsets through the whole job.

One job, several datasets: each output verifies as a dataset of its own, a
document is in the output its content draws (so planted duplicates never
straddle two splits), the bytes do not depend on how the work is split or on
the worker count, and every record read is accounted for once, in the job's
summary.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import (MULTI_PROCESSING, REFERENCE, ROOT, RUNNER, SHARED, env_to_kill, popen_logged, read_rows,
                           require_shared, run_job, stderr_text)
from transforms.core.splits import fraction_bound, make_split_plan, parse_context_splits, parse_data_splits

NEOX = REFERENCE / "tokenizer" / "tokenizer.json"
HF = REFERENCE / "tokenizer" / "hf"
SPLITS = "train=0.8,validation=0.1,test=0.1"
CONTEXT = "64=1,128=1"
PLANTED = 12  # documents copied into three other files each


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """en_small_pd in 6 files, with PLANTED of its documents also copied into three other files each."""
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    require_shared(NEOX)
    root = tmp_path_factory.mktemp("split_corpus")
    lines = src.read_text().splitlines(keepends=True)
    parts = [lines[i::6] for i in range(6)]
    for k in range(PLANTED):
        line = lines[k * 5]  # in file (k * 5) % 6: copied into the three files after it
        for j in range(1, 4):
            other = parts[(k * 5 + j) % 6]
            other.insert(k * 3 % (len(other) + 1), line)
    for i, part in enumerate(parts):
        (root / f"part_{i}.jsonl").write_text("".join(part))
    return root


def _lm(input_dir, out, *extra, mode: str = "LMData") -> list[str]:
    return [mode, "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type", "NeoXTokenizer",
            "--encoder_file", str(NEOX), "--data_splits", SPLITS, "--context_splits", CONTEXT, *extra]


def _digests(out) -> dict:
    """Every file of a split job's output by path, with data_params.json's counts (its run times vary)."""
    out = str(out)
    found = {os.path.relpath(p, out): hashlib.sha256(open(p, "rb").read()).hexdigest()
             for p in glob.glob(os.path.join(out, "**", "*.h5"), recursive=True)}
    for p in glob.glob(os.path.join(out, "**", "data_params.json"), recursive=True):
        params = json.load(open(p))
        found[os.path.relpath(p, out)] = {k: params.get(k) for k in ("outputs", "post-process", "files", "input")}
    return found


def _stream(out_dir) -> bytes:
    """An unshuffled LMData dataset's token stream (each row's inputs, then the last row's final label)."""
    rows = read_rows(out_dir)
    if not len(rows):
        return b""
    real = [r[0][r[1] == 1] for r in rows]
    return np.concatenate(real + [rows[-1][2][rows[-1][1] == 1][-1:]]).astype("<i4").tobytes()


@pytest.fixture(scope="module")
def job(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("split_job") / "out"
    return out, run_job(_lm(corpus, out, "--files_per_record", "200"))


def test_every_output_is_a_dataset_that_verifies(job):
    from pipelines.tools import verify_dataset

    out, summary = job
    paths = [o["path"] for o in summary["outputs"]]
    assert paths == ["train/msl_64", "train/msl_128", "validation/msl_64", "validation/msl_128", "test/msl_64",
                     "test/msl_128"]
    assert sorted(p.name for p in out.iterdir()) == ["data_params.json", "test", "train", "validation"]
    for entry in summary["outputs"]:
        params = json.load(open(out / entry["path"] / "data_params.json"))
        assert params["processing"]["max_seq_length"] == entry["max_seq_length"]
        assert params["setup"]["output_dir"] == str(out / entry["path"])
        assert params["split"]["split"] == entry["split"] and params["features"] == summary["features"]
        assert params["post-process"]["n_examples"] == entry["sequences"] > 0
        assert read_rows(out / entry["path"]).shape[1:] == (3, entry["max_seq_length"])
        result = verify_dataset(str(out / entry["path"]))
        assert result.ok and not result.notes, result.lines()
    whole = verify_dataset(str(out))
    assert whole.ok, whole.lines()
    assert whole.rows == sum(o["sequences"] for o in summary["outputs"])


def test_each_document_is_where_its_content_draws_it(corpus, job):
    _, summary = job
    plan = make_split_plan(data_splits=parse_data_splits(SPLITS), context_splits=parse_context_splits(CONTEXT),
                           max_seq_length=2048)
    texts = [json.loads(line)["text"] for p in sorted(corpus.glob("*.jsonl")) for line in p.read_text().splitlines()]
    drawn = Counter(plan.route(0, (t,)) for t in texts)
    assert [o["documents"] for o in summary["outputs"]] == [drawn[k] for k in range(len(plan.outputs))]
    n = summary["input"]["good"]
    assert n == len(texts) and summary["input"]["documents_read"] == n
    for o in summary["outputs"]:
        # A false alarm at most once in a million runs per output.
        assert abs(o["fraction_obtained"] - o["fraction_asked"]) <= fraction_bound(n, o["fraction_asked"], 1e-6)


def test_planted_duplicates_never_straddle_two_outputs(corpus, job):
    from transforms.core.tokenizer import shared_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    out, summary = job
    tok = shared_tokenizer(read_tokenizer_files("NeoXTokenizer", encoder_file=str(NEOX)))
    lines = Counter(line for p in corpus.glob("*.jsonl") for line in p.read_text().splitlines())
    planted = [json.loads(line)["text"] for line, n in lines.items() if n == 4]
    assert len(planted) == PLANTED
    streams = {o["path"]: _stream(out / o["path"]) for o in summary["outputs"]}
    for text in planted:
        ids = np.asarray([*tok.encode(text), tok.eos_id], dtype="<i4").tobytes()
        found = {path: s.count(ids) for path, s in streams.items() if s.count(ids)}
        assert list(found.values()) == [4], (text[:40], found)  # all four copies, in one output


@pytest.fixture(scope="module")
def split_work(corpus, tmp_path_factory):
    """One .jsonl of ~1.2 MB read as several packing groups, shuffled: the reference run of the tests below."""
    root = tmp_path_factory.mktemp("split_work")
    (root / "in").mkdir()
    (root / "in" / "all.jsonl").write_bytes(b"".join(p.read_bytes() for p in sorted(corpus.glob("*.jsonl"))))
    out = root / "ref"
    _work_run(root / "in", out, RUNNER, unit_groups=1, fan_out_bytes=0)
    return root / "in", _digests(out)


def _work_run(inputs, out, runner, **plan_changes):
    from pipelines.config import load_config
    from pipelines.job import run

    config, beam_args = load_config(_lm(inputs, out, "--packing_group_mb", "1", "--files_per_record", "150",
                                        "--shuffle", "True", "--short_seq_prob", "0.1") + runner)
    return run(config, beam_args, plan_changes)


def test_outputs_do_not_depend_on_how_the_work_is_split(split_work, tmp_path):
    inputs, digests = split_work
    assert sum(name.endswith(".h5") for name in digests) >= 8
    _work_run(inputs, tmp_path / "out", RUNNER, unit_groups=2, fan_out_bytes=None)
    assert _digests(tmp_path / "out") == digests


@pytest.mark.worker_processes
def test_outputs_of_two_worker_processes_are_the_same(split_work, tmp_path):
    inputs, digests = split_work
    _work_run(inputs, tmp_path / "out", MULTI_PROCESSING + ["--direct_num_workers", "2"], unit_groups=1000,
              fan_out_bytes=10 << 20)
    assert _digests(tmp_path / "out") == digests


def test_each_output_is_shuffled_on_its_own(corpus, job, tmp_path):
    out, summary = job
    shuffled = run_job(_lm(corpus, tmp_path / "s", "--files_per_record", "200", "--shuffle", "True"))
    for o in summary["outputs"]:
        plain, moved = read_rows(out / o["path"]), read_rows(tmp_path / "s" / o["path"])
        assert Counter(r.tobytes() for r in plain) == Counter(r.tobytes() for r in moved)
        if len(plain) > 20:
            assert not np.array_equal(plain, moved)
    assert [o["sequences"] for o in shuffled["outputs"]] == [o["sequences"] for o in summary["outputs"]]


# ---------------------------------------------------------------- every mode


def _pairs(root: Path) -> Path:
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    (root / "pairs").mkdir()
    with open(root / "pairs" / "p.jsonl", "w") as f:
        for line in src.read_text().splitlines()[:120]:
            text = json.loads(line)["text"]
            f.write(json.dumps({"prompt": text[:200], "completion": text[200:320],
                                "chosen": text[200:260], "rejected": text[260:320]}) + "\n")
    return root / "pairs"


def _conversations(root: Path) -> Path:
    (root / "chat").mkdir()
    with open(root / "chat" / "c.jsonl", "w") as f:
        for i in range(120):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"question {i} " * (1 + i % 5)},
                                             {"role": "assistant", "content": f"answer {i} " * (1 + i % 7)}]}) + "\n")
    return root / "chat"


MODES = {
    "Summarization": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--completion_key",
                                "completion"],
    "Summarization_VSL": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--completion_key",
                                    "completion"],
    "LMData_VSL": lambda r: ["--input_dir", str(require_shared(REFERENCE / "inputs" / "fim"))],
    "FIM": lambda r: ["--input_dir", str(require_shared(REFERENCE / "inputs" / "fim")), "--fim_prefix_tok",
                      "<fim_prefix>", "--fim_middle_tok", "<fim_middle>", "--fim_suffix_tok", "<fim_suffix>"],
    "Chat": lambda r: ["--input_dir", str(_conversations(r)), "--chat_template", "chatml"],
    "Chat_VSL": lambda r: ["--input_dir", str(_conversations(r)), "--chat_template", "chatml"],
    "DPO": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--chat_template", "chatml"],
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_mode_splits_into_datasets_that_verify(mode, tmp_path):
    from pipelines.tools import verify_dataset

    out = tmp_path / "out"
    summary = run_job([mode, *MODES[mode](tmp_path), "--output_dir", str(out), "--tokenizer_type",
                       "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(HF)),
                       "--data_splits", "train=0.7,validation=0.3", "--context_splits", "0.125K=1,256=1"])
    assert [o["path"] for o in summary["outputs"]] == ["train/msl_128", "train/msl_256", "validation/msl_128",
                                                       "validation/msl_256"]
    assert sum(o["documents"] for o in summary["outputs"]) == summary["input"]["good"] > 0
    assert sum(o["sequences"] for o in summary["outputs"]) > 0
    result = verify_dataset(str(out))
    assert result.ok, result.lines()
    for o in summary["outputs"]:
        params = json.load(open(out / o["path"] / "data_params.json"))
        assert params["setup"]["mode"] == mode and len(params["features"]) == read_rows(out / o["path"]).shape[1] \
            if o["sequences"] else True


# ---------------------------------------------------------------- subsets


@pytest.fixture(scope="module")
def subsets(tmp_path_factory) -> Path:
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines(keepends=True)
    code = require_shared(SHARED / "corpora" / "code_small.jsonl").read_text().splitlines(keepends=True)
    root = tmp_path_factory.mktemp("subsets")
    for name, lines in (("prose", src[:60]), ("code", code[:40]), ("more", src[60:90])):
        (root / name / "deep").mkdir(parents=True)
        (root / name / "a.jsonl").write_text("".join(lines[::2]))
        (root / name / "deep" / "b.jsonl").write_text("".join(lines[1::2]))
    return root


def test_top_level_directories_as_subsets_each_split(subsets, tmp_path):
    from pipelines.tools import verify_dataset

    out = tmp_path / "out"
    summary = run_job(["LMData", "--input_dir", str(subsets), "--output_dir", str(out), "--tokenizer_type",
                       "NeoXTokenizer", "--encoder_file", str(NEOX), "--max_seq_length", "64",
                       "--top_level_as_subsets", "True", "--data_splits", "train=0.9,test=0.1"])
    assert [o["path"] for o in summary["outputs"]] == ["code/train", "code/test", "more/train", "more/test",
                                                       "prose/train", "prose/test"]
    documents = Counter()
    for o in summary["outputs"]:
        documents[o["subset"]] += o["documents"]
    assert documents == {"code": 40, "more": 30, "prose": 60}
    # A subset's fractions are of its own documents.
    for subset in ("code", "more", "prose"):
        assert sum(o["fraction_obtained"] for o in summary["outputs"] if o["subset"] == subset) == pytest.approx(1)
    assert verify_dataset(str(out)).ok


def test_listed_subsets_are_the_only_ones_read(subsets, tmp_path):
    out = tmp_path / "out"
    summary = run_job(["LMData", "--input_dir", str(subsets), "--output_dir", str(out), "--tokenizer_type",
                       "NeoXTokenizer", "--encoder_file", str(NEOX), "--max_seq_length", "64",
                       "--params", str(_yaml(tmp_path, "setup:\n  data:\n    subsets: [prose, more]\n"))])
    assert [(o["path"], o["documents"]) for o in summary["outputs"]] == [("more", 30), ("prose", 60)]
    assert summary["input"]["files"] == 4


def _yaml(tmp_path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- bad input, bad settings, resume


def test_bad_records_are_the_jobs_dead_letters(tmp_path):
    require_shared(NEOX)
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"text": f"document number {i} " * 5}) for i in range(40)]
    lines[7:7] = ['{"text": broken', '{"other": 1}']
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    summary = run_job(_lm(tmp_path / "in", out, "--min_sequence_len", "2"))
    assert summary["input"]["documents_read"] == 42 and summary["input"]["bad"] == 2
    assert sum(o["documents"] for o in summary["outputs"]) == 40
    letters = [json.loads(x) for p in (out / "dead_letter").iterdir() for x in p.read_text().splitlines()]
    assert sorted(r["line"] for r in letters) == [8, 9]
    for o in summary["outputs"]:
        inp = json.load(open(out / o["path"] / "data_params.json"))["input"]
        assert inp["bad"] == 0 and inp["documents_read"] == o["documents"]
        assert not (out / o["path"] / "dead_letter").exists()


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args, *RUNNER], cwd=ROOT,
                          capture_output=True, text=True)


@pytest.mark.parametrize("flags, message", [
    (["--data_splits", "train=0.9,test=0.2"], "error: data_splits (from command line): the fractions add up to "
                                               "1.1, not 1\n"),
    (["--data_splits", "train=0.5,train=0.5"], "split 'train' is given twice"),
    (["--context_splits", "1K=1", "--max_seq_length", "512"], "max_seq_length and context_splits are both set"),
    (["--context_splits", "2K=1,512=1"], "context_splits: max sequence length 2048 exceeds the tokenizer's "
                                         "model_max_length 1024"),
    (["--context_splits", "1K=1,4=1", "--min_sequence_len", "10"], "exceeds context_splits + 1 = 5"),
    (["--subsets", "nowhere"], "subsets: no input files under"),
    (["--top_level_as_subsets", "True"], "lie directly in input_dir, in no subset directory"),
])
def test_bad_settings_stop_the_job_before_it_starts_naming_the_setting(tmp_path, flags, message):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "x"}\n')
    gpt2 = require_shared(SHARED / "tokenizers" / "gpt2")
    proc = _cli(["LMData", "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
                 "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(gpt2), *flags])
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_overwrite_replaces_the_outputs_of_the_earlier_split(corpus, tmp_path):
    out = tmp_path / "out"
    run_job(_lm(corpus, out))
    assert (out / "validation" / "msl_64" / "data_params.json").exists()
    again = run_job(["LMData", "--input_dir", str(corpus), "--output_dir", str(out), "--tokenizer_type",
                     "NeoXTokenizer", "--encoder_file", str(NEOX), "--data_splits", "train=0.9,dev=0.1",
                     "--overwrite_output", "True", "--max_seq_length", "64"])
    assert [o["path"] for o in again["outputs"]] == ["train", "dev"]
    assert not glob.glob(str(out / "validation" / "**" / "*"), recursive=True)
    assert not glob.glob(str(out / "train" / "msl_*" / "*"))
    assert not (out / ".tmp").exists()


def test_kill_and_resume_gives_the_uninterrupted_bytes(corpus, tmp_path):
    import signal
    import time

    args = ["--files_per_record", "100", "--shuffle", "True", "--packing_group_mb", "1"]
    run_job(_lm(corpus, tmp_path / "ref", *args))
    out = tmp_path / "out"
    proc = popen_logged([sys.executable, "-m", "pipelines.create_hdf5_dataset", *_lm(corpus, out, *args), *RUNNER],
                        cwd=ROOT, start_new_session=True, env=env_to_kill(tmp_path))
    deadline = time.time() + 120
    # Two groups stored: each is its six outputs' shares and the job's rest (7 markers).
    while len(glob.glob(str(out / ".tmp" / "groups" / "*.json"))) < 14:
        assert proc.poll() is None, "the job ended before the kill point: " + stderr_text(proc)
        assert time.time() < deadline
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "data_params.json").exists()
    resumed = run_job(_lm(corpus, out, *args, "--resume_from_checkpoint", "True"))
    assert _digests(out) == _digests(tmp_path / "ref")
    assert resumed["run"]["groups_resumed"] >= 1
    assert not (out / ".tmp").exists()


def test_twins_after_normalization_land_in_the_same_split_through_the_job(tmp_path):
    """NFC/NFD and mojibake twins, in different files: with ftfy on they are one text, so both copies of each are in
    the same split, whatever file or group they came from (each document in a row of its own, so a row says
    which document it is)."""
    from tests.test_splits_rules import MOJIBAKE, TWINS

    pairs = TWINS + MOJIBAKE
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k, side in enumerate(zip(*pairs)):
        (inputs / f"side_{k}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in side))
    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    out = tmp_path / "out"
    run_job(["LMData", "--input_dir", str(inputs), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
             "--vocab_file", str(gpt2 / "vocab.bpe"), "--encoder_file", str(gpt2 / "encoder.json"),
             "--max_seq_length", "64", "--use_ftfy", "True", "--pack_sequences", "False", "--min_sequence_len", "2",
             "--data_splits", "train=0.5,test=0.5"])
    where: dict = {}
    for split in ("train", "test"):
        for row in read_rows(out / split):
            where.setdefault(tuple(row[0][row[1] == 1].tolist()), Counter())[split] += 1
    assert len(where) == len(pairs)
    assert all(list(c.values()) == [2] for c in where.values()), where
    assert {s for c in where.values() for s in c} == {"train", "test"}  # both splits are used
