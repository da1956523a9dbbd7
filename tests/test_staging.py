"""Tests for staged tokenizer files: DoFns carry a small reference, workers load the files once."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest

from transforms.core.tokenizer import GPT2
from transforms.io import tokenizer_files as tf
from transforms.stages.tokenize import TokenizeDocuments

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"


@pytest.fixture()
def files():
    return tf.read_tokenizer_files(GPT2, encoder_file=str(BUNDLED / "encoder.json"),
                                   vocab_file=str(BUNDLED / "vocab.bpe"))


def test_staged_reference_loads_the_same_files(files, tmp_path, monkeypatch):
    staged = tf.stage_tokenizer_files(files, str(tmp_path))
    assert Path(staged.path).is_file() and not staged.path.endswith(".h5")
    monkeypatch.setattr(tf, "_LOADED", {})  # a worker process that did not stage them
    assert staged.load() == files


def test_a_dofn_carries_the_reference_not_the_files(files, tmp_path):
    staged = tf.stage_tokenizer_files(files, str(tmp_path))
    small = len(pickle.dumps(TokenizeDocuments(staged)._fn))
    assert small < 10_000 < len(pickle.dumps(TokenizeDocuments(files)._fn))


def test_a_changed_file_is_refused(files, tmp_path, monkeypatch):
    staged = tf.stage_tokenizer_files(files, str(tmp_path))
    Path(staged.path).write_bytes(pickle.dumps(files.load().__class__(kind=GPT2, name="other")))
    monkeypatch.setattr(tf, "_LOADED", {})
    with pytest.raises(RuntimeError, match="digest mismatch"):
        staged.load()


def test_dry_run_names_without_writing(files, tmp_path):
    staged = tf.stage_tokenizer_files(files, str(tmp_path / "never"), write=False)
    assert not (tmp_path / "never").exists()
    assert staged.load() == files  # the launching process keeps them


def test_files_named_by_the_plan_are_written_once_the_job_claims_its_directory(files, tmp_path):
    """The plan names the staged file (pipelines.plan); the job writes it later (pipelines.job): the same bytes
    as staging at once, so a worker's digest check passes."""
    named = tf.stage_tokenizer_files(files, str(tmp_path / "later"), write=False)
    (tmp_path / "later").mkdir()  # the job's claimed directory
    tf.write_staged(named)
    (tmp_path / "now").mkdir()
    at_once = tf.stage_tokenizer_files(files, str(tmp_path / "now"))
    assert Path(named.path).read_bytes() == Path(at_once.path).read_bytes()
    assert named.sha256 == at_once.sha256 == hashlib.sha256(Path(named.path).read_bytes()).hexdigest()
