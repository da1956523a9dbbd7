"""Pipeline-level behaviour on real corpora: packing groups, determinism, exact file sizes."""

from __future__ import annotations

import hashlib
import json
import os

import h5py
import numpy as np
import pytest

from tests.helpers import MULTI_PROCESSING, assert_stats_recount, REFERENCE, ROOT, RUNNER, SHARED, h5_files, read_rows, require_shared, run_job

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def _args(input_dir, out, *extra) -> list[str]:
    return ["LMData", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type",
            "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "512", *extra]


def _digests(out) -> dict:
    return {p.rsplit("/", 1)[1]: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in h5_files(out)}


def _group_streams(rows: np.ndarray) -> list[np.ndarray]:
    """The token streams of the packing groups, read back from LMData rows in input order.

    Each group's stream ends in a padded remainder row; inside a group,
    consecutive rows share one token (the last label is the next first input).
    """
    streams, cur = [], []
    for row in rows:
        n = int(row[1].sum())
        if not cur:
            cur = [int(row[0, 0])]
        cur.extend(row[2, :n].tolist())
        if n < row.shape[1]:
            streams.append(np.array(cur))
            cur = []
    assert not cur
    return streams


def _doc_ids(texts: list[str]) -> list[int]:
    from transforms.core.tokenizer import build_tokenizer, tokenize_documents
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                               encoder_file=str(GPT2 / "encoder.json")))
    ids = tokenize_documents(tok, texts)
    return np.concatenate(ids).tolist() if ids else []


def test_large_jsonl_is_packed_in_byte_windows(tmp_path):
    """A .jsonl file's group k holds the lines whose first byte lies in the k-th packing_group_mb window."""
    corpus = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")  # 2.2 MB: three 1 MiB windows
    data = corpus.read_bytes()
    src = tmp_path / "in"
    src.mkdir()
    (src / "en.jsonl").write_bytes(data)
    params = run_job(_args(src, tmp_path / "out", "--packing_group_mb", "1", "--files_per_record", "1000"))
    windows: dict = {}
    start = 0
    for line in data.splitlines(keepends=True):
        windows.setdefault(start >> 20, []).append(json.loads(line)["text"])
        start += len(line)
    assert len(windows) == 3
    streams = _group_streams(read_rows(tmp_path / "out"))
    assert [s.tolist() for s in streams] == [_doc_ids(windows[k]) for k in sorted(windows)]
    assert params["input"]["documents_read"] == params["input"]["used"] == 457


def test_large_compressed_file_is_packed_in_slices_of_text(tmp_path):
    """A file read in order (here .jsonl.zst) closes a group once it holds packing_group_mb of text."""
    corpus = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    import zstandard

    src = tmp_path / "in"
    src.mkdir()
    (src / "en.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(corpus.read_bytes()))
    params = run_job(_args(src, tmp_path / "out", "--packing_group_mb", "1", "--files_per_record", "1000"))
    slices, size = [[]], 0
    for line in corpus.read_text().splitlines():
        text = json.loads(line)["text"]
        if size >= 1 << 20:
            slices, size = slices + [[]], 0
        slices[-1].append(text)
        size += len(text)
    assert len(slices) >= 2
    streams = _group_streams(read_rows(tmp_path / "out"))
    assert [s.tolist() for s in streams] == [_doc_ids(texts) for texts in slices]
    # Each stream of L tokens trains on L - 1 of them: a cut between slices costs one prediction.
    whole = run_job(_args(src, tmp_path / "whole", "--files_per_record", "1000"))
    assert whole["post-process"]["loss_valid_tokens"] == \
        params["post-process"]["loss_valid_tokens"] + len(slices) - 1


def test_same_input_same_bytes_and_exact_file_sizes(tmp_path):
    require_shared(SHARED / "corpora")
    src = tmp_path / "in"
    src.mkdir()
    for name in ("en_small_pd.jsonl", "code_small.jsonl"):
        (src / name).write_bytes((SHARED / "corpora" / name).read_bytes())
    a = run_job(_args(src, tmp_path / "a", "--files_per_record", "300", "--short_seq_prob", "0.1"))
    b = run_job(_args(src, tmp_path / "b", "--files_per_record", "300", "--short_seq_prob", "0.1"))
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    sizes = list(a["files"].values())
    assert sizes[:-1] == [300] * (len(sizes) - 1) and 0 < sizes[-1] <= 300
    c = run_job(_args(src, tmp_path / "c", "--num_output_files", "4", "--short_seq_prob", "0.1"))
    sizes = list(c["files"].values())
    assert len(sizes) == 4 and max(sizes) - min(sizes) <= 1
    assert np.array_equal(read_rows(tmp_path / "a"), read_rows(tmp_path / "c"))
    assert json.dumps(a["post-process"]) == json.dumps(b["post-process"])
    seeded = run_job(_args(src, tmp_path / "d", "--files_per_record", "300", "--short_seq_prob", "0.1",
                           "--seed", "1"))
    assert seeded["post-process"]["n_examples"] != a["post-process"]["n_examples"] or \
        _digests(tmp_path / "d") != _digests(tmp_path / "a")


RUNNER_SETTINGS = {
    "in_memory": RUNNER,
    "multi_processing_1": MULTI_PROCESSING + ["--direct_num_workers", "1"],
    "multi_processing_2": MULTI_PROCESSING + ["--direct_num_workers", "2"],
}


def _without_run_specific(params: dict) -> dict:
    """Everything but the one key that holds run-specific facts, and the output path."""
    params = {k: v for k, v in params.items() if k != "run"}
    params["setup"] = {k: v for k, v in params["setup"].items() if k != "output_dir"}
    return params


def _fim_args(out, seed="0") -> list[str]:
    ref = REFERENCE
    return ["FIM", "--input_dir", str(ref / "inputs" / "fim"), "--output_dir", str(out),
            "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(ref / "tokenizer" / "hf"),
            "--max_seq_length", "128", "--files_per_record", "150", "--seed", seed,
            "--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok", "<fim_middle>", "--fim_suffix_tok", "<fim_suffix>"]


@pytest.mark.worker_processes
def test_output_is_byte_identical_across_runner_settings(tmp_path):
    """LMData (with short_seq_prob draws) and FIM on three runner settings: same bytes, same statistics."""
    require_shared(REFERENCE)
    lm = {}
    fim = {}
    for name, runner in RUNNER_SETTINGS.items():
        lm_params = run_job(_args(REFERENCE / "inputs" / "lm", tmp_path / f"lm_{name}", "--files_per_record", "200",
                                  "--short_seq_prob", "0.2"), runner=runner)
        fim_params = run_job(_fim_args(tmp_path / f"fim_{name}"), runner=runner)
        lm[name] = (_digests(tmp_path / f"lm_{name}"), _without_run_specific(lm_params))
        fim[name] = (_digests(tmp_path / f"fim_{name}"), _without_run_specific(fim_params))
    for results in (lm, fim):
        first = results["in_memory"]
        assert len(first[0]) > 1
        for name, result in results.items():
            assert result == first, name
    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = build_tokenizer(read_tokenizer_files("HuggingFaceTokenizer",
                                               huggingface_tokenizer=str(REFERENCE / "tokenizer" / "hf")))
    assert_stats_recount(tmp_path / "fim_in_memory", fim["in_memory"][1], tok)
    other_seed = run_job(_fim_args(tmp_path / "fim_seed1", seed="1"))
    assert _digests(tmp_path / "fim_seed1") != fim["in_memory"][0]
    assert other_seed["post-process"]["n_examples"] == fim["in_memory"][1]["post-process"]["n_examples"]


@pytest.mark.parametrize("compressor", ["zlib", "libdeflate"])
def test_gzip_level_changes_only_the_compression(tmp_path, compressor):
    src = ROOT / "data" / "sample"
    default = run_job(_args(src, tmp_path / "four", "--files_per_record", "50", "--compressor", compressor))
    fast = run_job(_args(src, tmp_path / "one", "--files_per_record", "50", "--gzip_level", "1",
                         "--compressor", compressor))
    np.testing.assert_array_equal(read_rows(tmp_path / "one"), read_rows(tmp_path / "four"))
    assert fast["h5_dataset_stats"] == default["h5_dataset_stats"]
    for out, level in (("four", 4), ("one", 1)):
        for path in h5_files(tmp_path / out):
            with h5py.File(path, "r") as f:
                assert (f["data"].compression, f["data"].compression_opts) == ("gzip", level)
    size = {out: sum(os.path.getsize(p) for p in h5_files(tmp_path / out)) for out in ("four", "one")}
    if compressor == "zlib":  # zlib's level 1 trades size for speed; libdeflate's level 1 may even be smaller
        assert size["one"] > size["four"]
    else:
        assert size["one"] != size["four"]
