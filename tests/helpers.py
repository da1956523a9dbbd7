"""Shared test helpers: where ../shared is, running the job in-process, reading outputs back."""

from __future__ import annotations

import glob
import json
import os
import shlex
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "reference"
GOLDEN = REFERENCE / "golden"
RUNNER = ["--runner", "FnApiRunner"]  # pinned: Prism would try to download a binary


def require_shared(path: Path = SHARED) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared reference material is needed for this test")
    return path


def run_job(argv: list[str]) -> dict:
    """Run create_hdf5_dataset in-process on FnApiRunner; return data_params.json."""
    from pipelines.create_hdf5_dataset import main

    code = main(list(argv) + RUNNER)
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


def golden_command(case: str) -> list[str]:
    """The reference command of a golden case, minus the script name and its environment."""
    text = (GOLDEN / case / "command.txt").read_text().strip()
    words = [w for w in shlex.split(text) if "=" not in w or w.startswith("--")]
    assert words[0].endswith("create_hdf5_dataset.py")
    words = words[1:]
    if "--params" in words:
        i = words.index("--params")
        words[i + 1] = str(GOLDEN / case / words[i + 1])
    return words


def assert_dataloader_rules(path: str) -> int:
    """The Cerebras HDF5 dataloader's requirements; returns the number of rows."""
    assert path.endswith(".h5")
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["data"], f"{path}: datasets {list(f.keys())}"
        d = f["data"]
        assert d.dtype == np.int32, f"{path}: dtype {d.dtype}"
        assert d.ndim == 3 and d.shape[1] == 3, f"{path}: shape {d.shape}"
        assert d.chunks == (1, 3, d.shape[2]), f"{path}: chunks {d.chunks}"
        assert d.compression == "gzip", f"{path}: compression {d.compression}"
        assert int(f.attrs["n_examples"]) == d.shape[0], f"{path}: n_examples"
        return d.shape[0]
