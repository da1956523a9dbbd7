"""LMData_VSL and Summarization_VSL through the whole job.

Against the reference's golden outputs (../shared/reference/golden-vsl): the
same multiset of document segments, and rows at least as full. Then the job's
promises for 5-feature rows: statistics that equal a recount of the files,
the same bytes however the input is listed or the work is split, shuffle and
file sizing, bad input accounted for, a sep token with every tokenizer type.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers import (GOLDEN_VSL, MULTI_PROCESSING, REFERENCE, RUNNER, SHARED, assert_dataloader_rules,
                           assert_stats_recount, golden_command, h5_files, read_rows, require_shared, run_job)

CASES = ["vsl_lm_gpt2_small_256", "vsl_summ_gpt2_small_256"]
NEOX = REFERENCE / "tokenizer" / "tokenizer.json"
HF = REFERENCE / "tokenizer" / "hf"
GPT2 = REFERENCE / "tokenizer" / "gpt2"


def segments(rows: np.ndarray, inverted: bool = False) -> Counter:
    """Document segments of VSL rows, read back by position ids: (input ids, labels, mask) per segment.

    A row's real part ends after its last trained position (every segment's
    last position is trained in both VSL modes); a segment starts at each
    position id 0 of it.
    """
    out: Counter = Counter()
    for r in rows:
        mask = r[1] ^ 1 if inverted else r[1]
        trained = np.flatnonzero(mask == 1)
        real = int(trained[-1]) + 1 if len(trained) else 0
        starts = np.flatnonzero(r[4, :real] == 0).tolist() + [real]
        for a, b in zip(starts[:-1], starts[1:]):
            out[(tuple(r[0, a:b].tolist()), tuple(r[2, a:b].tolist()), tuple(mask[a:b].tolist()))] += 1
    return out


def positions_of(rows: np.ndarray) -> int:
    return sum(len(ids) * n for (ids, _, _), n in segments(rows).items())


def _digests(out) -> dict:
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest() for p in h5_files(out)}


# ---------------------------------------------------------------- the golden cases


def _our_command(case: str, out: str) -> list[str]:
    words = golden_command(case, GOLDEN_VSL)
    words[words.index("--output_dir") + 1] = out
    return words


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """Each golden case run once, from the reference directory (its paths are relative to it)."""
    require_shared(GOLDEN_VSL)
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


@pytest.mark.parametrize("case", CASES)
def test_segments_equal_the_references(golden, case):
    out, params = golden(case)
    ref_rows = read_rows(GOLDEN_VSL / case / "out")
    ours = read_rows(out)
    assert ours.shape[1:] == ref_rows.shape[1:] == (5, 256)
    assert segments(ours) == segments(ref_rows)
    for path in h5_files(out):
        assert_dataloader_rules(path, features=5)


@pytest.mark.parametrize("case", CASES)
def test_rows_are_fuller_than_the_references_and_near_the_bound(golden, case):
    out, params = golden(case)
    ref_rows = read_rows(GOLDEN_VSL / case / "out")
    ours = read_rows(out)
    positions = positions_of(ours)
    bound = math.ceil(positions / 256)
    assert len(ours) <= max(bound + 2, math.floor(bound * 1.01)), (len(ours), bound)
    assert len(ours) < len(ref_rows)
    assert params["post-process"]["n_examples"] == len(ours)


@pytest.mark.parametrize("case", CASES)
def test_statistics_equal_a_recount_and_the_references_counts(golden, case):
    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    out, params = golden(case)
    with open(GOLDEN_VSL / case / "out" / "data_params.json") as f:
        ref = json.load(f)
    proc = params["processing"]
    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        tok = build_tokenizer(read_tokenizer_files(proc["tokenizer_type"], vocab_file=proc["vocab_file"],
                                                   encoder_file=proc["encoder_file"],
                                                   sep_token=params["dataset"].get("sep_token")))
    finally:
        os.chdir(cwd)
    assert_stats_recount(out, params, tok)
    post = params["post-process"]
    for key in ("processed_files", "discarded_files", "successful_files", "raw_chars_count", "raw_bytes_count",
                "eos_id", "pad_id", "vocab_size"):
        assert post[key] == ref["post-process"][key], key
    # The same trained positions as the reference's rows (which count no padding without inverted_mask).
    assert post["loss_valid_tokens"] == ref["h5_dataset_stats"]["loss_valid_tokens"]
    assert post["num_sequences_before_packing"] == sum(segments(read_rows(GOLDEN_VSL / case / "out")).values())
    assert params["setup"]["dataset_processor"] == ref["setup"]["dataset_processor"]


# ---------------------------------------------------------------- settings and determinism


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """en_small_pd in 6 files, plus prompt/completion pairs cut from it."""
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    require_shared(NEOX)
    root = tmp_path_factory.mktemp("vsl_corpus")
    lines = src.read_text().splitlines(keepends=True)
    (root / "lm").mkdir()
    for i in range(6):
        (root / "lm" / f"part_{i}.jsonl").write_text("".join(lines[i::6]))
    (root / "pairs").mkdir()
    with open(root / "pairs" / "pairs.jsonl", "w") as f:
        for line in lines:
            text = json.loads(line)["text"]
            cut = len(text) // 3
            f.write(json.dumps({"prompt": text[:cut][:600], "completion": text[cut:][:300]}) + "\n")
    return root


def _lm(input_dir, out, *extra) -> list[str]:
    return ["LMData_VSL", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type",
            "NeoXTokenizer", "--encoder_file", str(NEOX), "--max_seq_length", "128", *extra]


def test_shuffle_and_file_sizes_keep_every_row(corpus, tmp_path):
    plain = run_job(_lm(corpus / "lm", tmp_path / "plain", "--files_per_record", "100"))
    shuffled = run_job(_lm(corpus / "lm", tmp_path / "shuffled", "--files_per_record", "100", "--shuffle", "True",
                           "--shuffle_seed", "3"))
    even = run_job(_lm(corpus / "lm", tmp_path / "even", "--num_output_files", "7"))
    rows = read_rows(tmp_path / "plain")
    assert len(rows) > 500
    sizes = list(plain["files"].values())
    assert sizes[:-1] == [100] * (len(sizes) - 1) and 0 < sizes[-1] <= 100
    assert list(shuffled["files"].values()) == sizes
    base, extra = divmod(len(rows), 7)
    assert list(even["files"].values()) == [base + 1] * extra + [base] * (7 - extra)
    moved = read_rows(tmp_path / "shuffled")
    assert Counter(r.tobytes() for r in moved) == Counter(r.tobytes() for r in rows)
    assert not np.array_equal(moved, rows)
    assert np.array_equal(read_rows(tmp_path / "even"), rows)
    for params in (shuffled, even):
        assert params["post-process"] == plain["post-process"]
    for path in h5_files(tmp_path / "plain"):
        assert_dataloader_rules(path, features=5)


def test_listing_order_does_not_change_a_byte(corpus, tmp_path):
    files = sorted(str(p) for p in (corpus / "lm").glob("*.jsonl"))
    digests = []
    for name, order in (("sorted", files), ("reversed", files[::-1]), ("mixed", files[1::2] + files[::2])):
        meta = tmp_path / f"{name}.txt"
        meta.write_text("\n".join(order) + "\n")
        args = _lm(corpus / "lm", tmp_path / name, "--short_seq_prob", "0.2", "--files_per_record", "300")
        args[args.index("--input_dir"):args.index("--input_dir") + 2] = ["--metadata_files", str(meta)]
        run_job(args)
        digests.append(_digests(tmp_path / name))
    assert len(digests[0]) >= 2 and digests[0] == digests[1] == digests[2]


@pytest.fixture(scope="module")
def split_inputs(corpus, tmp_path_factory) -> Path:
    """A .jsonl of ~2.3 MB (three packing groups of 1 MiB) and a .jsonl.zst: both shared out in work units."""
    import zstandard

    root = tmp_path_factory.mktemp("vsl_split")
    data = b"".join((corpus / "lm" / f"part_{i}.jsonl").read_bytes() for i in range(6))
    (root / "a.jsonl").write_bytes(data)
    (root / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    return root


def _split_run(inputs: Path, out: Path, runner: list[str], **plan_changes) -> dict:
    from pipelines.config import load_config
    from pipelines.job import run

    argv = _lm(inputs, out, "--packing_group_mb", "1", "--files_per_record", "500", "--shuffle", "True",
               "--short_seq_prob", "0.1") + runner
    config, beam_args = load_config(argv)
    return run(config, beam_args, plan_changes)


@pytest.fixture(scope="module")
def split_reference(split_inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("vsl_split_ref")
    params = _split_run(split_inputs, out, RUNNER, unit_groups=1, fan_out_bytes=0)
    return params, _digests(out)


def test_output_does_not_depend_on_how_the_work_is_split(split_inputs, split_reference, tmp_path):
    params, digests = split_reference
    assert len(digests) >= 3 and params["input"]["files"] == 2
    again = _split_run(split_inputs, tmp_path / "out", RUNNER, unit_groups=2, fan_out_bytes=None)
    assert _digests(tmp_path / "out") == digests
    assert again["post-process"] == params["post-process"]


@pytest.mark.worker_processes
def test_output_of_two_worker_processes_is_the_same(split_inputs, split_reference, tmp_path):
    params, digests = split_reference
    _split_run(split_inputs, tmp_path / "out", MULTI_PROCESSING + ["--direct_num_workers", "2"],
               unit_groups=1000, fan_out_bytes=10 << 20)
    assert _digests(tmp_path / "out") == digests


def test_bad_input_and_every_drop_reason_are_accounted_for(tmp_path):
    require_shared(NEOX)
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = ["word " * 3, "word " * 40, "word " * 400, "x"]  # fits; fits; longer than msl + 1; too short
    lines = [json.dumps({"text": t}) for t in good] + ['{"text": broken', "", '{"other": 1}', '{"text": null}']
    (inputs / "a.jsonl").write_text("\n".join(lines) + "\n")
    params = run_job(_lm(inputs, tmp_path / "out", "--fold_long_doc", "False", "--min_sequence_len", "3"))
    inp = params["input"]
    assert inp["documents_read"] == 8 and inp["bad"] == 4 and inp["used"] == 2
    assert inp["dropped_by_reason"] == {"longer_than_max_seq_length": 1, "shorter_than_min_sequence_len": 1}
    letters = [json.loads(x) for p in (tmp_path / "out" / "dead_letter").iterdir() for x in p.read_text().split("\n")
               if x]
    assert sorted(r["line"] for r in letters) == [5, 6, 7, 8]
    assert params["dataset"]["fold_long_doc"] is False
    folded = run_job(_lm(inputs, tmp_path / "folded", "--min_sequence_len", "3"))
    assert folded["input"]["used"] == 3 and folded["input"]["dropped_by_reason"] == {
        "shorter_than_min_sequence_len": 1}


@pytest.mark.parametrize("tokenizer", ["GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer"])
def test_summarization_vsl_inserts_sep_with_every_tokenizer_type(corpus, tmp_path, tokenizer):
    flags = {"GPT2Tokenizer": ["--vocab_file", str(GPT2 / "merges.txt"), "--encoder_file", str(GPT2 / "vocab.json")],
             "NeoXTokenizer": ["--encoder_file", str(NEOX)],
             "HuggingFaceTokenizer": ["--huggingface_tokenizer", str(require_shared(HF))]}[tokenizer]
    params = run_job(["Summarization_VSL", "--input_dir", str(corpus / "pairs"), "--output_dir", str(tmp_path / "o"),
                      "--tokenizer_type", tokenizer, *flags, "--max_seq_length", "512", "--prompt_key", "prompt",
                      "--completion_key", "completion", "--sep_token", "<sep>"])
    sep = params["tokenizer"]["sep_id"]
    assert sep is not None and params["post-process"]["vocab_size"] > sep
    rows = read_rows(tmp_path / "o")
    segs = segments(rows)
    assert sum(segs.values()) == params["input"]["used"] > 400
    for (ids, labels, mask), _ in segs.items():
        first = mask.index(1)
        # The sep position carries the first loss: its label is the completion's first token.
        assert ids[first] == sep and labels[first - 1] == sep and all(mask[first:]) and not any(mask[:first])
        assert labels[-1] == params["post-process"]["eos_id"]


def test_summarization_vsl_truncate_flag_cuts_the_prompt_first(corpus, tmp_path):
    """`--truncate keep_end` (the CLI form of 2.10's truncate_to_msl): pairs over msl positions are cut to msl
    positions, ending in their EOS label, instead of dropped; `verify` passes the rows."""
    from pipelines.tools import verify_dataset

    def job(out, *extra):
        return run_job(["Summarization_VSL", "--input_dir", str(corpus / "pairs"), "--output_dir", str(out),
                        "--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(NEOX), "--max_seq_length", "128",
                        "--prompt_key", "prompt", "--completion_key", "completion", "--min_sequence_len", "2",
                        *extra])

    dropped = job(tmp_path / "dropped")["input"]
    assert dropped["dropped_by_reason"].get("too_long", 0) > 50, dropped
    params = job(tmp_path / "cut", "--truncate", "keep_end")
    assert params["dataset"]["truncate"] == "keep_end"
    assert params["input"]["used"] == dropped["used"] + dropped["dropped_by_reason"]["too_long"]
    assert "too_long" not in params["input"]["dropped_by_reason"]
    result = verify_dataset(str(tmp_path / "cut"))
    assert result.ok, result.problems
    segs = segments(read_rows(tmp_path / "cut"))
    assert sum(segs.values()) == params["input"]["used"]
    full = [key for key in segs for _ in range(segs[key]) if len(key[0]) == 128]  # exactly msl positions
    assert len(full) >= dropped["dropped_by_reason"]["too_long"]
    assert all(labels[-1] == params["post-process"]["eos_id"] and mask[-1] == 1 for _, labels, mask in full)


# ---------------------------------------------------------------- the tools on what the job wrote


def test_verify_inspect_and_the_reader_on_the_jobs_output(corpus, tmp_path):
    import shutil

    from pipelines.tools import inspect_row, verify_dataset
    from transforms.io.dataset import H5Dataset

    out = tmp_path / "out"
    params = run_job(_lm(corpus / "lm", out, "--short_seq_prob", "0.3", "--files_per_record", "400",
                         "--params", str(_yaml(tmp_path, "dataset:\n  inverted_mask: True\n"))))
    result = verify_dataset(str(out))
    assert result.ok, result.lines()
    assert not result.notes, result.notes
    text = inspect_row(str(out), row=3)
    assert "LMData_VSL" in text and "── document 1/" in text

    ds = H5Dataset(str(out), batch_size=16)
    batch = next(iter(ds))
    assert list(batch) == ["input_ids", "attention_mask", "labels", "attention_span", "position_ids"]
    assert batch["position_ids"].shape == (16, 128)
    assert sum(1 for _ in H5Dataset(str(out))) == params["post-process"]["n_examples"]

    # One wrong label inside a document, written back with the file's own layout: verify names it.
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    first = h5_files(broken)[0]
    with h5py.File(first, "r") as f:
        rows = f["data"][()]
    inside = int(np.flatnonzero(rows[5, 4, 1:] == rows[5, 4, :-1] + 1)[0])  # position p and p + 1: one document
    rows[5, 2, inside] = (rows[5, 2, inside] + 1) % 1000
    from transforms.io.hdf5_format import write_shard

    write_shard(first, rows)
    result = verify_dataset(str(broken))
    assert not result.ok
    assert any("labels are not input_ids shifted by one inside each document" in p and "row 5" in p
               for p in result.problems), result.problems


def _yaml(tmp_path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path
