"""Summarization: the row formula, and equivalence with the reference's golden outputs."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

from tests.helpers import (GOLDEN, REFERENCE, ROOT, assert_dataloader_rules, assert_stats_recount, golden_command,
                           h5_files, read_rows, reference_order, require_shared, run_job)
from transforms.core.summarization import SummarizationConfig, summarization_row

MSL = 256
EOS = 8187


def test_row_formula_matches_the_docstring_example():
    cfg = SummarizationConfig(max_seq_length=6, eos_id=9, pad_id=0, min_sequence_len=0)
    row, reason = summarization_row(np.array([11, 12]), np.array([21, 22]), cfg)
    assert reason is None
    np.testing.assert_array_equal(row, [[11, 12, 21, 22, 9, 0], [0, 1, 1, 1, 0, 0], [12, 21, 22, 9, 0, 0]])


def test_sep_carries_the_first_loss_position_and_inversion_flips_everything():
    cfg = SummarizationConfig(max_seq_length=6, eos_id=9, pad_id=0, sep_id=5, min_sequence_len=0)
    row, _ = summarization_row(np.array([11, 12]), np.array([21]), cfg)
    np.testing.assert_array_equal(row, [[11, 12, 5, 21, 9, 0], [0, 0, 1, 1, 0, 0], [12, 5, 21, 9, 0, 0]])
    inv, _ = summarization_row(np.array([11, 12]), np.array([21]),
                               SummarizationConfig(6, 9, 0, sep_id=5, min_sequence_len=0, inverted_mask=True))
    np.testing.assert_array_equal(inv[1], 1 - row[1])


def test_fit_and_drop_boundaries():
    cfg = SummarizationConfig(max_seq_length=4, eos_id=9, pad_id=0, min_sequence_len=3)
    fits, _ = summarization_row(np.array([1, 2]), np.array([3, 4]), cfg)  # total 5 = msl + 1: kept
    assert fits is not None and (fits[2] != 0).all() and fits[2, -1] == 9
    assert summarization_row(np.array([1, 2]), np.array([3, 4, 5]), cfg) == (None, "too_long")
    assert summarization_row(np.array([1]), np.array([]), cfg) == (None, "shorter_than_min_sequence_len")


def test_empty_prompt_does_not_crash_and_trains_on_the_rest():
    cfg = SummarizationConfig(max_seq_length=4, eos_id=9, pad_id=0, min_sequence_len=0)
    row, _ = summarization_row(np.array([], dtype=np.int32), np.array([3, 4]), cfg)
    np.testing.assert_array_equal(row, [[3, 4, 9, 0], [1, 1, 0, 0], [4, 9, 0, 0]])


def _tokenizer_of(params: dict):
    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    proc, data = params["processing"], params["dataset"]
    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        return build_tokenizer(read_tokenizer_files(
            proc["tokenizer_type"], vocab_file=proc.get("vocab_file"), encoder_file=proc.get("encoder_file"),
            huggingface_tokenizer=proc.get("huggingface_tokenizer"), sep_token=data.get("sep_token")))
    finally:
        os.chdir(cwd)


def _run_case(case: str, tmp_path) -> tuple[np.ndarray, np.ndarray, dict]:
    require_shared(GOLDEN)
    out = str(tmp_path / "out")
    words = golden_command(case)
    words[words.index("--output_dir") + 1] = out
    words += ["--use_ftfy", "True", "--min_sequence_len", "6"]
    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        params = run_job(words)
    finally:
        os.chdir(cwd)
    for path in h5_files(out):
        assert_dataloader_rules(path)
    assert_stats_recount(out, params, _tokenizer_of(params))
    return read_rows(out), read_rows(GOLDEN / case / "out", order=reference_order), params


def _multiset(rows) -> Counter:
    return Counter(r.tobytes() for r in rows)


def test_golden_summarization_hf_same_rows_plus_the_records_that_fit_exactly(tmp_path):
    ours, ref, params = _run_case("summarization_hf", tmp_path)
    extra = _multiset(ours) - _multiset(ref)
    assert not (_multiset(ref) - _multiset(ours)), "every reference row is ours too"
    assert sum(extra.values()) >= 1
    for raw in extra.elements():
        row = np.frombuffer(raw, dtype=np.int32).reshape(3, MSL)
        # total = msl + 1: no padding at all, the last label is EOS, and the last position is trained.
        assert row[2, -1] == EOS and row[1, -1] == 1
    post = params["post-process"]
    assert post["n_examples"] == len(ours) == len(ref) + sum(extra.values())
    assert post["processed_files"] == 300 == post["successful_files"] + post["discarded_files"]
    assert params["input"]["dropped_by_reason"] == {"too_long": post["discarded_files"]}


def test_golden_summarization_sep_neox_really_inserts_sep(tmp_path):
    ours, ref, params = _run_case("summarization_sep_neox", tmp_path)
    sep = params["tokenizer"]["sep_id"]
    assert sep == 8192 and params["post-process"]["vocab_size"] == 8193
    pad = params["post-process"]["pad_id"]
    expected = []
    for r in ref:  # the reference's rows are the no-sep rows (its sep_token was ignored)
        ids = np.concatenate([r[0], r[2, -1:]])
        first_loss = int(np.flatnonzero(r[1])[0])  # the last prompt position
        total = int(np.flatnonzero(r[1])[-1]) + 2
        prompt, completion = ids[:first_loss + 1], ids[first_loss + 1:total - 1]
        new = np.concatenate([prompt, [sep], completion, [EOS]])
        x = np.full(MSL + 1, pad, dtype=np.int32)
        x[:len(new)] = new
        mask = np.zeros(MSL, dtype=np.int32)
        mask[len(prompt):len(new) - 1] = 1  # SPEC §1b step 6: 1 at sep, on the completion, 0 at EOS
        expected.append(np.stack([x[:-1], mask, x[1:]]))
    assert _multiset(ours) == _multiset(expected)
    assert (ours[:, 0, :] == sep).sum(axis=1).tolist() == [1] * len(ours)


def test_bad_records_never_shift_pairs_and_sep_works_with_gpt2(tmp_path):
    """A record missing a key or holding a non-string is dead-lettered; every other record keeps its own pair."""
    import json

    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    src = tmp_path / "in"
    src.mkdir()
    records = [
        {"prompt": "alpha prompt", "completion": " alpha answer"},
        {"prompt": "beta prompt"},                                   # missing completion
        {"prompt": "gamma prompt", "completion": " gamma answer"},
        {"prompt": 7, "completion": " delta answer"},                # not a string
        {"prompt": "epsilon prompt", "completion": " epsilon answer"},
    ]
    (src / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    out = tmp_path / "out"
    params = run_job(["Summarization", "--input_dir", str(src), "--output_dir", str(out),
                      "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(gpt2 / "vocab.bpe"),
                      "--encoder_file", str(gpt2 / "encoder.json"), "--max_seq_length", "32",
                      "--prompt_key", "prompt", "--completion_key", "completion", "--sep_token", "<|sep|>",
                      "--min_sequence_len", "2"])
    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(gpt2 / "vocab.bpe"),
                                               encoder_file=str(gpt2 / "encoder.json"), sep_token="<|sep|>"))
    assert tok.sep_id == 50257 == params["tokenizer"]["sep_id"] and params["post-process"]["vocab_size"] == 50258
    rows = read_rows(out)
    pairs = []
    for r in rows:
        sep_at = int(np.flatnonzero(r[0] == tok.sep_id)[0])
        end = int(np.flatnonzero(r[1])[-1]) + 1
        pairs.append((tok.decode(r[0, :sep_at].tolist()), tok.decode(r[0, sep_at + 1:end].tolist())))
    assert sorted(pairs) == sorted([("alpha prompt", " alpha answer"), ("gamma prompt", " gamma answer"),
                                    ("epsilon prompt", " epsilon answer")])
    inp = params["input"]
    assert inp["bad_by_reason"] == {"missing_key": 1, "not_a_string": 1} and inp["used"] == 3
    dead = [json.loads(line) for path in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    assert sorted((d["line"], d["reason"]) for d in dead) == [(2, "missing_key"), (4, "not_a_string")]
    assert_stats_recount(out, params, tok)
