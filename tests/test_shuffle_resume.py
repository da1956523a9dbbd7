"""Global shuffle quality, crash-safe commits observed from outside, and kill -9 + resume."""

from __future__ import annotations

import glob
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

import h5py
import numpy as np
import pytest

from tests.helpers import (MULTI_PROCESSING, REFERENCE, ROOT, RUNNER, SHARED, env_to_kill, popen_logged, read_rows,
                           require_shared, run_job, stderr_text)

NEOX = REFERENCE / "tokenizer" / "tokenizer.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """en_small_pd split into 8 files: 8 packing groups."""
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    require_shared(NEOX)
    out = tmp_path_factory.mktemp("corpus")
    lines = src.read_text().splitlines(keepends=True)
    for i in range(8):
        (out / f"part_{i}.jsonl").write_text("".join(lines[i::8]))
    return out


def _args(corpus, out, *extra, mode: str = "LMData") -> list[str]:
    return [mode, "--input_dir", str(corpus), "--output_dir", str(out), "--tokenizer_type", "NeoXTokenizer",
            "--encoder_file", str(NEOX), *extra]


def _digests(out) -> dict:
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(os.path.join(str(out), "*.h5"))}


def test_shuffle_is_a_uniform_permutation_with_exact_file_sizes(corpus, tmp_path):
    short = ["--max_seq_length", "12", "--files_per_record", "7000", "--min_sequence_len", "2"]
    plain = run_job(_args(corpus, tmp_path / "plain", *short))
    a = run_job(_args(corpus, tmp_path / "a", *short, "--shuffle", "True", "--shuffle_seed", "1"))
    b = run_job(_args(corpus, tmp_path / "b", *short, "--shuffle", "True", "--shuffle_seed", "2"))
    n = plain["post-process"]["n_examples"]
    assert n >= 50_000
    for params in (a, b):
        sizes = list(params["files"].values())
        assert sizes[:-1] == [7000] * (len(sizes) - 1) and 0 < sizes[-1] <= 7000
        assert params["post-process"] == plain["post-process"]
    original = read_rows(tmp_path / "plain")
    where = defaultdict(list)
    for i, row in enumerate(original):
        where[row.tobytes()].append(i)
    # Identical rows (~9% here: runs of dashes, blank lines) are matched in random order; matching
    # them first-come-first-served would itself correlate the positions.
    rng = np.random.default_rng(0)
    for positions in where.values():
        rng.shuffle(positions)
    shuffled = read_rows(tmp_path / "a")
    source = np.array([where[row.tobytes()].pop() for row in shuffled])  # every row exactly once
    assert sorted(source.tolist()) == list(range(n))
    rho = np.corrcoef(np.arange(n), source)[0, 1]  # Spearman: the positions are already ranks
    assert abs(rho) < 0.02, rho
    assert not np.array_equal(read_rows(tmp_path / "b"), shuffled)


@pytest.mark.worker_processes
def test_shuffled_output_is_byte_identical_across_runner_settings(corpus, tmp_path):
    args = ["--max_seq_length", "64", "--files_per_record", "900", "--shuffle", "True", "--shuffle_seed", "5",
            "--short_seq_prob", "0.1"]
    digests = []
    for i, runner in enumerate([RUNNER, MULTI_PROCESSING + ["--direct_num_workers", "1"],
                                MULTI_PROCESSING + ["--direct_num_workers", "2"]]):
        run_job(_args(corpus, tmp_path / f"r{i}", *args), runner=runner)
        digests.append(_digests(tmp_path / f"r{i}"))
    assert len(digests[0]) > 3 and digests[0] == digests[1] == digests[2]


def _start(args: list[str], env: Optional[dict] = None) -> subprocess.Popen:
    return popen_logged([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args, *RUNNER], cwd=ROOT,
                        start_new_session=True, env=env)


def _complete_shard(path: str) -> bool:
    with h5py.File(path, "r") as f:
        return int(f.attrs["n_examples"]) == f["data"].shape[0] > 0 and f["data"][-1].any()


def test_no_h5_appears_before_it_is_complete_and_params_come_last(corpus, tmp_path):
    out = tmp_path / "out"
    proc = _start(_args(corpus, out, "--max_seq_length", "32", "--files_per_record", "400"))
    seen, params_seen_with = set(), None
    while proc.poll() is None:
        for path in glob.glob(str(out / "*.h5")):
            if path not in seen:
                assert _complete_shard(path), path
                seen.add(path)
        if params_seen_with is None and (out / "data_params.json").exists():
            params_seen_with = {p for p in glob.glob(str(out / "*.h5"))}
        time.sleep(0.01)
    assert proc.returncode == 0, stderr_text(proc)
    final = set(glob.glob(str(out / "*.h5")))
    assert len(final) > 10 and seen <= final
    assert params_seen_with in (None, final)  # data_params.json never precedes a shard
    assert not (out / ".tmp").exists()


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, "the job ended before the kill point: " + stderr_text(proc)
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process tree, no clean-up
    proc.wait()


KILL_ARGS = ["--max_seq_length", "32", "--files_per_record", "300", "--shuffle", "True", "--short_seq_prob", "0.05"]


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    """mode -> (output, data_params.json) of the uninterrupted job, run once per mode: both kill points compare
    their resumed output with the very same job's (read only, never changed)."""
    done: dict = {}

    def get(mode: str) -> tuple[Path, dict]:
        if mode not in done:
            out = tmp_path_factory.mktemp(f"uninterrupted_{mode}") / "ref"
            done[mode] = out, run_job(_args(corpus, out, *KILL_ARGS, mode=mode))
        return done[mode]
    return get


@pytest.mark.parametrize("mode", ["LMData", "LMData_VSL"])
@pytest.mark.parametrize("kill_point", ["while_packing", "while_writing"])
def test_kill_and_resume_gives_the_uninterrupted_bytes(corpus, tmp_path, kill_point, mode, uninterrupted):
    args = KILL_ARGS
    ref, reference = uninterrupted(mode)
    out = tmp_path / "out"
    proc = _start(_args(corpus, out, *args, mode=mode), env=env_to_kill(tmp_path))
    groups = out / ".tmp" / "groups"
    if kill_point == "while_packing":
        _kill_when(proc, lambda: len(glob.glob(str(groups / "*.json"))) >= 2)
        assert not glob.glob(str(out / "*.h5"))
    else:
        _kill_when(proc, lambda: len(glob.glob(str(out / "*.h5"))) >= 3)
    assert not (out / "data_params.json").exists()

    # Without the flag the partial output is protected; with another config it is refused.
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset",
                           *_args(corpus, out, *args, mode=mode), *RUNNER], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    other = args[:-1] + ["0.5"]
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset",
                           *_args(corpus, out, *other, mode=mode), "--resume_from_checkpoint", "True", *RUNNER],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "different configuration" in proc.stderr

    resumed = run_job(_args(corpus, out, *args, "--resume_from_checkpoint", "True", mode=mode))
    assert _digests(out) == _digests(ref)
    assert resumed["post-process"] == reference["post-process"]
    assert resumed["input"] == reference["input"]
    assert resumed["run"]["groups_resumed"] >= 2  # committed groups were not packed again
