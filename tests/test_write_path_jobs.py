"""The write path through whole jobs, in process: where a shuffled job puts every row, and its data_params.json.

The shuffled job is checked row by row against an independent statement of the rule (transforms/core/sharding.py's
description, the README's "Shuffle"): groups in input order, each row keyed by `row_keys(shuffle_seed, group name,
row index)`, the output in (key, group, row) order, cut into files of `files_per_record` rows. Each input file is
one packing group whose documents use a word of their own, so a row says which group it came from; the unshuffled
job gives each group's rows in order, so a row's index in its group is known too.
"""

from __future__ import annotations

import json
from collections import defaultdict

import h5py
import numpy as np
import pytest

from tests.helpers import ROOT, h5_files, read_rows, run_job
from transforms.core.records import GroupId
from transforms.core.sharding import row_keys
from transforms.core.tokenizer import build_tokenizer
from transforms.io.manifest import STAGES
from transforms.io.tokenizer_files import read_tokenizer_files

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
WORDS = ("apple", "river", "stone", "cloud", "green")
DOCS = (13, 40, 7, 25, 31)  # documents per file: groups of different sizes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for k, (word, n) in enumerate(zip(WORDS, DOCS)):
        with open(root / f"part_{k}.jsonl", "w") as f:
            for j in range(n):
                f.write(json.dumps({"text": " ".join(f"{word} {j}.{m}" for m in range(3 + j % 5))}) + "\n")
    return root


@pytest.fixture(scope="module")
def plain(corpus, tmp_path_factory):
    """An ordinary job: no shuffle, no resume; (output directory, data_params.json)."""
    out = tmp_path_factory.mktemp("plain") / "out"
    return out, run_job(_args(corpus, out))


def _args(corpus, out, *extra) -> list[str]:
    return ["LMData", "--input_dir", str(corpus), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "24", *extra]


def _group_of(row: np.ndarray, tok) -> int:
    text = tok.decode(row[0].tolist())
    (k,) = [k for k, w in enumerate(WORDS) if w in text]
    return k


def test_a_shuffled_job_puts_every_row_where_the_layout_rule_says(corpus, plain, tmp_path):
    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                               encoder_file=str(GPT2 / "encoder.json")))
    by_group = defaultdict(list)  # group -> its rows, in group order (the unshuffled output is in input order)
    for row in read_rows(plain[0]):
        by_group[_group_of(row, tok)].append(row)
    assert sorted(by_group) == list(range(len(WORDS)))
    assert [len(by_group[k]) for k in range(len(WORDS))] != [len(by_group[0])] * len(WORDS)

    seed, per_file = 7, 20
    params = run_job(_args(corpus, tmp_path / "shuffled", "--shuffle", "True", "--shuffle_seed", str(seed),
                           "--files_per_record", str(per_file)))
    # Where each row must go: one key per (group, row index), the group's name being its file's relative path
    # and slice (one slice: a small file is one group).
    names = [GroupId(k, 0, str(corpus / f"part_{k}.jsonl"), f"part_{k}.jsonl").name for k in range(len(WORDS))]
    order = sorted(((int(key), k, i) for k in by_group
                    for i, key in enumerate(row_keys(seed, names[k], np.arange(len(by_group[k]))))))
    expected = np.stack([by_group[k][i] for _, k, i in order])

    files = h5_files(tmp_path / "shuffled")
    sizes = []
    for f in files:
        with h5py.File(f, "r") as h:
            sizes.append(int(h.attrs["n_examples"]))
    total = len(expected)
    assert sizes == [per_file] * (total // per_file) + ([total % per_file] if total % per_file else [])
    assert list(params["files"].values()) == sizes
    got = read_rows(tmp_path / "shuffled")
    assert [_group_of(r, tok) for r in got] == [k for _, k, _ in order]  # every row in its group's place
    assert np.array_equal(got, expected)  # and the very row of that place


def _check_run_section(run: dict) -> None:
    assert {"started_at", "beam_version", "beam_options", "shuffle_strategy", "stage_seconds"} <= set(run)
    stages = run["stage_seconds"]
    assert {"read", "tokenize", "pack", "encode", "write"} <= set(stages)
    assert set(stages) <= set(STAGES)
    assert all(isinstance(v, float | int) and v >= 0 for v in stages.values())
    assert "groups_resumed" not in run  # nothing was resumed


def test_an_ordinary_job_records_its_run(plain):
    _check_run_section(plain[1]["run"])
