"""LMData equivalence with the reference's golden outputs (../shared/reference/golden).

Our packing is per input file (a packing group) while the reference packed
all files of its single worker as one stream, so for packing we compare the
concatenated token stream (the reference's is a prefix of ours: it drops the
final partial window) and check that our rows are exactly the window
formula applied to each file's stream. Without packing, rows are compared as
multisets. Counts of raw and normalized text must be equal.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from tests.helpers import (GOLDEN, REFERENCE, assert_dataloader_rules, assert_stats_recount, golden_command, h5_files, read_rows,
                           reference_order, require_shared, run_job)

PACK_CASES = ["lm_pack_hf", "lm_parquet_pack_hf", "lm_pack_noftfy_wikitext_hf", "lm_pack_gpt2"]
NOPACK_CASES = ["lm_nopack_hf", "lm_formats_nopack_hf", "lm_nopack_neox_invmask_ignored"]
MSL = 128
MIN_LEN = 6  # the reference's effective default


def _our_command(case: str, out: str) -> list[str]:
    words = golden_command(case)
    words[words.index("--output_dir") + 1] = out
    # The reference's effective defaults, which differ from the documented ones we use.
    if "--use_ftfy" not in words:
        words += ["--use_ftfy", "True"]
    words += ["--min_sequence_len", str(MIN_LEN)]
    return words


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each golden case run once per test session, from the reference directory (paths are relative to it)."""
    require_shared(GOLDEN)
    cache = {}

    def get(case: str) -> tuple[str, dict]:
        if case not in cache:
            out = str(tmp_path_factory.mktemp(case) / "out")
            cwd = os.getcwd()
            os.chdir(REFERENCE)
            try:
                cache[case] = (out, run_job(_our_command(case, out)))
            finally:
                os.chdir(cwd)
        return cache[case]

    return get


def _packed_stream(rows: np.ndarray) -> list[int]:
    """The token stream behind unpadded packed rows: inputs, then the last label."""
    assert (rows[:, 1, :] == 1).all(), "reference packed rows have no padding"
    return rows[:, 0, :].reshape(-1).tolist() + [int(rows[-1, 2, -1])]


def _window_rows(stream: list[int], msl: int, min_len: int, pad: int) -> list[np.ndarray]:
    """The reference's window formula, written out independently of transforms.core.pack."""
    rows, start = [], 0
    while start < len(stream):
        w = stream[start:start + msl + 1]
        start += msl
        if len(w) < 2 or len(w) < min_len:
            continue
        n = len(w) - 1
        row = np.full((3, msl), pad, dtype=np.int32)
        row[1] = 0
        row[0, :n], row[1, :n], row[2, :n] = w[:-1], 1, w[1:]
        rows.append(row)
    return rows


def _file_streams(case: str, params: dict) -> list[list[int]]:
    """Per input file, the documents' ids + EOS, computed with our reader/normalizer/tokenizer."""
    from pipelines.config import load_config
    from pipelines.plan import plan_job
    from transforms.core.normalize import normalize_text
    from transforms.core.records import Document
    from transforms.core.tokenizer import build_tokenizer, tokenize_documents
    from transforms.io.readers import read_records

    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        config, _ = load_config(_our_command(case, "/nonexistent"))
        plan = plan_job(config)
        tok = build_tokenizer(plan.tokenizer_files)
        streams = []
        for f in plan.files:
            texts = [normalize_text(r.text, plan.normalize) for r in read_records(f.path, plan.keys)
                     if isinstance(r, Document)]
            ids = tokenize_documents(tok, texts)
            streams.append(np.concatenate(ids).tolist() if ids else [])
        return streams
    finally:
        os.chdir(cwd)


def _split_docs(stream: list[int], eos: int) -> list[tuple]:
    docs, cur = [], []
    for t in stream:
        cur.append(t)
        if t == eos:
            docs.append(tuple(cur))
            cur = []
    return docs


def _assert_counts_equal(ours: dict, ref: dict) -> None:
    for key in ("raw_chars_count", "raw_bytes_count", "normalized_chars_count", "normalized_bytes_count",
                "eos_id", "pad_id", "vocab_size"):
        assert ours["post-process"][key] == ref["post-process"][key], key


def _ref_params(case: str) -> dict:
    import json

    with open(GOLDEN / case / "out" / "data_params.json") as f:
        return json.load(f)


def _outputs(case: str, runs) -> tuple:
    """(our output dir, our params, reference params, reference rows, our rows); our files obey the loader."""
    out, params = runs(case)
    for path in h5_files(out):
        assert_dataloader_rules(path)
    return out, params, _ref_params(case), read_rows(GOLDEN / case / "out", order=reference_order), read_rows(out)


@pytest.mark.parametrize("case", PACK_CASES)
def test_packed_stream_and_rows_match_reference(case, runs):
    out, params, ref, ref_rows, ours = _outputs(case, runs)
    eos, pad = params["post-process"]["eos_id"], params["post-process"]["pad_id"]

    streams = _file_streams(case, params)
    full = [t for s in streams for t in s]
    ref_stream = _packed_stream(ref_rows)
    # The reference drops only its final partial window: fewer than msl+1 tokens.
    assert full[:len(ref_stream)] == ref_stream
    assert 0 <= len(full) - len(ref_stream) <= MSL
    ref_docs = _split_docs(ref_stream, eos)
    assert _split_docs(full, eos)[:len(ref_docs)] == ref_docs

    expected = [row for s in streams for row in _window_rows(s, MSL, MIN_LEN, pad)]
    assert len(ours) == len(expected)
    np.testing.assert_array_equal(ours, np.stack(expected))
    _assert_counts_equal(params, ref)


def _row_multiset(rows: np.ndarray) -> Counter:
    return Counter(r.tobytes() for r in rows)


@pytest.mark.parametrize("case", NOPACK_CASES)
def test_unpacked_rows_match_reference_as_multiset(case, runs):
    out, params, ref, ref_rows, ours = _outputs(case, runs)
    if params["dataset"]["inverted_mask"]:
        # COMPAT fix: the reference ignored inverted_mask; ours really inverts it.
        real = ours[:, 1, :] == 0
        assert real[:, 0].all(), "the first position of every row is real and so has mask 0"
        assert (ours[:, 1, :] ^ 1 == ref_rows_mask_like(ours)).all()
        ours = ours.copy()
        ours[:, 1, :] ^= 1
    assert _row_multiset(ours) == _row_multiset(ref_rows)
    _assert_counts_equal(params, ref)
    assert params["post-process"]["processed_files"] == ref["post-process"]["processed_files"]
    assert params["post-process"]["n_examples"] == ref["post-process"]["n_examples"]


def ref_rows_mask_like(rows: np.ndarray) -> np.ndarray:
    """The non-inverted mask of rows: 1 up to the last non-pad input position."""
    mask = np.zeros(rows.shape[0::2], dtype=rows.dtype)
    for i, r in enumerate(rows):
        real = np.flatnonzero(r[1] == 0)
        mask[i, : real[-1] + 1] = 1
    return mask


@pytest.mark.parametrize("case", PACK_CASES + NOPACK_CASES)
def test_statistics_equal_a_recount_of_the_files(case, runs):
    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    out, params = runs(case)
    proc = params["processing"]
    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        tok = build_tokenizer(read_tokenizer_files(
            proc["tokenizer_type"], vocab_file=proc.get("vocab_file"), encoder_file=proc.get("encoder_file"),
            huggingface_tokenizer=proc.get("huggingface_tokenizer")))
    finally:
        os.chdir(cwd)
    assert_stats_recount(out, params, tok)


@pytest.mark.parametrize("case", ["lm_pack_hf", "lm_pack_noftfy_wikitext_hf"])
def test_data_params_names_the_ftfy_that_ran(case, runs):
    """ftfy's fixes change between releases: a job with ftfy records which one ran, and that it ran exactly
    (the fast path covers this release); a job without ftfy says nothing of it."""
    import ftfy

    _, params = runs(case)
    if params["dataset"]["use_ftfy"]:
        assert params["ftfy"] == {"version": ftfy.__version__, "fast_path": True}
    else:
        assert "ftfy" not in params
