"""Threads per worker process: sized by what the runner gives a process, not by the machine's cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.runners import beam_options, process_cpus
from tests.helpers import ROOT
from transforms.core.threads import machine_cpus, process_threads
from transforms.stages.hdf5_sink import _EncodeFn

_COUNT_ENCODER_THREADS = """
import os, sys, threading
start = len(os.listdir("/proc/self/task"))
from transforms.core.threads import limit_native_threads
from transforms.core.tokenizer import build_tokenizer
from transforms.io.tokenizer_files import read_tokenizer_files
limit_native_threads(int(sys.argv[1]) if sys.argv[1] != "none" else None)
tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file="data/tokenizers/gpt2/vocab.bpe",
                                           encoder_file="data/tokenizers/gpt2/encoder.json",
                                           backend=os.environ.get("CREATE_HDF5_TEST_BACKEND", "auto")))
tok.encoder
for t in threading.enumerate():
    if t.name == "fastokens-reference":
        t.join()  # a short-lived builder, not a pool
built = len(os.listdir("/proc/self/task"))
tok.encode_batch([f"a few words to encode {i} " * 20 for i in range(4000)])
end = len(os.listdir("/proc/self/task"))
print(end - built, end - start)  # made by encoding; made since the start, checks and reference included
"""


def _encoder_threads(limit: str, env: dict, since_start: bool = False) -> int:
    proc = subprocess.run([sys.executable, "-c", _COUNT_ENCODER_THREADS, limit], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.strip().splitlines()[-1].split()[1 if since_start else 0])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_the_tokenizer_pool_gets_the_process_share():
    """The encoders' native threads follow the process share (RAYON_NUM_THREADS, FASTOKENS_BPE_THREADS).

    tiktoken's pool is exactly the share. fastokens runs its own BPE workers beside the exact
    reference's (rayon) pool that its cross-check uses: together at most twice the share, plus one.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS", "FASTOKENS_BPE_THREADS")}
    tiktoken = {**env, "CREATE_HDF5_TEST_BACKEND": "tiktoken"}
    assert _encoder_threads("1", tiktoken) == 1
    assert _encoder_threads("3", tiktoken) == 3  # more than this machine may have: the setting, not the cores
    assert _encoder_threads("none", tiktoken) == machine_cpus()
    assert _encoder_threads("1", {**tiktoken, "RAYON_NUM_THREADS": "2"}) == 2  # the user's own setting wins
    for share in (1, 3):
        assert share <= _encoder_threads(str(share), env, since_start=True) <= 2 * share + 1
    assert _encoder_threads("1", env, since_start=True) < _encoder_threads("3", env, since_start=True)


def test_cores_per_process_follow_the_runner():
    dataflow = ["--runner", "DataflowRunner", "--project", "p", "--region", "r", "--temp_location", "gs://b/t"]
    assert process_cpus(beam_options(dataflow)) == 1  # Dataflow: one SDK process per vCPU
    assert process_cpus(beam_options(dataflow + ["--experiments", "no_use_multiple_sdk_containers"])) is None
    assert process_cpus(beam_options(["--runner", "FnApiRunner"])) is None
    two = beam_options(["--runner", "DirectRunner", "--direct_running_mode", "multi_processing",
                         "--direct_num_workers", "2"])
    assert process_cpus(two) == max(1, machine_cpus() // 2)


def test_compression_threads_follow_the_process_share():
    assert _EncodeFn(None, None, 4, 1)._threads == 1
    assert _EncodeFn(None, None, 4, 3)._threads == 3
    assert _EncodeFn(None, None, 4, None)._threads == machine_cpus() == process_threads(None)
