"""gs:// end to end, against a real GCS JSON API server (gcp-storage-emulator) on 127.0.0.1.

gcsfs is pointed at the emulator only through the environment, as a user
would do it: STORAGE_EMULATOR_HOST (gcsfs's endpoint), FSSPEC_GS_TOKEN=anon
(fsspec's per-protocol defaults: no credential look-up) and
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (else gcsfs first tries a gRPC
bucket-layout call the emulator does not answer, 60 s per attempt).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.helpers import MULTI_PROCESSING, REFERENCE, RUNNER, popen_logged, require_shared, run_job, stderr_text

LM = REFERENCE / "inputs" / "lm"
NEOX = REFERENCE / "tokenizer" / "tokenizer.json"
YAML = "processing:\n  max_seq_length: 256\n  files_per_record: 1000\n"

_INSTALL = "pip install gcp-storage-emulator (it is in the test extras: pip install -e '.[gcp,test]')"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gcp-storage-emulator exited with {proc.returncode}: {stderr_text(proc)[-2000:]}")
        try:
            with opener.open(f"{url}/storage/v1/b?project=test", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"gcp-storage-emulator did not answer on {url} within {timeout:.0f}s")


@pytest.fixture(scope="module")
def emulator():
    """URL of an in-memory gcp-storage-emulator on a free 127.0.0.1 port, stopped afterwards."""
    pytest.importorskip("gcsfs", reason="gcsfs is not installed: pip install -e '.[gcp]'")
    pytest.importorskip("gcp_storage_emulator", reason=f"gcp-storage-emulator is not installed: {_INSTALL}")
    port = _free_port()
    proc = popen_logged([sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1", f"--port={port}",
                         "--in-memory", "--quiet"])
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def gcs(emulator, monkeypatch):
    """A gcsfs file system on a fresh bucket of the emulator: (fs, bucket)."""
    import importlib

    import fsspec.config

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")  # inherited by any worker process
    # fsspec read FSSPEC_* when it was imported: give this process the same default.
    monkeypatch.setitem(fsspec.config.conf, "gs", {**fsspec.config.conf.get("gs", {}), "token": "anon"})
    import gcsfs
    import gcsfs.core

    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        # gcsfs was imported before the variable was set, with its experimental gRPC layer on.
        registry = importlib.import_module("fsspec.registry")._registry
        for proto in ("gs", "gcs"):
            monkeypatch.setitem(registry, proto, gcsfs.core.GCSFileSystem)
    gcsfs.core.GCSFileSystem.clear_instance_cache()
    fs = fsspec.filesystem("gs")
    assert fs.credentials.method == "anon"
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield fs, bucket
    gcsfs.core.GCSFileSystem.clear_instance_cache()


def _objects(fs, prefix: str) -> dict:
    """Relative name -> size of every object under prefix."""
    fs.invalidate_cache()
    return {p[len(prefix) + 1:]: info["size"] for p, info in fs.find(prefix, detail=True).items()}


def test_commit_never_exposes_a_partial_h5(gcs, tmp_path, monkeypatch):
    """The upload goes to OUT/.tmp/*.partial; the final name appears by a copy of the complete object."""
    import fsspec.core

    from transforms.io import fs as ourfs

    fs, bucket = gcs
    payload = os.urandom(3 << 20)
    local = tmp_path / "shard.partial"
    local.write_bytes(payload)
    seen = []
    original = fs.cp_file

    def spy(path1, path2, **kw):
        seen.append(_objects(fs, f"{bucket}/out"))
        return original(path1, path2, **kw)

    assert fsspec.core.url_to_fs(f"gs://{bucket}/out")[0] is fs  # the instance the job uses
    monkeypatch.setattr(fs, "cp_file", spy)
    ourfs.commit_local_file(str(local), f"gs://{bucket}/out/examples_00000.h5")

    (before,) = seen
    assert not [n for n in before if n.endswith(".h5")], before
    (tmp_name,) = before
    assert tmp_name.startswith(".tmp/examples_00000.h5.") and tmp_name.endswith(".partial")
    assert before[tmp_name] == len(payload)  # the temporary object was complete before the copy
    assert _objects(fs, f"{bucket}/out") == {"examples_00000.h5": len(payload)}  # .tmp/ is gone
    assert fs.cat(f"{bucket}/out/examples_00000.h5") == payload
    assert not local.exists()


class _Watcher(threading.Thread):
    """Lists OUT while the job runs, recording the size of every `.h5` object it ever sees."""

    def __init__(self, prefix: str):
        super().__init__(daemon=True)
        import gcsfs.core

        self._fs = gcsfs.core.GCSFileSystem(token="anon", skip_instance_cache=True, use_listings_cache=False)
        self._prefix = prefix
        self.sizes: dict = {}
        self.temp_seen = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                found = self._fs.find(self._prefix, detail=True)
            except (FileNotFoundError, OSError):
                found = {}
            for path, info in found.items():
                if path.endswith(".h5"):
                    self.sizes.setdefault(path[len(self._prefix) + 1:], set()).add(info["size"])
                elif "/.tmp/" in path:
                    self.temp_seen += 1
            time.sleep(0.02)


def _normalized_params(params: dict, roots: dict) -> dict:
    """data_params.json with every path spelled as a placeholder; what describes the run, not the data, dropped."""
    text = json.dumps(params, sort_keys=True)
    for root, placeholder in sorted(roots.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(json.dumps(root)[1:-1], placeholder)
    out = json.loads(text)
    out.pop("config_fingerprint")  # a hash over the settings, input_dir and encoder_file included
    out.pop("run", None)  # how the job ran (runner options, start time), not what it wrote
    return out


def _args(input_dir, output_dir, encoder_file, params, mode: str = "LMData") -> list[str]:
    return [mode, "--input_dir", input_dir, "--output_dir", output_dir, "--params", params,
            "--tokenizer_type", "NeoXTokenizer", "--encoder_file", encoder_file]


SPLIT_YAML = YAML + "setup:\n  data_splits: {train: {split_fraction: 0.7}, validation: {split_fraction: 0.3}}\n"


@pytest.mark.parametrize("mode, runner, yaml", [
    ("LMData", RUNNER, YAML),
    pytest.param("LMData", MULTI_PROCESSING + ["--direct_num_workers", "2"], YAML, marks=pytest.mark.worker_processes),
    ("LMData_VSL", RUNNER, YAML),
    ("LMData", RUNNER, SPLIT_YAML)], ids=["FnApiRunner", "multi_processing", "vsl", "splits"])
def test_gs_to_gs_equals_local_run(gcs, tmp_path, mode, runner, yaml):
    """Corpus, tokenizer and YAML on gs://, output to gs://: every file read back equals the local run's.

    multi_processing: worker processes reach the emulator through the inherited environment alone.
    splits: one dataset per split under OUT, and the job's summary.
    """
    require_shared(LM)
    require_shared(NEOX)
    from pipelines.create_hdf5_dataset import main

    fs, bucket = gcs
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml)
    local_out = tmp_path / "local_out"
    local_params = run_job(_args(str(LM), str(local_out), str(NEOX), str(cfg), mode))
    local_files = {str(p.relative_to(local_out)): p.read_bytes() for p in local_out.rglob("*") if p.is_file()}
    assert sum(n.endswith(".h5") for n in local_files) >= 2, sorted(local_files)  # several shards

    for f in sorted(LM.iterdir()):
        fs.put_file(str(f), f"{bucket}/in/{f.name}")
    fs.put_file(str(NEOX), f"{bucket}/tok/tokenizer.json")
    fs.pipe(f"{bucket}/cfg.yaml", yaml.encode())
    gs_in, gs_out, gs_tok = f"gs://{bucket}/in", f"gs://{bucket}/out", f"gs://{bucket}/tok/tokenizer.json"

    watcher = _Watcher(f"{bucket}/out")
    watcher.start()
    try:
        code = main(_args(gs_in, gs_out, gs_tok, f"gs://{bucket}/cfg.yaml", mode) + runner)
    finally:
        watcher.stop.set()
        watcher.join()
    assert code == 0

    remote = _objects(fs, f"{bucket}/out")
    assert sorted(remote) == sorted(local_files)  # no .tmp/ or *.partial left, nothing missing
    for name, data in local_files.items():
        if name.endswith(".h5"):
            assert fs.cat(f"{bucket}/out/{name}") == data, f"{name} differs from the local run"
    # Every .h5 the watcher ever listed already had its final size: never a partial object.
    assert watcher.sizes, "the watcher saw no shard"
    for name, sizes in watcher.sizes.items():
        assert sizes == {remote[name]}, (name, sizes, remote[name])

    gs_params = json.loads(fs.cat(f"{bucket}/out/data_params.json"))
    roots_local = {str(LM): "<IN>", str(local_out): "<OUT>", str(NEOX): "<TOK>", str(cfg): "<CFG>"}
    roots_gs = {gs_in: "<IN>", gs_out: "<OUT>", gs_tok: "<TOK>", f"gs://{bucket}/cfg.yaml": "<CFG>"}
    assert _normalized_params(gs_params, roots_gs) == _normalized_params(local_params, roots_local)
    assert gs_params["setup"]["input_dir"] == gs_in and gs_params["setup"]["output_dir"] == gs_out


def test_metadata_file_on_gs_lists_gs_paths(gcs, tmp_path):
    """--metadata_files on gs:// naming gs:// inputs: the same rows as the local directory run."""
    require_shared(LM)
    require_shared(NEOX)
    from pipelines.create_hdf5_dataset import main

    fs, bucket = gcs
    names = sorted(f.name for f in LM.iterdir())
    for name in names:
        fs.put_file(str(LM / name), f"{bucket}/in/{name}")
    fs.pipe(f"{bucket}/meta.txt", "".join(f"gs://{bucket}/in/{n}\n" for n in names).encode())
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(YAML)
    local_out = tmp_path / "local_out"
    run_job(_args(str(LM), str(local_out), str(NEOX), str(cfg)))

    argv = ["LMData", "--metadata_files", f"gs://{bucket}/meta.txt", "--output_dir", f"gs://{bucket}/out",
            "--params", str(cfg), "--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(NEOX)]
    assert main(argv + RUNNER) == 0
    remote = _objects(fs, f"{bucket}/out")
    shards = sorted(p.name for p in local_out.glob("*.h5"))
    assert sorted(n for n in remote if n.endswith(".h5")) == shards
    for name in shards:
        assert fs.cat(f"{bucket}/out/{name}") == (local_out / name).read_bytes(), name
    params = json.loads(fs.cat(f"{bucket}/out/data_params.json"))
    assert sorted(params["input"]["per_source"]) == [f"gs://{bucket}/in/{n}" for n in names]


def test_non_empty_gs_output_is_refused_then_overwritten(gcs, tmp_path, capsys):
    """The output-directory rules hold on gs:// too: refuse a non-empty prefix, overwrite replaces only ours."""
    require_shared(NEOX)
    from pipelines.create_hdf5_dataset import main

    fs, bucket = gcs
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    fs.pipe(f"{bucket}/out/keep.txt", b"user file")
    fs.pipe(f"{bucket}/out/examples_00007.h5", b"stale shard of an earlier run")
    argv = ["LMData", "--input_dir", str(sample), "--output_dir", f"gs://{bucket}/out",
            "--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(NEOX), "--max_seq_length", "256"]
    assert main(argv + RUNNER) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(argv + ["--overwrite_output", "True"] + RUNNER) == 0
    remote = _objects(fs, f"{bucket}/out")
    assert fs.cat(f"{bucket}/out/keep.txt") == b"user file"
    assert "examples_00007.h5" not in remote
    assert "data_params.json" in remote and "examples_00000.h5" in remote
    assert not [n for n in remote if n.startswith(".tmp/") or n.endswith(".partial")]


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_other_fsspec_urls_equal_local_run(scheme, tmp_path):
    """memory:// and file:// for every path (inputs, tokenizer, YAML, output): the same bytes as plain paths."""
    import fsspec

    from pipelines.create_hdf5_dataset import main

    root = Path(__file__).resolve().parents[1]
    sample, gpt2 = root / "data" / "sample", root / "data" / "tokenizers" / "gpt2"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("processing:\n  max_seq_length: 128\n  files_per_record: 300\n")
    local_out = tmp_path / "local_out"
    args = ["LMData", "--tokenizer_type", "GPT2Tokenizer"]
    run_job(args + ["--input_dir", str(sample), "--output_dir", str(local_out), "--params", str(cfg),
                    "--vocab_file", str(gpt2 / "vocab.bpe"), "--encoder_file", str(gpt2 / "encoder.json")])
    shards = sorted(p.name for p in local_out.glob("*.h5"))
    assert len(shards) >= 2

    if scheme == "memory":
        base = f"memory://hdf5-test-{uuid.uuid4().hex[:8]}"
        fs = fsspec.filesystem("memory")
        for f in sample.iterdir():
            fs.put_file(str(f), f"{base}/in/{f.name}")
        for name in ("vocab.bpe", "encoder.json"):
            fs.put_file(str(gpt2 / name), f"{base}/tok/{name}")
        fs.put_file(str(cfg), f"{base}/cfg.yaml")
        urls = {"in": f"{base}/in", "tok": f"{base}/tok", "cfg": f"{base}/cfg.yaml", "out": f"{base}/out"}
    else:
        fs = fsspec.filesystem("file")
        urls = {"in": f"file://{sample}", "tok": f"file://{gpt2}", "cfg": f"file://{cfg}",
                "out": f"file://{tmp_path / 'url_out'}"}
    try:
        code = main(args + ["--input_dir", urls["in"], "--output_dir", urls["out"], "--params", urls["cfg"],
                            "--vocab_file", urls["tok"] + "/vocab.bpe", "--encoder_file", urls["tok"] + "/encoder.json"]
                    + RUNNER)
        assert code == 0
        out = fs._strip_protocol(urls["out"])
        written = sorted(p.rsplit("/", 1)[1] for p in fs.find(out))
        assert written == sorted(shards + ["data_params.json"]), written
        for name in shards:
            assert fs.cat(f"{out}/{name}") == (local_out / name).read_bytes(), name
    finally:
        if scheme == "memory":
            fs.rm(base.replace("memory://", "/"), recursive=True)


def test_staged_tokenizer_files_round_trip_through_gcs(gcs, monkeypatch):
    """What a Dataflow worker does in setup(): read the staged files back from gs:// and check their digest."""
    from transforms.core.tokenizer import GPT2
    from transforms.io import tokenizer_files as tf

    fs, bucket = gcs
    gpt2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
    files = tf.read_tokenizer_files(GPT2, encoder_file=str(gpt2 / "encoder.json"), vocab_file=str(gpt2 / "vocab.bpe"))
    staged = tf.stage_tokenizer_files(files, f"gs://{bucket}/out/.tmp")
    assert staged.path.startswith(f"gs://{bucket}/out/.tmp/") and fs.exists(staged.path)
    monkeypatch.setattr(tf, "_LOADED", {})  # a worker that did not stage them
    assert staged.load() == files


@pytest.mark.parametrize("shuffle", [False, True], ids=["in_order", "shuffled"])
def test_packed_groups_kept_in_the_bucket_as_on_dataflow(gcs, tmp_path, shuffle):
    """Dataflow keeps packed groups under OUT/.tmp/groups in the bucket: the files equal a local run's."""
    require_shared(LM)
    require_shared(NEOX)
    from pipelines.config import load_config
    from pipelines.job import run

    fs, bucket = gcs
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(YAML.replace("1000", "300"))
    extra = ["--shuffle", "True"] if shuffle else []
    local_out = tmp_path / "local_out"
    run_job(_args(str(LM), str(local_out), str(NEOX), str(cfg)) + extra)
    gs_out = f"gs://{bucket}/out"
    config, beam_args = load_config(_args(str(LM), gs_out, str(NEOX), str(cfg)) + extra + RUNNER)
    run(config, beam_args, {"storage_dir": f"{gs_out}/.tmp/groups", "fan_out_bytes": 0})
    remote = _objects(fs, f"{bucket}/out")
    shards = sorted(p.name for p in local_out.glob("*.h5"))
    assert len(shards) >= 3 and sorted(n for n in remote if n.endswith(".h5")) == shards
    for name in shards:
        assert fs.cat(f"{bucket}/out/{name}") == (local_out / name).read_bytes(), name
    assert not [n for n in remote if n.startswith(".tmp/")]


def test_map_dataset_reads_rows_by_index_from_gs(gcs, tmp_path):
    """H5MapDataset on gs://: the index from the files' attributes, each row by a ranged read of its chunk."""
    import numpy as np

    from transforms.io.map_dataset import H5MapDataset

    require_shared(LM)
    require_shared(NEOX)
    fs, bucket = gcs
    out = tmp_path / "out"
    run_job(["LMData_VSL", "--input_dir", str(LM), "--output_dir", str(out), "--tokenizer_type", "NeoXTokenizer",
             "--encoder_file", str(NEOX), "--max_seq_length", "128", "--files_per_record", "200"])
    for p in out.iterdir():
        if p.is_file():
            fs.put_file(str(p), f"{bucket}/ds/{p.name}")
    local, remote = H5MapDataset(str(out)), H5MapDataset(f"gs://{bucket}/ds")
    assert len(remote) == len(local) > 200 and remote.features == local.features and len(remote.files) >= 2
    for i in np.random.default_rng(0).integers(0, len(local), size=40).tolist() + [len(local) - 1]:
        assert all(np.array_equal(remote[i][k], v) for k, v in local[i].items()), i
    remote.close()


def test_dedup_reads_and_writes_the_bucket_as_a_local_run(gcs, tmp_path):
    """--dedup near from gs:// to gs://, its batches waiting in the bucket (as on Dataflow) and its index written
    there: the listing, the index and the shards equal a local run's, and a later job reads the index back."""
    require_shared(LM)
    require_shared(NEOX)
    from pipelines.config import load_config
    from pipelines.job import run

    fs, bucket = gcs
    local_in = tmp_path / "in"
    local_in.mkdir()
    for f in sorted(LM.iterdir()):
        (local_in / f.name).write_bytes(f.read_bytes())
    (local_in / "zz_copy.jsonl").write_bytes((LM / "part_1.jsonl").read_bytes())  # every record again
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(YAML)
    dedup = ["--dedup", "near"]
    local_out = tmp_path / "out"
    local = run_job(_args(str(local_in), str(local_out), str(NEOX), str(cfg))
                    + dedup + ["--dedup_index", str(tmp_path / "index")])
    assert local["dedup"]["documents_removed"]["exact"] >= 10
    for f in sorted(local_in.iterdir()):
        fs.put_file(str(f), f"{bucket}/in/{f.name}")
    gs_in, gs_out, gs_index = f"gs://{bucket}/in", f"gs://{bucket}/out", f"gs://{bucket}/index"
    config, beam_args = load_config(_args(gs_in, gs_out, str(NEOX), str(cfg)) + dedup
                                    + ["--dedup_index", gs_index] + RUNNER)
    run(config, beam_args, {"storage_dir": f"{gs_out}/.tmp/groups"})
    remote = _objects(fs, f"{bucket}/out")
    assert not [n for n in remote if n.startswith(".tmp/")]
    local_files = {str(p.relative_to(local_out)): p for p in local_out.rglob("*") if p.is_file()}
    for name, path in local_files.items():
        if name.endswith(".h5") or name.startswith("dedup/"):
            assert fs.cat(f"{bucket}/out/{name}") == path.read_bytes(), name
    index = {str(p.relative_to(tmp_path / "index")): p for p in (tmp_path / "index").rglob("*") if p.is_file()}
    assert sorted(_objects(fs, f"{bucket}/index")) == sorted(index)
    for name, path in index.items():
        if name.startswith("parts/"):
            assert fs.cat(f"{bucket}/index/{name}") == path.read_bytes(), name
    # A later job against the index in the bucket: the copy of part_1 is already there.
    later = tmp_path / "later"
    later.mkdir()
    (later / "again.jsonl").write_bytes((LM / "part_1.jsonl").read_bytes())
    again = run_job(_args(str(later), str(tmp_path / "later_out"), str(NEOX), str(cfg)) + dedup
                    + ["--dedup_against", gs_index])
    assert again["dedup"]["against"] == again["input"]["good"] > 0
