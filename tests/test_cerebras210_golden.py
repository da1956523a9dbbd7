"""Against the real Cerebras 2.10 code: the three cases of shared/reference/golden-2.10, run from their own
configs (`create_hdf5_dataset --config`). COMPAT.md ("Cerebras 2.10 configs") says, per mode, which rows are
2.10's and which differ, and why; these tests check each claim on 2.10's own output.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers import REFERENCE, RUNNER, read_rows, require_shared

GOLDEN_210 = REFERENCE / "golden-2.10"


def _golden_rows(case: str) -> np.ndarray:
    """2.10's rows in the order it wrote them: output_chunk_{process}_{chunk}, then the *_prefix.h5 leftover."""
    out = GOLDEN_210 / case / "out"
    numbered = sorted(glob.glob(str(out / "output_chunk_*_[0-9]*.h5")),
                      key=lambda p: tuple(int(x) for x in Path(p).stem.split("_")[2:]))
    files = numbered + sorted(glob.glob(str(out / "*_prefix.h5")))
    return np.concatenate([h5py.File(f, "r")["data"][()] for f in files])


_RUNS: dict = {}


def _run(case: str, tmp_path: Path) -> tuple[dict, Path]:
    """Our job on the case's config as 2.10 ran it (paths relative to shared/reference), output elsewhere; run
    once per case for the whole module (the tests only read it)."""
    if case not in _RUNS:
        _RUNS[case] = _run_once(case, tmp_path)
    return _RUNS[case]


def _run_once(case: str, tmp_path: Path) -> tuple[dict, Path]:
    from pipelines.create_hdf5_dataset import main

    require_shared(GOLDEN_210)
    out = tmp_path / "out"
    cwd = os.getcwd()
    os.chdir(REFERENCE)
    try:
        assert main(["--config", f"golden-2.10/{case}/config.yaml", "--output_dir", str(out), *RUNNER]) == 0
    finally:
        os.chdir(cwd)
    return json.loads((out / "data_params.json").read_text()), out


def _stream(rows: np.ndarray, overlapping: bool) -> np.ndarray:
    """The token stream of packed LM rows: 2.10's windows are msl + 1 apart (`overlapping` False), ours msl."""
    parts = []
    for k, row in enumerate(rows):
        n = int(row[1].sum())  # loss 1 on every real position (no inverted mask)
        last = k == len(rows) - 1
        parts.append(row[0][:n] if overlapping and not last else np.concatenate([row[0][:n], row[2][n - 1:n]]))
    return np.concatenate(parts)


def test_lm_same_documents_and_tokens_eos_rules_differ(tmp_path):
    """pretraining + text_read_hook: the same 457 documents, stripped as 2.10's hook strips them, give the same
    tokens in the same order. Ours puts an EOS after each document (2.1.1's rows); 2.10 puts none between
    documents, overwrites one real token of each document with EOS, and loses a token at a few document ends
    (a character cut between byte tokens). Nothing else differs."""
    params, out = _run("lm_gpt2_en_small_pd_512", tmp_path)
    eos = params["processing"]["eos_id"]
    ours = _stream(read_rows(out), overlapping=True)
    theirs = _stream(_golden_rows("lm_gpt2_en_small_pd_512"), overlapping=False)
    assert params["input"]["used"] == params["input"]["documents_read"] == 457
    assert params["post-process"]["n_examples"] == len(read_rows(out))
    # Our stream without our EOS, and where each document ends in it.
    is_eos = ours == eos
    assert int(is_eos.sum()) == 457
    last_tokens = set((np.flatnonzero(is_eos) - np.arange(1, 458)).tolist())
    ours = ours[~is_eos]

    def agree(i: int, j: int, n: int = 8) -> bool:  # the next tokens match, but where 2.10 wrote an EOS
        a, b = ours[i:i + n], theirs[j:j + n]
        return len(a) == len(b) and bool(((a == b) | (b == eos)).all())

    i = j = 0
    overwritten, lost = 0, []
    while i < len(ours) and j < len(theirs):
        if ours[i] == theirs[j]:
            i, j = i + 1, j + 1
        elif theirs[j] == eos and agree(i + 1, j + 1):
            overwritten, i, j = overwritten + 1, i + 1, j + 1
        else:  # a token 2.10 does not have: it must be the last of a document
            assert i in last_tokens, f"tokens differ at {i} (ours) / {j} (2.10), not at a document end"
            lost.append(i)
            i += 1
    assert i == len(ours) and j >= len(theirs) - 1, (i, len(ours), j, len(theirs))  # 2.10 ends with its own EOS
    assert overwritten == 457  # one per document
    assert len(lost) == 7


def test_chat_rows_equal_2_10(tmp_path):
    """finetuning + chat_read_hook on Qwen2.5's template: the same 156 conversations kept (144 too long for
    msl 512 dropped, as 2.10 drops them), and every row byte-equal to 2.10's: ids, labels and loss mask."""
    params, out = _run("chat_qwen25_kto_multiturn_512", tmp_path)
    theirs = _golden_rows("chat_qwen25_kto_multiturn_512")
    ours = read_rows(out)
    assert params["input"]["used"] == 156 and params["input"]["dropped_by_reason"] == {"too_long": 144}
    assert ours.shape == theirs.shape == (156, 3, 512)
    np.testing.assert_array_equal(ours, theirs)


def test_chat_statistics_count_the_template_tail(tmp_path):
    """2.10's loss span keeps Qwen's final newline as an untrained label after <|im_end|>: a real position, which
    the statistics count as 2.10 counts it (num_pad_tokens equal), and verify accepts the rows."""
    from pipelines.tools.verify import verify_dataset

    params, out = _run("chat_qwen25_kto_multiturn_512", tmp_path)
    theirs = json.loads((GOLDEN_210 / "chat_qwen25_kto_multiturn_512" / "out" / "data_params.json").read_text())
    rows = read_rows(out)
    real = int((rows[:, 2, :] != params["processing"]["pad_id"]).sum())  # every real label, the tail's too
    assert params["post-process"]["num_pad_tokens"] == theirs["post-process"]["num_pad_tokens"] == rows[:, 0].size - real
    assert params["h5_dataset_stats"]["non_pad_tokens"] == real
    assert verify_dataset(str(out)).ok


def _vsl_segments(rows: np.ndarray, pad: int) -> list[tuple]:
    """Each conversation of VSL rows as (input_ids, mask, labels) tuples: the real part cut at position_ids 0."""
    out = []
    for row in rows:
        real = int(np.flatnonzero(row[2] != pad)[-1]) + 1
        starts = [int(p) for p in np.flatnonzero(row[4][:real] == 0)] + [real]
        for a, b in zip(starts, starts[1:]):
            out.append(tuple(row[f][a:b].tobytes() for f in (0, 1, 2)))
    return out


def test_chat_vsl_from_a_2_10_config_holds_2_10s_conversations(tmp_path):
    """The chat case with `dataset.use_vsl: True` (2.10's VSL finetuning): the same 156 conversations, each a
    segment equal to its 2.10 row's real part (ids, mask, labels; ours shift per conversation, so no label
    crosses into the next one), packed into fewer rows that verify accepts, with exact VSL statistics."""
    import yaml

    from pipelines.create_hdf5_dataset import main
    from pipelines.tools.verify import verify_dataset

    require_shared(GOLDEN_210)
    config = yaml.safe_load((GOLDEN_210 / "chat_qwen25_kto_multiturn_512" / "config.yaml").read_text())
    config["dataset"]["use_vsl"] = True
    case = REFERENCE / "golden-2.10" / "chat_qwen25_kto_multiturn_512"
    config["setup"]["data"]["source"] = str(case / "input")
    config["processing"]["huggingface_tokenizer"] = str(REFERENCE.parent / "tokenizers" / "qwen2.5-instruct")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    assert main(["--config", str(path), "--output_dir", str(out), *RUNNER]) == 0
    params = json.loads((out / "data_params.json").read_text())
    pad = params["processing"]["pad_id"]
    rows = read_rows(out)
    assert rows.shape[1:] == (5, 512) and len(rows) < 156
    theirs = _golden_rows("chat_qwen25_kto_multiturn_512")
    expected = []
    for row in theirs:
        real = int(np.flatnonzero(row[2] != pad)[-1]) + 1
        expected.append(tuple(row[f][:real].tobytes() for f in (0, 1, 2)))
    assert sorted(_vsl_segments(rows, pad)) == sorted(expected)
    post = params["post-process"]
    assert post["num_sequences_before_packing"] == 156
    assert post["vsl_packing_factor"] == round(156 / len(rows), 4)
    real = sum(len(e[0]) for e in expected) // theirs.itemsize  # 2.10's real positions, the tails' too
    assert params["h5_dataset_stats"]["non_pad_tokens"] == real
    assert post["num_pad_tokens"] == len(rows) * 512 - real
    result = verify_dataset(str(out))
    assert result.ok, result.problems


def _human_turns(transcript: str) -> list[str]:
    import ftfy  # the config's use_ftfy

    return [ftfy.fix_text(part.split("\n\nAssistant:")[0]).strip() for part in transcript.split("\n\nHuman:")[1:]]


def test_dpo_same_records_but_where_2_10_writes_no_signal(tmp_path):
    """dpo + dpo_read_hook on HH-RLHF transcripts. 2.10 writes a row for each of the 1000 pairs; ours for 985:
    12 whose prompt alone fills the row (2.10's rows for them have no response label at all, loss only on a
    pad label) are dropped as too_long, and 3 with an empty response are dead letters (2.10 trains on them).
    The rows themselves differ on purpose (COMPAT.md): the transcript's turns become the conversation's turns
    (2.10 puts the whole transcript in one user message), and the mask has no 1 on a pad label."""
    params, out = _run("dpo_qwen25_hh_rlhf_512", tmp_path)
    theirs = _golden_rows("dpo_qwen25_hh_rlhf_512")
    pad = params["processing"]["pad_id"]
    assert len(theirs) == 1000
    no_signal = [k for k in range(1000) if not (theirs[k, 2] != pad).any() or not (theirs[k, 5] != pad).any()]
    assert len(no_signal) == 12
    letters = [json.loads(line) for f in glob.glob(str(out / "dead_letter" / "*.jsonl")) for line in open(f)]
    empty = sorted(d["line"] - 1 for d in letters)  # dead letters number lines from 1
    assert [d["reason"] for d in letters] == ["empty_content"] * 3
    assert params["input"]["dropped_by_reason"] == {"too_long": 12} and params["input"]["used"] == 985
    source = GOLDEN_210 / "dpo_qwen25_hh_rlhf_512" / "input" / "hh_rlhf_harmless_base_test_first1000.jsonl"
    records = [json.loads(line) for line in source.read_text().splitlines()]
    for line in empty:  # an empty response after the last "Assistant:" on one side
        r = records[line]
        assert any(not side[side.rfind("\n\nAssistant:") + len("\n\nAssistant:"):].strip()
                   for side in (r["chosen"], r["rejected"])), line
    kept = [k for k in range(1000) if k not in set(no_signal) | set(empty)]
    ours = read_rows(out)
    assert len(ours) == len(kept) == 985
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(REFERENCE.parent / "tokenizers" / "qwen2.5-instruct" / "tokenizer.json"))
    for row, k in zip(ours, kept):  # our row k is record k: its human turns, in order, are the row's user turns
        text = tok.decode([int(x) for x in row[0] if x != pad], skip_special_tokens=False)
        users = [u.split("<|im_end|>")[0].strip() for u in text.split("<|im_start|>user\n")[1:]]
        assert users == _human_turns(records[k]["chosen"]), k


@pytest.mark.parametrize("case", ["lm_gpt2_en_small_pd_512", "chat_qwen25_kto_multiturn_512",
                                  "dpo_qwen25_hh_rlhf_512"])
def test_data_params_has_what_2_10_tools_read(case, tmp_path):
    """2.10's keys: `features`, processing.{pad_id, eos_id, vocab_size} resolved, and the config as given."""
    params, _ = _run(case, tmp_path)
    theirs = json.loads((GOLDEN_210 / case / "out" / "data_params.json").read_text())
    assert params["features"] == theirs["features"]
    for key in ("pad_id", "eos_id", "vocab_size"):
        assert params["processing"][key] == theirs["processing"][key], key
    for section in ("setup", "processing", "dataset"):
        for key, value in theirs[section].items():
            if key in ("output_dir", "pad_id", "eos_id", "vocab_size"):
                continue
            assert params[section][key] == value, f"{section}.{key}"
