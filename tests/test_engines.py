"""The job on real Beam engines, byte-identical to FnApiRunner: Prism, a standalone Flink cluster, Spark.

Every other test runs on Beam's in-process FnApiRunner. Here each case runs
once there (the reference) and then on an engine whose SDK workers are
separate Python processes, each with a HOME, TMPDIR, cache and working
directory of its own (scripts/engines.py's `worker`), started through Beam's
worker pool (`--environment_type EXTERNAL`) as Dataflow and Flink start them:

- Prism, the Go runner that `--runner DirectRunner` runs for a user online;
- Flink 1.19: JobManager and TaskManager in separate JVMs (2 slots,
  parallelism 2), jobs submitted by Beam's Flink job server;
- Spark 3 in local[2] through Beam's Spark job server (the matrix only).

The output must be the same bytes: every .h5 and dead-letter file, and every
data_params.json apart from the run's own section (times, the options given)
and the output directory's name. `verify` must pass on it, and every record
read must be accounted for (the job refuses to finish otherwise).

`make test` runs the smoke cases (a shuffled LMData job with bad lines, a
split job, a Chat job) on Prism and on Flink; `make test-runners` runs the
whole matrix (every mode, a large file fanned out to other workers, Spark).
The engines are set up from the package registries on first use and kept
under .runners/. Without Go or Java the tests skip, saying why;
REQUIRE_RUNNERS=1 (CI) turns such a skip into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scripts import engines
from tests.helpers import ROOT, RUNNER, SHARED, require_shared

pytestmark = [pytest.mark.worker_processes, pytest.mark.engines]

GPT2 = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(ROOT / "data/tokenizers/gpt2/vocab.bpe"),
        "--encoder_file", str(ROOT / "data/tokenizers/gpt2/encoder.json")]
QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
REQUIRED = os.environ.get("REQUIRE_RUNNERS") == "1"


def _engine(make):
    """An engine, or a skip saying why it cannot be had here (a failure under REQUIRE_RUNNERS=1)."""
    try:
        return make()
    except engines.Missing as e:
        (pytest.fail if REQUIRED else pytest.skip)(f"engine not available: {e}")


# ---------------------------------------------------------------- the engines (one each per session)


@pytest.fixture(scope="session")
def prism(tmp_path_factory):
    binary = _engine(engines.setup_prism)
    pool = engines.WorkerPool(tmp_path_factory.mktemp("prism_pool")).start()
    # Beam keeps one Prism job server per process, made with the options of the first Prism job it ran: an
    # earlier in-process DirectRunner job (Prism first, then the fallback, offline) leaves one without this
    # binary, and the jobs here would reuse it. Each job gets a server of its own options.
    yield pool, ["--runner", "PrismRunner", "--prism_location", str(binary),
                 "--environment_type", "EXTERNAL", "--environment_config", pool.address,
                 "--experiments=disable_prism_server_singleton"]
    pool.stop()


@pytest.fixture(scope="session")
def flink(tmp_path_factory):
    cluster = _engine(lambda: engines.FlinkCluster(tmp_path_factory.mktemp("flink"), slots=2))
    cluster.start()
    yield cluster, cluster.flags(parallelism=2)
    cluster.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    server = _engine(lambda: engines.SparkJobServer(tmp_path_factory.mktemp("spark"), cores=2))
    server.start()
    yield server, server.flags()
    server.stop()


# ---------------------------------------------------------------- the inputs


def _bad_lines() -> str:
    return "{not json\n" + json.dumps({"other": "no text key"}) + "\n"


@pytest.fixture(scope="session")
def text_inputs(tmp_path_factory) -> Path:
    """en_small_pd in three files, one with two bad lines in the middle (dead letters)."""
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines(keepends=True)
    root = tmp_path_factory.mktemp("text")
    for k in range(3):
        part = lines[k::3][:60]
        if k == 1:
            part.insert(7, _bad_lines())
        (root / f"part_{k}.jsonl").write_text("".join(part))
    return root


@pytest.fixture(scope="session")
def chat_inputs(tmp_path_factory) -> Path:
    rng = np.random.default_rng(5)
    words = ["alpha", "βeta", "γάμμα", "日本語", "naïve", "emoji 🙂", "line\nbreak", "x"]
    root = tmp_path_factory.mktemp("chat")
    lines = []
    for i in range(40):
        messages = [{"role": "system", "content": "Be brief."}] if i % 4 == 0 else []
        for t in range(int(rng.integers(1, 4))):
            for role in ("user", "assistant"):
                messages.append({"role": role, "content": f"{role} {i}.{t}: " + " ".join(rng.choice(words, 6))})
        lines.append(json.dumps({"id": i, "messages": messages}, ensure_ascii=False) + "\n")
    lines.insert(11, json.dumps({"id": "bad", "messages": [{"role": "wizard", "content": "?"}]}) + "\n")
    lines.insert(20, "{broken\n")
    (root / "chat.jsonl").write_text("".join(lines))
    return root


SMOKE = {
    "lm_shuffle": lambda inp: ["LMData", "--input_dir", str(inp["text"]), *GPT2, "--max_seq_length", "256",
                               "--shuffle", "True", "--files_per_record", "50"],
    "split": lambda inp: ["LMData", "--input_dir", str(inp["text"]), *GPT2, "--max_seq_length", "128",
                          "--data_splits", "train=0.8,validation=0.1,test=0.1", "--shuffle", "True"],
    "chat": lambda inp: ["Chat", "--input_dir", str(inp["chat"]), "--tokenizer_type", "HuggingFaceTokenizer",
                         "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "128"],
}


@pytest.fixture(scope="session")
def inputs(text_inputs, chat_inputs, prompt_inputs, dpo_inputs, code_inputs, dup_inputs, eval_inputs) -> dict:
    return {"text": text_inputs, "chat": chat_inputs, "prompts": prompt_inputs, "dpo": dpo_inputs,
            "code": code_inputs, "dups": dup_inputs, "eval": eval_inputs}


@pytest.fixture(scope="session")
def reference(inputs, tmp_path_factory):
    """Each case's output on FnApiRunner, made once: case -> output directory."""
    made = {}

    def get(case: str) -> Path:
        if case not in made:
            out = tmp_path_factory.mktemp(f"ref_{case}") / "out"
            run_on(RUNNER, case, inputs, out)
            made[case] = out
        return made[case]

    return get


# ---------------------------------------------------------------- what "the same output" means


def _files(out: Path) -> dict:
    """Every file of a dataset (split outputs included), by path relative to it; scratch space must be gone."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            rel = path.relative_to(out).as_posix()
            assert not rel.startswith(".tmp/") and "/.tmp/" not in rel, f"scratch space left: {rel}"
            found[rel] = path
    return found


def _params(path: Path, out, resumed: bool = False) -> dict:
    """data_params.json without what only describes the run: its own section and the output directory's name
    (and, for a resumed run, the setting that said to resume)."""
    params = json.loads(path.read_text().replace(str(out), "OUT"))
    params.pop("run")
    if resumed:
        assert params["processing"].pop("resume_from_checkpoint") in (True, False)
    return params


def assert_same_output(ref: Path, got: Path, resumed: bool = False, got_spelled: str = None) -> None:
    """got_spelled: how got's data_params.json names its directory (a bucket's URL, downloaded to `got`)."""
    ref_files, got_files = _files(ref), _files(got)
    assert sorted(got_files) == sorted(ref_files)
    assert any(name.endswith(".h5") for name in ref_files)
    for name, path in ref_files.items():
        if name.endswith("data_params.json"):
            assert _params(got_files[name], got_spelled or got, resumed) == _params(path, ref, resumed), name
        else:
            assert got_files[name].read_bytes() == path.read_bytes(), f"{name} differs"


def _verify(out: Path) -> None:
    from pipelines.create_hdf5_dataset import main

    assert main(["verify", str(out)]) == 0


def run_on(engine_flags: list, case: str, inputs: dict, out: Path) -> dict:
    from pipelines.config import load_config
    from pipelines.job import run

    config, beam_args = load_config(CASES[case](inputs) + ["--output_dir", str(out)] + engine_flags)
    return run(config, beam_args, PLAN.get(case))


def _check(case, engine, inputs, reference, tmp_path):
    pool, flags = engine[0].pool if hasattr(engine[0], "pool") else engine[0], engine[1]
    started = pool.workers_started()
    out = tmp_path / "out"
    params = run_on(flags, case, inputs, out)
    assert pool.workers_started() > started, "no SDK worker process was started: the job did not run there"
    assert_same_output(reference(case), out)
    _verify(out)
    if case == "lm_shuffle":
        assert params["input"]["bad"] == 2 and params["input"]["documents_read"] == 182
    return params


# ---------------------------------------------------------------- the matrix's inputs and cases


@pytest.fixture(scope="session")
def prompt_inputs(tmp_path_factory) -> Path:
    """Prompt/completion records cut from en_small_pd's texts, and one without a completion (a dead letter)."""
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines()[:80]
    root = tmp_path_factory.mktemp("prompts")
    records = []
    for i, line in enumerate(lines):
        words = json.loads(line)["text"].split()[:40 + i % 30]
        cut = len(words) // 3
        records.append({"prompt": " ".join(words[:cut]), "completion": " " + " ".join(words[cut:])})
    records.insert(9, {"prompt": "no completion here"})
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


@pytest.fixture(scope="session")
def dpo_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dpo")
    records = [{"prompt": f"Question {i}: what is {i} + {i}?", "chosen": f"It is {2 * i}.",
                "rejected": f"It is {2 * i + 1}, I believe, or so."} for i in range(30)]
    records.insert(4, {"prompt": "no answers"})
    (root / "dpo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


@pytest.fixture(scope="session")
def code_inputs(tmp_path_factory) -> Path:
    """code_small as one .jsonl.zst (read in order by one worker) with a bad line."""
    from tests.helpers import zst

    lines = require_shared(SHARED / "corpora" / "code_small.jsonl").read_bytes().splitlines(keepends=True)
    root = tmp_path_factory.mktemp("code")
    (root / "code.jsonl.zst").write_bytes(zst(b"".join(lines[:20] + [b"{bad json\n"] + lines[20:])))
    return root


@pytest.fixture(scope="session")
def dup_inputs(tmp_path_factory) -> Path:
    """Two files of documents, the second holding exact copies and near copies (a word changed) of some of the
    first's, in another order."""
    texts = [json.loads(x)["text"] for x in
             require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().split("\n")[:60] if x]
    root = tmp_path_factory.mktemp("dups")
    second = []
    for i, text in enumerate(texts[:30]):
        if i % 2:  # the word after the middle, replaced in place
            j = text.index(" ", len(text) // 2) + 1
            text = text[:j] + f"changed{i}" + text[text.index(" ", j):]
        second.append(text)
    (root / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (root / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in reversed(second)))
    return root


@pytest.fixture(scope="session")
def eval_inputs(dup_inputs, tmp_path_factory) -> Path:
    """An evaluation set of three spans of dup_inputs' texts: one in a record of a.jsonl only, one in a record
    and its exact copy (two records: boilerplate at decontaminate_max_docs 1), one in a record and its near
    copy."""
    texts = [json.loads(x)["text"] for x in (dup_inputs / "a.jsonl").read_text().splitlines()]
    root = tmp_path_factory.mktemp("eval")
    items = [" ".join(texts[k].split()[5:25]) for k in (40, 2, 3)]
    (root / "eval.jsonl").write_text("".join(json.dumps({"question": q, "n": k}) + "\n" for k, q in enumerate(items)))
    return root / "eval.jsonl"


OLMO = SHARED / "tokenizers" / "olmo-dolma2" / "tokenizer.json"
MATRIX = {
    "lm_in_order": lambda inp: ["LMData", "--input_dir", str(inp["text"]), *GPT2, "--max_seq_length", "256"],
    "lm_vsl": lambda inp: ["LMData_VSL", "--input_dir", str(inp["text"]), *GPT2, "--max_seq_length", "256",
                           "--shuffle", "True"],
    "summarization": lambda inp: ["Summarization", "--input_dir", str(inp["prompts"]), *GPT2,
                                  "--max_seq_length", "128", "--prompt_key", "prompt", "--completion_key",
                                  "completion"],
    "summarization_vsl": lambda inp: ["Summarization_VSL", "--input_dir", str(inp["prompts"]), *GPT2,
                                      "--max_seq_length", "256", "--prompt_key", "prompt", "--completion_key",
                                      "completion", "--shuffle", "True"],
    "fim": lambda inp: ["FIM", "--input_dir", str(inp["code"]), "--tokenizer_type", "NeoXTokenizer",
                        "--encoder_file", str(require_shared(OLMO)), "--max_seq_length", "256", "--fim_rate", "0.9",
                        "--spm_rate", "0.5", "--fim_prefix_tok", "<|fim_prefix|>", "--fim_middle_tok",
                        "<|fim_middle|>", "--fim_suffix_tok", "<|fim_suffix|>"],
    "chat_vsl": lambda inp: ["Chat_VSL", "--input_dir", str(inp["chat"]), "--tokenizer_type", "HuggingFaceTokenizer",
                             "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "256"],
    "dpo": lambda inp: ["DPO", "--input_dir", str(inp["dpo"]), "--tokenizer_type", "HuggingFaceTokenizer",
                        "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "96",
                        "--prompt_key", "prompt"],
    # Near duplicates across files and outputs (the dedup stage's every grouping and join).
    "dedup_split": lambda inp: ["LMData", "--input_dir", str(inp["dups"]), *GPT2, "--max_seq_length", "256",
                                "--dedup", "near", "--data_splits", "train=0.7,test=0.3", "--shuffle", "True"],
    # Language identification and the quality filters (their listings, C4's cuts), evaluation text found across files and
    # outputs, one n-gram boilerplate (the decontamination's index, its groupings and its join, the records cut),
    # before near dedup.
    "decontam_split": lambda inp: ["LMData", "--input_dir", str(inp["dups"]), *GPT2, "--max_seq_length", "256",
                                   "--language_id", "True", "--quality_filters",
                                   "gopher_quality,gopher_repetition,c4_quality,fineweb_quality",
                                   "--quality_filter_params",
                                   # (the records that hold an evaluation item are kept for decontamination; C4
                                   # cuts lines of some)
                                   '{"gopher_quality": {"max_non_alpha_words_ratio": 0.5}, "c4_quality": '
                                   '{"filter_no_terminal_punct": false, "filter_curly_bracket": false, '
                                   '"min_num_sentences": 2}, "fineweb_quality": {"line_punct_thr": 0.05}}',
                                   "--decontaminate", str(inp["eval"]), "--decontaminate_max_docs", "1",
                                   "--decontaminate_action", "cut",
                                   "--dedup", "near", "--data_splits", "train=0.7,test=0.3", "--shuffle", "True"],
    # A file read in order, cut into groups of ~40 KB that are all handed to other workers (a file past
    # FAN_OUT_BYTES on a distributed runner; the sizes are made small here through the plan).
    "fan_out": lambda inp: ["LMData", "--input_dir", str(inp["code"]), *GPT2, "--max_seq_length", "256",
                            "--shuffle", "True"],
}
# Plan fields no flag sets, for a case (the same on FnApiRunner and on the engine).
PLAN = {"fan_out": {"group_bytes": 40_000, "fan_out_bytes": 0}}

# ---------------------------------------------------------------- the smoke cases (make test)

CASES = {**SMOKE, **MATRIX}


@pytest.mark.parametrize("case", sorted(SMOKE))
def test_prism_gives_fnapirunners_bytes(case, prism, inputs, reference, tmp_path):
    _check(case, prism, inputs, reference, tmp_path)


@pytest.mark.parametrize("case", sorted(SMOKE))
def test_a_flink_cluster_gives_fnapirunners_bytes(case, flink, inputs, reference, tmp_path):
    _check(case, flink, inputs, reference, tmp_path)


@pytest.fixture(scope="session")
def many_groups(tmp_path_factory) -> Path:
    """en_small_pd in 12 files: 12 groups, encoded one after another."""
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines(keepends=True)
    root = tmp_path_factory.mktemp("many_groups")
    for k in range(12):
        (root / f"part_{k:02d}.jsonl").write_text("".join(lines[k::12]))
    return root


@pytest.mark.parametrize("engine", ["prism", "flink"])
def test_the_progress_of_a_job_running_elsewhere_follows_its_counters(engine, request, many_groups, tmp_path,
                                                                      monkeypatch):
    """The workers are other processes: the launcher asks the running job for its counter of input bytes encoded
    (Prism: its job service; Flink: the cluster's REST API, since Beam's job server answers only at the end).
    The bar moves forwards only, shows some of the work while the job runs (the encoder has counted every byte
    before the files are written, so the last poll before the end finds at least that), and reaches the
    total, the input's size, exactly once: at the end."""
    from pipelines.config import load_config
    from pipelines.job import launch
    from pipelines import job_progress

    monkeypatch.setattr(job_progress, "POLL_SECONDS", 0.2)
    _, flags = request.getfixturevalue(engine)
    argv = ["LMData", "--input_dir", str(many_groups), *GPT2, "--max_seq_length", "256",
            "--output_dir", str(tmp_path / "out")]
    launched = launch(*load_config(argv + flags))
    follower = launched.progress
    assert follower is not None
    launched.result.wait_until_finish()
    follower.finish(succeeded=True)
    total = sum(p.stat().st_size for p in many_groups.iterdir())
    seen = follower.positions
    assert seen == sorted(seen), seen
    assert seen[-1] == total and seen.count(total) == 1, seen
    assert any(0 < p < total for p in seen), f"nothing seen while the job ran: {seen}"
    assert follower.queries_failed <= 2, "the running job did not answer"


def test_direct_runner_runs_on_prism_when_beam_has_it_cached(inputs, reference, tmp_path):
    """`--runner DirectRunner` for a user online: Beam 2.77's SwitchingDirectRunner starts Prism from its cache
    (~/.apache_beam/cache/prism/bin, where its first run downloads it) and falls back to its own runner only when
    Prism fails. The job must really run on Prism: Prism names its job, and no fallback is logged."""
    home = tmp_path / "home"
    _engine(lambda: engines.prism_cache(home))
    out = tmp_path / "out"
    argv = CASES["lm_shuffle"](inputs) + ["--output_dir", str(out), "--runner", "DirectRunner"]
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The service Beam started is the binary from its cache (it logs the command it starts).
    assert "Really starting service at localhost:" in proc.stderr
    assert f"('{home}/.apache_beam/cache/prism/bin/apache_beam-v" in proc.stderr, proc.stderr[-3000:]
    assert "pipeline done! (job=" in proc.stderr, proc.stderr[-3000:]
    assert "Falling back" not in proc.stderr and "falling back" not in proc.stderr
    assert_same_output(reference("lm_shuffle"), out)


# ---------------------------------------------------------------- the matrix (make test-runners)


@pytest.mark.engine_matrix
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine", ["prism", "flink", "spark"])
def test_every_mode_on_every_engine_gives_fnapirunners_bytes(engine, case, request, inputs, reference, tmp_path):
    if engine != "spark" and case in SMOKE:
        pytest.skip("a smoke case: make test runs it on this engine")
    params = _check(case, request.getfixturevalue(engine), inputs, reference, tmp_path)
    if case == "fan_out":
        assert params["input"]["bad"] == 1


# ---------------------------------------------------------------- faults on Flink (make test-runners)
#
# The fault lands once the first shard is committed, the job then being in its last stage (a shuffled job
# writes its files after the layout is known): some files are final, others half written or not begun.
# Small files (FAULT_FILES rows each) make that stage long enough to be caught in it.

FAULT_FILES = ["--files_per_record", "2"]


def _launch(case: str, inputs: dict, out: Path, flags: list, extra: list = ()):
    from pipelines.config import load_config
    from pipelines.job import launch

    config, beam_args = load_config(CASES[case](inputs) + ["--output_dir", str(out), *extra] + flags)
    return launch(config, beam_args, PLAN.get(case))


def _first_shard(out: Path, cluster, timeout: float = 300.0) -> str:
    """Wait until a shard is committed; returns the Flink job's id."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(out.glob("*.h5")):
            running = [j["id"] for j in cluster.jobs() if j["status"] == "RUNNING"]
            assert running, "a shard was committed but no job is running"
            return running[0]
        time.sleep(0.02)
    pytest.fail(f"no shard committed within {timeout:.0f} s")


@pytest.fixture(scope="session")
def fault_reference(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref_fault") / "out"
    run_job_flags = CASES["lm_shuffle"](inputs) + ["--output_dir", str(out), *FAULT_FILES]
    from pipelines.config import load_config
    from pipelines.job import run

    run(*load_config(run_job_flags + RUNNER))
    return out


@pytest.mark.engine_matrix
@pytest.mark.parametrize("victim", ["taskmanager", "sdk_worker"])
def test_flink_restarts_what_a_killed_process_was_running_and_the_bytes_are_the_same(
        victim, flink, inputs, fault_reference, tmp_path):
    """A TaskManager (all the job's slots) or the SDK worker processes killed mid-job: Flink fails the tasks they
    ran and runs them again (a new TaskManager is started, as a supervisor would), every committed file is
    rewritten to the same bytes, no row is written twice, and no unfinished file ever takes a final name."""
    import signal

    cluster, flags = flink
    out = tmp_path / "out"
    launched = _launch("lm_shuffle", inputs, out, flags, FAULT_FILES)
    job = _first_shard(out, cluster)
    if victim == "taskmanager":
        cluster.kill("taskmanager")
        cluster.start_taskmanager()
    else:
        # Every live one: a worker of a stage that has finished sits idle in Flink's cache, and killing only
        # that one reaches no task (measured: no failure recorded); the one writing the files is among these.
        pids = cluster.pool.worker_pids()
        assert pids, "no SDK worker process is alive mid-job"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    launched.result.wait_until_finish()
    assert cluster.failures(job) >= 1, "Flink recorded no failure: the fault did not reach the job"
    assert_same_output(fault_reference, out)
    _verify(out)


@pytest.mark.engine_matrix
def test_a_job_whose_whole_cluster_died_resumes_to_the_uninterrupted_bytes(inputs, fault_reference, tmp_path):
    """Every process of the cluster (JobManager, TaskManager, job server, SDK workers) killed mid-job; on a new
    cluster the same command with --resume_from_checkpoint True keeps the files already committed and
    writes the rest: the uninterrupted job's bytes."""
    out = tmp_path / "out"
    first = _engine(lambda: engines.FlinkCluster(tmp_path / "flink_a", slots=2)).start()
    try:
        _launch("lm_shuffle", inputs, out, first.flags(), FAULT_FILES)
        _first_shard(out, first)
        for name in ("taskmanager", "jobmanager", "job_server"):
            first.kill(name)
        for pid in first.pool.worker_pids():
            os.kill(pid, 9)
        first.pool.stop()
    finally:
        first.stop()
    assert not (out / "data_params.json").exists(), "the job finished before its cluster died"
    committed = {p.name: p.read_bytes() for p in out.glob("*.h5")}
    second = engines.FlinkCluster(tmp_path / "flink_b", slots=2).start()
    try:
        _launch("lm_shuffle", inputs, out, second.flags(), FAULT_FILES + ["--resume_from_checkpoint", "True"]
                ).result.wait_until_finish()
    finally:
        second.stop()
    assert committed and all((out / name).read_bytes() == data for name, data in committed.items())
    assert_same_output(fault_reference, out, resumed=True)
    _verify(out)


# ---------------------------------------------------------------- workers that share no disk with the launcher

from tests.test_gcs import emulator, gcs  # noqa: E402,F401 - the storage emulator's fixtures


@pytest.mark.engine_matrix
def test_flink_workers_read_and_write_through_the_bucket_only(flink, gcs, inputs, tmp_path):
    """Input and output in a bucket, as on Dataflow: the workers get everything they read (the input list,
    the staged tokenizer files, the layout) through the output location and the job. The tokenizer files
    given on the command line are deleted as soon as the job is submitted; the workers, each in a HOME and
    TMPDIR of its own, must not need them. The files equal an in-process run's."""
    import shutil

    from pipelines.config import load_config
    from pipelines.job import launch, run

    fs, bucket = gcs
    cluster, flags = flink
    for path in sorted(inputs["text"].iterdir()):
        fs.put(str(path), f"{bucket}/in/{path.name}")
    client = tmp_path / "client_only"
    shutil.copytree(ROOT / "data" / "tokenizers" / "gpt2", client)
    argv = ["LMData", "--input_dir", f"gs://{bucket}/in", "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(client / "vocab.bpe"), "--encoder_file", str(client / "encoder.json"),
            "--max_seq_length", "256", "--shuffle", "True", "--files_per_record", "100"]
    ref = tmp_path / "ref"
    run(*load_config(argv + ["--output_dir", str(ref)] + RUNNER))
    # Started now, the pool's workers see the emulator through the environment (as a worker its credentials).
    pool = engines.WorkerPool(tmp_path / "gs_pool").start()
    try:
        at = flags.index("--environment_config") + 1
        gs_flags = flags[:at] + [pool.address] + flags[at + 1:]
        out = f"gs://{bucket}/out"
        launched = launch(*load_config(argv + ["--output_dir", out] + gs_flags))
        shutil.rmtree(client)
        launched.result.wait_until_finish()
        assert pool.workers_started() >= 1
    finally:
        pool.stop()
    fs.invalidate_cache()
    got = tmp_path / "got"
    fs.get(f"{bucket}/out/", str(got), recursive=True)
    assert_same_output(ref, got, got_spelled=out)


# ---------------------------------------------------------------- a machine without the tools


@pytest.mark.parametrize("setup, tools", [(engines.setup_prism, "go"), (lambda: engines.setup_java("flink"), "java")])
def test_without_the_tools_an_engine_says_which_are_missing(setup, tools, monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "RUNNERS", tmp_path / "runners")  # nothing set up yet
    monkeypatch.setattr(engines.shutil, "which", lambda name: None)
    with pytest.raises(engines.Missing, match=tools):
        setup()


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_engine_skips_unless_required(required, monkeypatch):
    import _pytest.outcomes

    monkeypatch.setattr(sys.modules[__name__], "REQUIRED", required)

    def missing():
        raise engines.Missing("go not found on PATH")

    expected = _pytest.outcomes.Failed if required else _pytest.outcomes.Skipped
    with pytest.raises(expected, match="engine not available: go not found on PATH"):
        _engine(missing)
