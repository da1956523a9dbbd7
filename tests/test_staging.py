"""Tests for staged tokenizer files: DoFns carry a small reference, workers load the files once."""

from __future__ import annotations

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
