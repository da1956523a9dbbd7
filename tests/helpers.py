"""Shared test helpers: where ../shared is, running the job in-process, reading outputs back."""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "reference"
GOLDEN = REFERENCE / "golden"
GOLDEN_VSL = REFERENCE / "golden-vsl"  # the per-document script's VSL outputs (5 features)
RUNNER = ["--runner", "FnApiRunner"]  # pinned: Prism would try to download a binary


def require_shared(path: Path = SHARED) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared reference material is needed for this test")
    return path


MULTI_PROCESSING = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing"]


def run_job(argv: list[str], runner: list[str] = RUNNER) -> dict:
    """Run create_hdf5_dataset in-process (FnApiRunner unless told otherwise); return data_params.json."""
    from pipelines.create_hdf5_dataset import main

    code = main(list(argv) + runner)
    assert code == 0, f"create_hdf5_dataset exited {code}"
    out = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(out, "data_params.json")) as f:
        return json.load(f)


def h5_files(out_dir) -> list[str]:
    return sorted(glob.glob(os.path.join(str(out_dir), "*.h5")))


def read_rows(out_dir, order=None) -> np.ndarray:
    files = order(h5_files(out_dir)) if order else h5_files(out_dir)
    arrays = [h5py.File(f, "r")["data"][()] for f in files]
    return np.concatenate(arrays) if arrays else np.zeros((0, 3, 0), np.int32)


def reference_order(files: list[str]) -> list[str]:
    """The reference's files in the order it wrote them (chunk number is the last field)."""
    return sorted(files, key=lambda p: int(Path(p).stem.rsplit("_", 1)[1]))


def golden_command(case: str, root: Path = GOLDEN) -> list[str]:
    """The reference command of a golden case (under `root`), minus the script name and its environment."""
    text = (root / case / "command.txt").read_text().strip()
    words = [w for w in shlex.split(text) if "=" not in w or w.startswith("--")]
    assert words[0].endswith("create_hdf5_dataset.py")
    words = words[1:]
    if "--params" in words:
        i = words.index("--params")
        words[i + 1] = str(root / case / words[i + 1])
    return words


def assert_dataloader_rules(path: str, features: int = 3) -> int:
    """The Cerebras HDF5 dataloader's requirements (rows of `features` x msl); returns the number of rows."""
    assert path.endswith(".h5")
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["data"], f"{path}: datasets {list(f.keys())}"
        d = f["data"]
        assert d.dtype == np.int32, f"{path}: dtype {d.dtype}"
        assert d.ndim == 3 and d.shape[1] == features, f"{path}: shape {d.shape}"
        assert d.chunks == (1, features, d.shape[2]), f"{path}: chunks {d.chunks}"
        assert d.compression == "gzip", f"{path}: compression {d.compression}"
        assert int(f.attrs["n_examples"]) == d.shape[0], f"{path}: n_examples"
        return d.shape[0]


def recount(out_dir, *, inverted: bool, trailing_eos_input: bool, tokenizer) -> dict:
    """Statistics recomputed from the written files alone, independently of transforms.core.stats.

    The real (non-pad) inputs of a row end after its last trained position;
    Summarization and FIM rows also hold the final EOS as an untrained input.
    """
    n = tokens = loss = non_pad = chars = nbytes = segments = 0
    for path in h5_files(out_dir):
        with h5py.File(path, "r") as f:
            rows = f["data"][()]
        n += len(rows)
        tokens += rows.shape[0] * rows.shape[2]
        for r in rows:
            valid = (r[1] == 0) if inverted else (r[1] == 1)
            loss += int(valid.sum())
            last = int(np.flatnonzero(valid)[-1]) + 1
            if trailing_eos_input:
                last = min(last + 1, rows.shape[2])
            non_pad += last
            if len(r) == 5:  # VSL: a document starts at each position id 0 of the real part
                segments += int((r[4, :last] == 0).sum())
            text = tokenizer.decode(r[0, :last].tolist())
            chars += len(text)
            nbytes += len(text.encode("utf-8"))
    return {"n": n, "tokens": tokens, "loss": loss, "non_pad": non_pad, "chars": chars, "bytes": nbytes,
            "segments": segments}


def assert_stats_recount(out_dir, params: dict, tokenizer) -> None:
    """Every post-process and h5_dataset_stats number equals a recount of the files; accounting adds up."""
    mode = params["setup"]["mode"]
    c = recount(out_dir, inverted=params["dataset"]["inverted_mask"],
                trailing_eos_input=mode in ("Summarization", "FIM"), tokenizer=tokenizer)
    post, h5s = params["post-process"], params["h5_dataset_stats"]
    assert post["n_examples"] == h5s["num_sequences"] == c["n"] == sum(params["files"].values())
    assert post["num_tokens"] == h5s["num_tokens"] == c["tokens"]
    assert post["loss_valid_tokens"] == h5s["loss_valid_tokens"] == c["loss"]
    assert post["num_masked_tokens"] == c["tokens"] - c["loss"]
    assert h5s["non_pad_tokens"] == c["non_pad"]
    assert post["num_pad_tokens"] == c["tokens"] - c["non_pad"]
    assert h5s["detokenized_chars"] == c["chars"]
    assert h5s["detokenized_bytes"] == c["bytes"]
    if mode.endswith("_VSL"):
        assert params["features"] == ["input_ids", "attention_mask", "labels", "attention_span", "position_ids"]
        assert post["num_sequences_before_packing"] == c["segments"]
        assert post["vsl_packing_factor"] == (round(c["segments"] / c["n"], 4) if c["n"] else 0.0)
    else:
        assert params["features"] == ["input_ids", "attention_mask", "labels"]
        assert "num_sequences_before_packing" not in post
    inp = params["input"]
    assert inp["documents_read"] == inp["good"] + inp["bad"]
    assert inp["good"] == inp["used"] + inp["dropped"]
    assert post["processed_files"] == inp["good"]
    assert post["discarded_files"] == inp["dropped"]
    assert post["successful_files"] == inp["used"]


def zst(data: bytes) -> bytes:
    """Bytes compressed as one zstd frame, for building test corpora."""
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def make_tar(members: list[tuple[str, Optional[bytes]]]) -> bytes:
    """An uncompressed tar of files (name, bytes) and directories (name, None), for building test corpora."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# ---------------------------------------------------------------- FIM with one token per character
# Ids are code points; 0..5 are special.
EOS, PRE, MID, SUF, PAD, BOS = 0, 1, 2, 3, 4, 5


def char_encode(text):
    return [ord(c) for c in text]


def char_decode(ids):
    return "".join(map(chr, ids))


def char_cfg(msl, *, bos=False, pad=PAD, fim_rate=0.9, spm_rate=0.5, inverted=False):
    from transforms.core.fim import FimConfig

    return FimConfig(max_seq_length=msl, fim_rate=fim_rate, spm_rate=spm_rate, prefix_id=PRE, middle_id=MID,
                     suffix_id=SUF, eos_id=EOS, pad_id=pad, bos_id=BOS if bos else None, inverted_mask=inverted)


def chars(text):
    """'ab|cd' -> token ids, '|' standing for EOS."""
    return np.array([EOS if c == "|" else ord(c) for c in text], dtype=np.int32)


# ---------------------------------------------------------------- hand-made datasets for the tools' tests
SHARD = "examples_0.h5"


def write_dataset(path: Path, rows: np.ndarray, params: dict) -> Path:
    """A dataset directory of one shard of `rows` and the given data_params.json."""
    from transforms.io.hdf5_format import write_shard

    path.mkdir(exist_ok=True)
    write_shard(str(path / SHARD), rows)
    (path / "data_params.json").write_text(json.dumps(params))
    return path


def set_value(row: int, feature: int, position: int, value: int):
    """A change to hand-made rows: one value set, to break one invariant."""
    def change(rows):
        rows[row, feature, position] = value
    return change


def verify_problems(out) -> list[str]:
    from pipelines.tools import verify_dataset

    return verify_dataset(str(out)).problems


def assert_verifies_without_a_tokenizer(out, capsys, mode: str, n: int) -> None:
    """`verify OUT` passes on a hand-made dataset; with no tokenizer recorded only the checks that need one
    (the detokenized sizes, the vocabulary size against the tokenizer's) are left unchecked, and the notes
    name them."""
    from pipelines.create_hdf5_dataset import main

    code = main(["verify", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith(f"verify {out}: OK: 1 files, {n} sequences, {mode}; every check passed")
    assert [line for line in lines if line.startswith("note: ")] == [
        "note: h5_dataset_stats.detokenized_chars/bytes not checked: the tokenizer could not be rebuilt (see below)",
        "note: tokenizer not rebuilt: no tokenizer_type in data_params.json and none given; skipped: "
        "h5_dataset_stats.detokenized_chars/bytes against the rows decoded; post-process.vocab_size against the "
        "tokenizer's vocabulary"]


def popen_logged(argv: list, **kwargs) -> subprocess.Popen:
    """A child process whose stderr goes to a temporary file (`stderr_text` reads it), never to a pipe: a pipe
    nobody drains holds 64 KiB, and a child that writes more blocks for good (the storage emulator printing
    tracebacks of dropped connections hung tests/test_gcs.py that way)."""
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, **kwargs)
    proc.log = log
    return proc


def env_to_kill(tmp_path: Path) -> dict:
    """The environment of a job a test kills (SIGKILL): a killed process removes nothing, so the temporary
    directories it makes (Beam's, of its pipeline) go under the test's tmp_path, not the suite's temporary
    directory, which is checked for what tests leave (tests/conftest.py)."""
    temp = tmp_path / "killed_job_tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(temp)}


def stderr_text(proc: subprocess.Popen) -> str:
    """What a `popen_logged` process has written to stderr so far."""
    proc.log.seek(0)
    return proc.log.read().decode("utf-8", "replace")
