"""The tools on Chat, Chat_VSL and DPO datasets: `verify` accepts good rows and names each broken invariant with its
row (and DPO side), `inspect` shows the trained spans and the DPO sides, `report` builds, and the reader yields the
features by name.

Hand-made datasets are rows built here from token lists by the contract (transforms/core/chat/rows.py,
transforms/core/vsl.py, transforms/core/chat/dpo.py), not by the pipeline's builders, written with `write_shard`
beside a hand-written data_params.json; real outputs come from the CLI run in-process with the Qwen2.5 chat
tokenizer of ../shared.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pipelines.create_hdf5_dataset import main
from pipelines.tools import inspect_row, verify_dataset
from tests.helpers import (SHARD, SHARED, assert_verifies_without_a_tokenizer, require_shared, run_job, set_value,
                           verify_problems, write_dataset)
from transforms.core import verify as V
from transforms.core.features import DPO_FEATURES, LM_FEATURES, VSL_FEATURES
from transforms.io.dataset import H5Dataset
from transforms.io.hdf5_format import write_shard

EOS, PAD, VOCAB = 50, 99, 100  # EOS: the end-of-turn token
QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
_PROCESSORS = {"Chat": "ChatPreprocessor", "Chat_VSL": "VSLChatPreprocessor", "DPO": "DPOPreprocessor"}
_FEATURES = {"Chat": LM_FEATURES, "Chat_VSL": VSL_FEATURES, "DPO": DPO_FEATURES}


# ------------------------------------------------------------------------------------ rows by the contract


def _chat_row(tokens: list[int], trained: list[int], msl: int) -> np.ndarray:
    """[3, msl]: input_ids T[:-1], labels T[1:], mask W[1:], then padding."""
    n = len(tokens) - 1
    row = np.zeros((3, msl), dtype=np.int32)
    row[0] = row[2] = PAD
    row[0, :n], row[2, :n], row[1, :n] = tokens[:-1], tokens[1:], trained[1:]
    return row


def _vsl_row(conversations: list[tuple[list[int], list[int]]], msl: int) -> np.ndarray:
    """[5, msl]: each conversation (tokens, trained) as a segment of len(tokens) - 1 positions."""
    row = np.zeros((5, msl), dtype=np.int32)
    row[0] = row[2] = PAD
    at = 0
    for tokens, trained in conversations:
        n = len(tokens) - 1
        row[:3, at:at + n] = _chat_row(tokens, trained, n)
        row[3, at:at + n] = np.arange(n - 1, -1, -1)
        row[4, at:at + n] = np.arange(n)
        at += n
    return row


def _dpo_row(prompt: list[int], chosen: list[int], rejected: list[int], msl: int,
             rejected_prompt: list[int] | None = None) -> np.ndarray:
    """[6, msl]: per side S = P + R unshifted, labels R on positions |P|-1 .. |S|-2 (the mask's one run)."""
    row = np.zeros((6, msl), dtype=np.int32)
    for k, (p, r) in enumerate(((prompt, chosen), (rejected_prompt or prompt, rejected))):
        s = p + r
        ids, mask, labels = row[3 * k], row[3 * k + 1], row[3 * k + 2]
        ids[:] = labels[:] = PAD
        ids[:len(s)] = s
        labels[len(p) - 1:len(s) - 1] = r
        mask[len(p) - 1:len(s) - 1] = 1
    return row


# Two assistant turns (two trained runs); a short conversation; one of exactly msl + 1 tokens.
CHAT_ROWS = np.stack([
    _chat_row([1, 2, 3, 11, 12, EOS, 4, 5, 13, EOS], [0, 0, 0, 1, 1, 1, 0, 0, 1, 1], 10),
    _chat_row([1, 3, 14, 15, EOS], [0, 0, 1, 1, 1], 10),
    _chat_row([1, 2, 3, 4, 5, 6, 7, 16, 17, 18, EOS], [0] * 7 + [1] * 4, 10),
])
# Two conversations in row 0, one of two assistant turns in row 1.
CHAT_VSL_ROWS = np.stack([
    _vsl_row([([1, 2, 11, 12, EOS], [0, 0, 1, 1, 1]), ([3, 13, EOS], [0, 1, 1])], 10),
    _vsl_row([([1, 11, EOS, 2, 3, 12, EOS], [0, 1, 1, 0, 0, 1, 1])], 10),
])
# A three-token prompt; a one-token prompt; a row whose sides fill it (|S| = msl, the last label padding).
DPO_ROWS = np.stack([
    _dpo_row([1, 2, 3], [11, EOS], [12, 13, EOS], 8),
    _dpo_row([4], [14, 15, 16, EOS], [EOS], 8),
    _dpo_row([5, 6], [17, 18, 19, 20, 21, EOS], [22, EOS], 8),
])
ROWS = {"Chat": CHAT_ROWS, "Chat_VSL": CHAT_VSL_ROWS, "DPO": DPO_ROWS}


def test_the_hand_made_rows_follow_the_contract():
    """The DPO docstring's example layout; Chat's shift; a side's real length is its last trained position + 2."""
    chosen = DPO_ROWS[0, :3]
    assert chosen.tolist() == [[1, 2, 3, 11, EOS, PAD, PAD, PAD], [0, 0, 1, 1, 0, 0, 0, 0],
                               [PAD, PAD, 11, EOS, PAD, PAD, PAD, PAD]]
    assert CHAT_ROWS[0, 2, :8].tolist() == CHAT_ROWS[0, 0, 1:9].tolist()
    spec = V.DatasetSpec("DPO", V.OURS, False, 8, VOCAB, EOS, PAD, DPO_FEATURES)
    seqs = V.sequences(DPO_ROWS, spec)
    assert seqs.shape == (6, 3, 8) and (seqs[1] == DPO_ROWS[0, 3:]).all()  # row 0's rejected side
    assert V.real_lengths(seqs, spec).tolist() == [5, 6, 5, 2, 8, 4]


# ---------------------------------------------------------------------------------------- data_params.json


def _params(mode: str, rows: np.ndarray, *, inverted: bool = False) -> dict:
    """data_params.json as the pipeline writes it for these rows (statistics as the contract defines them)."""
    n, _, msl = rows.shape
    sides = 2 if mode == "DPO" else 1
    seqs = rows.reshape(n * sides, 3, msl) if mode == "DPO" else rows
    trained = seqs[:, 1] == (0 if inverted else 1)
    ends = [int(np.flatnonzero(t)[-1]) + (2 if mode == "DPO" else 1) if t.any() else 0 for t in trained]
    loss, real, tokens = int(trained.sum()), sum(ends), n * sides * msl
    post = {"n_examples": n, "num_tokens": tokens, "loss_valid_tokens": loss, "num_masked_tokens": tokens - loss,
            "num_pad_tokens": tokens - real, "eos_id": EOS, "pad_id": PAD, "vocab_size": VOCAB,
            "processed_files": n, "discarded_files": 0, "successful_files": n}
    docs = n
    if mode == "Chat_VSL":
        docs = sum(int((r[4, :e] == 0).sum()) for r, e in zip(rows, ends))
        post.update(num_sequences_before_packing=docs, vsl_packing_factor=round(docs / n, 4))
        post.update(processed_files=docs, successful_files=docs)
    dataset = {"inverted_mask": inverted, "role_key": "role", "content_key": "content"}
    if mode == "DPO":
        dataset.update(prompt_key="prompt", chosen_key="chosen", rejected_key="rejected", max_prompt_length=512)
    else:
        dataset.update(messages_key="messages", train_on_all_assistant_turns=True, truncate=None)
    return {
        "setup": {"mode": mode, "dataset_processor": _PROCESSORS[mode]},
        "processing": {"max_seq_length": msl, "eos_id": None, "pad_id": None, "chat_template": None},
        "dataset": dataset,
        "features": list(_FEATURES[mode]),
        "post-process": post,
        "h5_dataset_stats": {"num_sequences": n, "num_tokens": tokens, "loss_valid_tokens": loss,
                             "non_pad_tokens": real, "detokenized_chars": 0, "detokenized_bytes": 0},
        "files": {SHARD: n},
        "input": {"documents_read": docs, "good": docs, "bad": 0, "used": docs, "dropped": 0},
    }


def _dataset(path, mode: str, rows: np.ndarray, params: dict | None = None, **options):
    return write_dataset(path, rows, params if params is not None else _params(mode, rows, **options))


_problems = verify_problems


# ------------------------------------------------------------------------------------------- good datasets


@pytest.mark.parametrize("mode", list(ROWS))
@pytest.mark.parametrize("inverted", [False, True])
def test_verify_passes_on_good_rows(tmp_path, capsys, mode, inverted):
    rows = ROWS[mode].copy()
    if inverted:  # every mask row flips, padding included
        for k in range(rows.shape[1] // 3 if mode == "DPO" else 1):
            rows[:, 3 * k + 1] = 1 - rows[:, 3 * k + 1]
    assert_verifies_without_a_tokenizer(_dataset(tmp_path / "out", mode, rows, inverted=inverted), capsys, mode,
                                        len(rows))


def test_a_chat_mask_may_be_any_pattern_that_ends_the_real_part(tmp_path):
    rows = CHAT_ROWS.copy()
    rows[0, 1, :8] = [1, 0, 1, 0, 0, 1, 1, 0]  # scattered, but position 8 (the last real one) still trained
    params = _params("Chat", rows)
    assert _problems(_dataset(tmp_path / "chat", "Chat", rows, params)) == []
    rows = CHAT_VSL_ROWS.copy()
    rows[0, 1, :3] = [1, 0, 0]  # conversation 1: positions 0-3, its last one trained
    assert _problems(_dataset(tmp_path / "vsl", "Chat_VSL", rows, _params("Chat_VSL", rows))) == []


def test_the_statistics_of_each_mode():
    def spec(mode):
        return V.DatasetSpec(mode, V.OURS, False, None, VOCAB, EOS, PAD, _FEATURES[mode])

    dpo = V.count_rows(DPO_ROWS, spec("DPO"))
    # Both sides of 3 rows of 8: 18 trained positions (2+3, 4+1, 6+2), real lengths 5+6, 5+2, 8+4.
    assert V.expected_post_process(dpo, spec("DPO")) == {
        "n_examples": 3, "num_tokens": 48, "loss_valid_tokens": 18, "num_masked_tokens": 30, "num_pad_tokens": 18}
    assert V.expected_h5_dataset_stats(dpo, spec("DPO")) == {
        "num_sequences": 3, "num_tokens": 48, "loss_valid_tokens": 18, "non_pad_tokens": 30}
    assert V.detokenized_inputs(DPO_ROWS, spec("DPO"))[:2] == [[1, 2, 3, 11, EOS], [1, 2, 3, 12, 13, EOS]]
    chat = V.count_rows(CHAT_ROWS, spec("Chat"))
    assert (chat["non_pad_tokens"], chat["loss_valid_tokens"]) == (9 + 4 + 10, 5 + 3 + 4)
    assert V.trained_runs(CHAT_ROWS, spec("Chat")).tolist() == [2, 1, 1]
    vsl = V.count_rows(CHAT_VSL_ROWS, spec("Chat_VSL"))
    assert V.expected_post_process(vsl, spec("Chat_VSL"))["num_sequences_before_packing"] == 3
    assert V.expected_post_process(vsl, spec("Chat_VSL"))["vsl_packing_factor"] == 1.5


def test_dpo_statistics_are_recounted_over_both_sides(tmp_path):
    params = _params("DPO", DPO_ROWS)
    params["post-process"]["num_tokens"] = 24  # one side only
    params["h5_dataset_stats"]["non_pad_tokens"] = 18  # the chosen sides only
    assert _problems(_dataset(tmp_path / "out", "DPO", DPO_ROWS, params)) == [
        "data_params.json: post-process.num_tokens is 24, the files recount to 48",
        "data_params.json: h5_dataset_stats.non_pad_tokens is 18, the files recount to 30"]


@pytest.mark.parametrize("mode", list(ROWS))
def test_the_feature_count_must_match_the_mode(tmp_path, mode):
    params = _params(mode, ROWS[mode])
    params["features"] = list(VSL_FEATURES if mode == "Chat" else LM_FEATURES)
    problems = _problems(_dataset(tmp_path / "out", mode, ROWS[mode], params))
    assert (f"data_params.json: features is {params['features']}, but {mode} rows hold "
            f"{list(_FEATURES[mode])}") in problems
    width = len(_FEATURES[mode])
    assert any(p.startswith(f"{SHARD}: dataset 'data' holds {width} features per row") for p in problems), problems


def test_without_a_features_list_dpo_rows_are_read_as_six(tmp_path):
    params = _params("DPO", DPO_ROWS)
    del params["features"]
    res = verify_dataset(str(_dataset(tmp_path / "out", "DPO", DPO_ROWS, params)))
    assert res.ok, res.lines()
    assert any("no features list: rows read as chosen_input_ids, chosen_attention_mask" in n for n in res.notes)


# ------------------------------------------------------------------------------------- broken invariants


_set = set_value


def _both(*changes):
    def change(rows):
        for c in changes:
            c(rows)
    return change


# (mode, change to the good rows, the problem verify must report: it names the file, the first row and side)
BROKEN = {
    # Chat
    "chat: labels are the next input": (
        "Chat", _set(0, 2, 3, 7),
        "1 row whose labels are not input_ids shifted by one in the real part (first: row 0, position 3: label 7, "
        "next input_id 12)"),
    "chat: the last real position is trained": (
        "Chat", _set(1, 1, 3, 0),
        "1 row whose real part does not end with a trained position: a token follows the last trained one where "
        "padding should (first: row 1, position 3: input_id 15)"),
    "chat: pad input_ids": (
        "Chat", _set(1, 0, 7, 5),
        "1 input_ids after the real part are not pad_id 99 (first: row 1, position 7: 5)"),
    "chat: pad labels": (
        "Chat", _set(0, 2, 9, 5),
        "1 labels after the real part are not pad_id 99 (first: row 0, position 9: 5)"),
    "chat: padding is not trained": (
        "Chat", _set(1, 1, 8, 1),
        "1 padding position is trained: mask not 0 (first: row 1, position 8: 1)"),
    "chat: mask values": (
        "Chat", _set(2, 1, 4, 2),
        "1 attention_mask values are neither 0 nor 1 (first: row 2, position 4: 2)"),
    "chat: ids below vocab_size": (
        "Chat", _set(2, 0, 0, VOCAB + 1),
        "1 input_ids >= vocab_size 100 (max 101; first: row 2, position 0: 101)"),
    # Chat_VSL
    "chat_vsl: each conversation's last position is trained": (
        "Chat_VSL", _set(0, 1, 3, 0),
        "1 row whose mask is not trained at each conversation's last position as Chat_VSL writes it (first: row 0, "
        "position 3: a conversation's last position, not trained)"),
    "chat_vsl: labels are the next input inside a conversation": (
        "Chat_VSL", _set(1, 2, 2, 7),
        "1 row whose labels are not input_ids shifted by one inside each conversation (first: row 1, position 2: "
        "label 7, next input_id 2)"),
    "chat_vsl: position_ids count up": (
        "Chat_VSL", _set(0, 4, 5, 2),
        "1 row whose position_ids do not count 0, 1, 2, ... from each conversation's start (first: row 0, "
        "position 5: 2, expected 1)"),
    "chat_vsl: attention_span counts down": (
        "Chat_VSL", _set(1, 3, 0, 3),
        "1 row whose attention_span does not count down to 0 at each conversation's last position (first: row 1, "
        "position 0: 3, expected 5)"),
    "chat_vsl: pad position_ids": (
        "Chat_VSL", _set(1, 4, 8, 3),
        "1 position_ids after the real part are not 0 (first: row 1, position 8: 3)"),
    "chat_vsl: padding is not trained": (
        "Chat_VSL", _set(0, 1, 9, 1),
        "1 padding position is trained: mask not 0 (first: row 0, position 9: 1)"),
    # DPO
    "dpo: one run of trained positions": (
        "DPO", _set(0, 4, 3, 0),
        "1 side whose mask is not one run of trained positions (those whose labels are the response) as DPO "
        "writes it (first: row 0 (rejected): 2 runs of trained positions)"),
    "dpo: a side trains its response": (
        "DPO", lambda rows: rows[1, 1].fill(0),
        "1 side whose mask is not one run of trained positions (those whose labels are the response) as DPO "
        "writes it (first: row 1 (chosen): no trained position)"),
    "dpo: the prompt's labels are padding": (
        "DPO", _set(0, 2, 0, 2),
        "1 side whose prompt labels (the positions before the first trained one) are not pad_id 99 (first: row 0 "
        "(chosen), position 0: 2)"),
    "dpo: the mask ends at |S|-2 (the reference's off-by-one)": (
        "DPO", _set(0, 1, 4, 1),
        "1 side whose trained positions do not end at |S|-2, the position whose label is the response's last "
        "token (first: row 0 (chosen), position 4: its label is pad_id 99)"),
    "dpo: not trained at the row's last position": (
        "DPO", _both(_set(2, 1, 7, 1), _set(2, 2, 7, 7)),
        "1 side whose trained positions do not end at |S|-2, the position whose label is the response's last "
        "token (first: row 2 (chosen), position 7: the row's last position, whose label is no input)"),
    "dpo: labels are the next input over the response": (
        "DPO", _set(0, 5, 3, 7),
        "1 side whose labels are not input_ids shifted by one over the trained positions (the response) (first: "
        "row 0 (rejected), position 3: label 7, next input_id 13)"),
    "dpo: pad input_ids": (
        "DPO", _set(1, 3, 4, 5),
        "1 input_ids after the real part are not pad_id 99 (first: row 1 (rejected), position 4: 5)"),
    "dpo: pad labels": (
        "DPO", _set(0, 2, 4, 5),
        "1 labels after the last trained position are not pad_id 99 (first: row 0 (chosen), position 4: 5)"),
    "dpo: both sides start with the same prompt": (
        "DPO", _set(0, 3, 1, 7),
        "1 row whose chosen and rejected sides do not start with the same prompt (the input_ids up to the first "
        "trained position) (first: row 0, position 1: 2 (chosen), 7 (rejected))"),
    "dpo: mask values": (
        "DPO", _set(2, 4, 6, 3),
        "1 attention_mask values are neither 0 nor 1 (first: row 2 (rejected), position 6: 3)"),
    "dpo: ids below vocab_size": (
        "DPO", _both(_set(2, 0, 0, VOCAB), _set(2, 3, 0, VOCAB)),  # the same prompt on both sides
        "2 input_ids >= vocab_size 100 (max 100; first: row 2 (chosen), position 0: 100)"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_verify_names_each_broken_invariant_and_its_row(tmp_path, name):
    mode, change, problem = BROKEN[name]
    rows = ROWS[mode].copy()
    params = _params(mode, rows)  # the statistics of the good rows: only the row checks may complain
    change(rows)
    out = _dataset(tmp_path / "out", mode, rows, params)
    problems = [p for p in _problems(out) if not p.startswith("data_params.json: ")]
    assert problems == [f"{SHARD}: {problem}"]


def test_dpo_prompts_of_different_lengths(tmp_path):
    rows = np.stack([DPO_ROWS[0], _dpo_row([1, 2, 3], [11, EOS], [3, 12, EOS], 8, rejected_prompt=[1, 2])])
    out = _dataset(tmp_path / "out", "DPO", rows)
    assert _problems(out) == [
        f"{SHARD}: 1 row whose chosen and rejected sides do not start with the same prompt (the input_ids up to the "
        "first trained position) (first: row 1: 3 prompt tokens (chosen), 2 (rejected))"]


def test_a_broken_dpo_side_in_an_inverted_dataset(tmp_path):
    rows = DPO_ROWS.copy()
    rows[:, [1, 4]] = 1 - rows[:, [1, 4]]
    params = _params("DPO", rows, inverted=True)
    rows[1, 4, 1] = 0  # rejected: |S| = 2, so position 1's label is padding: trained there is the off-by-one
    assert [p for p in _problems(_dataset(tmp_path / "out", "DPO", rows, params))
            if not p.startswith("data_params.json: ")] == [
        f"{SHARD}: 1 side whose trained positions do not end at |S|-2, the position whose label is the response's "
        "last token (first: row 1 (rejected), position 1: its label is pad_id 99)"]


# ------------------------------------------------------------------------------------------------- inspect


def _body(text: str) -> str:
    return text.split("─" * 60 + "\n", 1)[1]


def test_inspect_a_chat_row_brackets_all_but_the_trained_spans(tmp_path):
    out = _dataset(tmp_path / "out", "Chat", CHAT_ROWS)
    text = inspect_row(str(out), row=0)
    assert "examples_0.h5 row 0 of 3 · Chat · 10 positions: 9 real, 5 trained, 1 pad, 2 trained spans" in text
    # No tokenizer: ids shown; the conversation's last token (a label, not an input) is shown too.
    assert _body(text) == "[1 2 3 ]11 12 ⟨EOS⟩\n[4 5 ]13 ⟨EOS⟩\n… 1 pad"


def test_inspect_a_chat_vsl_row_by_conversation(tmp_path):
    out = _dataset(tmp_path / "out", "Chat_VSL", CHAT_VSL_ROWS)
    text = inspect_row(str(out), row=0)
    assert "· Chat_VSL · 10 positions: 6 real, 5 trained, 4 pad, 2 conversations" in text
    assert "── conversation k/m = a conversation starts (position_ids 0)" in text
    assert _body(text) == ("── conversation 1/2 · positions 0–3 · 4 positions, 3 trained\n"
                           "[1 2 ]11 12 ⟨EOS⟩\n"
                           "── conversation 2/2 · positions 4–5 · 2 positions, 2 trained\n"
                           "[3 ]13 ⟨EOS⟩\n"
                           "… 4 pad")
    lines = _body(inspect_row(str(out), row=1, ids=True)).splitlines()
    assert lines[1] == "── conversation 1/1 · positions 0–5 · 6 positions, 4 trained"


def test_inspect_a_dpo_row_shows_the_prompt_once_then_each_response(tmp_path):
    out = _dataset(tmp_path / "out", "DPO", DPO_ROWS)
    text = inspect_row(str(out), row=0)
    assert ("examples_0.h5 row 0 of 3 · DPO · 8 positions per side, prompt 3 tokens; chosen: 5 real, 2 trained, "
            "3 pad; rejected: 6 real, 3 trained, 2 pad") in text
    assert "── prompt, then ── chosen and ── rejected = each side's response" in text
    assert _body(text) == ("── prompt · positions 0–2 · 3 tokens\n"
                           "[1 2 3 ]\n"
                           "── chosen · positions 3–4 · 2 tokens, 2 trained\n"
                           "11 ⟨EOS⟩\n"
                           "… 3 pad\n"
                           "── rejected · positions 3–5 · 3 tokens, 3 trained\n"
                           "12 13 ⟨EOS⟩\n"
                           "… 2 pad")
    lines = _body(inspect_row(str(out), row=0, ids=True)).splitlines()
    assert lines[0] == "── chosen · 5 real, 2 trained" and lines[8] == "── rejected · 6 real, 3 trained"
    assert lines[1].split() == ["pos", "input", "token", "mask", "label", "token"]
    assert lines[4].split() == ["2", "3", "'3", "'", "1", "11", "'11", "'"]


def test_inspect_a_dpo_row_whose_prompts_differ(tmp_path):
    rows = np.stack([_dpo_row([1, 2, 3], [11, EOS], [3, 12, EOS], 8, rejected_prompt=[1, 2])])
    out = _dataset(tmp_path / "out", "DPO", rows)
    text = inspect_row(str(out))
    assert "the prompts differ (chosen 3, rejected 2 tokens)" in text
    assert _body(text).splitlines()[::2][:4] == ["── chosen prompt · positions 0–2 · 3 tokens",
                                                 "── chosen · positions 3–4 · 2 tokens, 2 trained",
                                                 "… 3 pad",
                                                 "[1 2 ]"]


# ------------------------------------------------------------------------------------------ report, reader


def test_report_shows_both_dpo_sides(tmp_path):
    pytest.importorskip("matplotlib")
    out = _dataset(tmp_path / "out", "DPO", DPO_ROWS)
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text()
    assert text.count('src="data:image/png;base64,') == 6
    assert "Real (non-pad) tokens per side" in text and "Prompt tokens per example" in text
    assert "<th>sides (chosen + rejected)</th><td>6</td>" in text
    assert "<th>chosen real tokens</th><td>18</td>" in text and "<th>rejected real tokens</th><td>12</td>" in text
    assert "<th>prompt tokens (once per example)</th><td>6</td>" in text
    assert "<th>chat_template</th><td>the tokenizer&#x27;s own</td>" in text


def test_report_counts_chat_spans_and_conversations(tmp_path):
    pytest.importorskip("matplotlib")
    out = _dataset(tmp_path / "chat", "Chat", CHAT_ROWS)
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text()
    assert "Trained spans per sequence" in text and "<th>trained spans (assistant turns)</th><td>4</td>" in text
    out = _dataset(tmp_path / "vsl", "Chat_VSL", CHAT_VSL_ROWS)
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text()
    assert "Conversations per sequence" in text and "<th>conversations (packed segments)</th><td>3</td>" in text


@pytest.mark.parametrize("mode", list(ROWS))
def test_reader_yields_the_features_by_name(tmp_path, mode):
    rows = ROWS[mode]
    out = _dataset(tmp_path / "out", mode, rows)
    ds = H5Dataset(str(out))
    assert ds.features == _FEATURES[mode]
    got = list(ds)
    assert len(got) == len(rows) and list(got[0]) == list(_FEATURES[mode])
    for i, name in enumerate(_FEATURES[mode]):
        np.testing.assert_array_equal(np.stack([r[name] for r in got]), rows[:, i])


def test_reader_names_dpo_features_without_a_list(tmp_path):
    params = _params("DPO", DPO_ROWS)
    del params["features"]
    assert H5Dataset(str(_dataset(tmp_path / "processor", "DPO", DPO_ROWS, params))).features == DPO_FEATURES
    bare = tmp_path / "bare"  # no data_params.json: six features in the file mean DPO's
    bare.mkdir()
    write_shard(str(bare / SHARD), DPO_ROWS)
    (batch,) = list(H5Dataset(str(bare), batch_size=3))
    assert set(batch) == set(DPO_FEATURES) and batch["rejected_labels"].shape == (3, 8)


# ------------------------------------------------------------------------------------ real outputs of the CLI


def _conversation(i: int) -> dict:
    messages = [{"role": "system", "content": "You are terse."}] if i % 3 == 0 else []
    for t in range(1 + i % 3):
        messages += [{"role": "user", "content": f"Question {i}.{t}: what is {i * t}? " * (1 + (i + t) % 4)},
                     {"role": "assistant", "content": f"It is {i * t}. " * (1 + (i * t) % 5)}]
    return {"messages": messages}


@pytest.fixture(scope="module")
def real_outputs(tmp_path_factory):
    """One small job per mode, in-process, with the Qwen2.5 chat tokenizer."""
    require_shared(QWEN)
    base = tmp_path_factory.mktemp("chat_jobs")
    chats, pairs = base / "chats", base / "pairs"
    chats.mkdir()
    pairs.mkdir()
    (chats / "a.jsonl").write_text("".join(json.dumps(_conversation(i)) + "\n" for i in range(24)))
    (pairs / "a.jsonl").write_text("".join(json.dumps({
        "prompt": f"What is {i}+{i}? " * (1 + i % 3), "chosen": f"It is {2 * i}.",
        "rejected": f"It is {2 * i + 1}, I think. " * (1 + i % 4)}) + "\n" for i in range(16)))
    tokenizer = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(QWEN)]
    jobs = {"Chat": (chats, ["--max_seq_length", "256", "--truncate", "keep_start"]),
            "Chat_VSL": (chats, ["--max_seq_length", "128", "--truncate", "keep_end"]),
            "DPO": (pairs, ["--max_seq_length", "64", "--prompt_key", "prompt"])}
    outs = {}
    for mode, (src, flags) in jobs.items():
        outs[mode] = base / mode
        run_job([mode, "--input_dir", str(src), "--output_dir", str(outs[mode]), *tokenizer, *flags])
    return outs


@pytest.mark.parametrize("mode", ["Chat", "Chat_VSL", "DPO"])
def test_a_real_output_verifies_with_no_problem_and_no_note(real_outputs, mode):
    res = verify_dataset(str(real_outputs[mode]))
    assert res.ok and not res.notes, res.lines()
    assert res.mode == mode and res.rows > 0
    if mode == "Chat_VSL":  # packed: more conversations than rows
        params = json.loads((real_outputs[mode] / "data_params.json").read_text())
        assert params["post-process"]["vsl_packing_factor"] > 1


def test_inspect_a_real_chat_row(real_outputs, capsys):
    assert main(["inspect", str(real_outputs["Chat"]), "--row", "2", "--color", "never"]) == 0
    out = capsys.readouterr().out
    spans = int(re.search(r"(\d+) trained spans?", out).group(1))
    body = _body(out)
    # Untrained runs are bracketed: the template's headers and the user turns; each trained span follows one.
    assert body.startswith("[<|im_start|>") and body.count("<|im_start|>assistant]\n") == spans == 3
    assert "\n[<|im_start|>user\nQuestion 2.1" in body and "]\nIt is 2. It is 2. It is 2. ⟨EOS⟩" in body


def test_inspect_a_real_dpo_row(real_outputs, capsys):
    assert main(["inspect", str(real_outputs["DPO"]), "--row", "1", "--color", "never"]) == 0
    body = _body(capsys.readouterr().out)
    heads = re.findall(r"^── (\w+)", body, re.M)
    assert heads == ["prompt", "chosen", "rejected"]
    prompt, chosen, rejected = re.split(r"^── .*\n", body, flags=re.M)[1:]
    assert prompt.startswith("[") and "What is 1+1? What is 1+1?" in prompt and prompt.rstrip().endswith("]")
    assert chosen.startswith("It is 2.⟨EOS⟩") and "[" not in chosen
    assert rejected.startswith("It is 3, I think. It is 3, I think. ⟨EOS⟩")


def test_report_and_reader_on_real_outputs(real_outputs, tmp_path):
    pytest.importorskip("matplotlib")
    for mode, out in real_outputs.items():
        html_path = tmp_path / f"{mode}.html"
        assert main(["report", str(out), "--output", str(html_path)]) == 0
        assert html_path.read_text().count('src="data:image/png;base64,') == 6
        batch = next(iter(H5Dataset(str(out), batch_size=2)))
        assert list(batch) == list(_FEATURES[mode]) and all(v.dtype == np.int32 for v in batch.values())
