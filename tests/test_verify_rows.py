"""`verify` rejects a wrong label, or a wrong input id, at every real position of a row, in every mode it checks.

Issue #23: verify's LMData shift check stopping one position short (so a wrong label at the last checked
position passed) survived the whole suite, because every test broke one chosen position. Here each mode's good
rows are built from token lists by the row contract (the module docstring of transforms/core/verify.py, MODES.md),
not by the pipeline's builders; then every real position of every row is changed in turn, one dataset each,
written as the tools expect it (one .h5 shard beside a data_params.json whose statistics are those of the good
rows: a label or an input id changes no statistic, so only the row checks can notice).

Which positions the rows themselves determine, by the contract:

- a label is the next input of its sequence (LMData, Chat: inside the real part; VSL modes: inside a
  document; Summarization and FIM: at every position, x[:-1] / x[1:] of msl + 1 tokens; DPO: over the
  response), the last trained label is EOS (Summarization, FIM, Summarization_VSL's documents), padding
  labels are pad_id (after the real part; the trailing EOS input's label; DPO's prompt labels);
- so a label the row cannot know is only one whose token lies beyond the row: the last real label of
  LMData and Chat (the stream's or conversation's next token) and the last label of each LMData_VSL and
  Chat_VSL document (its last token). Those are the only ones verify may let pass;
- an input id is the label before it, except a sequence's first input (each document's first in the VSL
  modes); DPO's prompt inputs are the same on both sides, so none of DPO's is free.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import SHARD, verify_problems, write_dataset
from transforms.core.features import DPO_FEATURES, LM_FEATURES, VSL_FEATURES

EOS, PAD, SEP, VOCAB = 50, 99, 77, 100
OTHER = 42  # an ordinary id none of the rows below holds where it is written
_PROCESSORS = {"LMData": "LMDataPreprocessor", "Summarization": "SummarizationPreprocessor",
               "FIM": "FIMDataPreprocessor", "LMData_VSL": "VSLLMDataPreprocessor",
               "Summarization_VSL": "VSLSummarizationPreprocessor", "Chat": "ChatPreprocessor",
               "Chat_VSL": "VSLChatPreprocessor", "DPO": "DPOPreprocessor"}
TRAILING_EOS_INPUT = ("Summarization", "FIM", "DPO")


# ------------------------------------------------------------------------------------ rows by the contract


def _shifted(tokens: list[int], trained: list[int], msl: int) -> np.ndarray:
    """[3, msl]: input_ids tokens[:-1], labels tokens[1:], mask trained[1:] (trained[t]: token t is a trained
    label), then padding. LMData, Chat and a VSL document's first three features."""
    n = len(tokens) - 1
    row = np.zeros((3, msl), dtype=np.int32)
    row[0] = row[2] = PAD
    row[0, :n], row[1, :n], row[2, :n] = tokens[:-1], trained[1:], tokens[1:]
    return row


def _x_row(x: list[int], first_trained_label: int, msl: int) -> np.ndarray:
    """Summarization and FIM: x (ending in EOS) padded to msl + 1 tokens, input_ids x[:-1], labels x[1:], the
    mask on the labels x[first_trained_label:] (the completion and EOS; FIM: from x[1])."""
    assert len(x) <= msl + 1 and x[-1] == EOS
    padded = x + [PAD] * (msl + 1 - len(x))
    row = np.zeros((3, msl), dtype=np.int32)
    row[0], row[2] = padded[:-1], padded[1:]
    row[1, first_trained_label - 1:len(x) - 1] = 1
    return row


def _vsl_row(documents: list[tuple[list[int], list[int]]], msl: int) -> np.ndarray:
    """[5, msl]: documents (tokens, trained) back to back, each of len(tokens) - 1 positions with its own
    position_ids 0 .. n-1 and attention_span n-1 .. 0, then padding (pad ids, span and position 0)."""
    row = np.zeros((5, msl), dtype=np.int32)
    row[0] = row[2] = PAD
    at = 0
    for tokens, trained in documents:
        n = len(tokens) - 1
        row[:3, at:at + n] = _shifted(tokens, trained, n)
        row[3, at:at + n] = np.arange(n - 1, -1, -1)
        row[4, at:at + n] = np.arange(n)
        at += n
    assert at <= msl
    return row


def _dpo_row(prompt: list[int], chosen: list[int], rejected: list[int], msl: int) -> np.ndarray:
    """[6, msl]: per side S = P + R unshifted, labels R on positions |P|-1 .. |S|-2 (the mask's one run)."""
    row = np.zeros((6, msl), dtype=np.int32)
    for k, response in enumerate((chosen, rejected)):
        s = prompt + response
        row[3 * k] = row[3 * k + 2] = PAD
        row[3 * k, :len(s)] = s
        row[3 * k + 2, len(prompt) - 1:len(s) - 1] = response
        row[3 * k + 1, len(prompt) - 1:len(s) - 1] = 1
    return row


def _all(tokens: list[int]) -> tuple[list[int], list[int]]:
    return tokens, [1] * len(tokens)


# Per mode: rows holding a full row, padded rows, the shortest sequences, and (Summarization, FIM) the row of
# msl tokens whose trailing EOS input is the row's last position.
MSL = 8
ROWS = {
    "LMData": np.stack([
        _shifted([1, 2, 3, EOS, 4, 5, 6, 7, 8], [1] * 9, MSL),  # packed: msl + 1 tokens of the stream
        _shifted([9, 10, 11, 12, EOS], [1] * 5, MSL),
        _shifted([13, EOS], [1, 1], MSL),
    ]),
    "Summarization": np.stack([
        _x_row([1, 2, 3, 4, 5, EOS], 3, MSL),  # P = 1 2 3, C = 4 5
        _x_row([6, 7, 8, 9, 10, 11, 12, EOS], 3, MSL),  # msl tokens: the EOS input is the last position
        _x_row([13, 14, 15, 16, 17, 18, 19, 20, EOS], 2, MSL),  # msl + 1 tokens: no EOS input
        _x_row([21, SEP, 22, EOS], 2, MSL),  # with sep: the sep's label is the first completion token
    ]),
    "FIM": np.stack([
        _x_row([1, 2, 3, 4, EOS], 1, MSL),
        _x_row([5, 6, 7, 8, 9, 10, 11, EOS], 1, MSL),
        _x_row([12, 13, 14, 15, 16, 17, 18, 19, EOS], 1, MSL),
    ]),
    "LMData_VSL": np.stack([
        _vsl_row([_all([1, 2, 3, EOS]), _all([4, 5, EOS])], MSL),
        _vsl_row([_all(list(range(6, 15)))], MSL),  # a fold window of msl + 1 tokens
        _vsl_row([_all([15, EOS]), _all([16, 17, 18, EOS]), _all([19, 20, 21, EOS]), _all([22, EOS])], MSL),  # full
    ]),
    "Summarization_VSL": np.stack([
        _vsl_row([([1, 2, SEP, 3, 4, EOS], [0, 0, 0, 1, 1, 1]), ([5, 6, EOS], [0, 1, 1])], MSL),
        _vsl_row([([7, 8, 9, 10, 11, 12, 13, 14, EOS], [0, 0, 0, 1, 1, 1, 1, 1, 1])], MSL),
        _vsl_row([([15, 16, EOS], [0, 1, 1]), ([17, 18, 19, EOS], [0, 0, 1, 1])], MSL),
    ]),
    "Chat": np.stack([
        _shifted([1, 2, 3, 11, 12, EOS, 4, 5, 13, EOS], [0, 0, 0, 1, 1, 1, 0, 0, 1, 1], 10),
        _shifted([1, 3, 14, 15, EOS], [0, 0, 1, 1, 1], 10),
        _shifted([1, 2, 3, 4, 5, 6, 7, 16, 17, 18, EOS], [0] * 7 + [1] * 4, 10),  # msl + 1 tokens
        _shifted([2, 17, EOS], [0, 1, 1], 10),
    ]),
    "Chat_VSL": np.stack([
        _vsl_row([([1, 2, 11, 12, EOS], [0, 0, 1, 1, 1]), ([3, 13, EOS], [0, 1, 1])], 10),
        _vsl_row([([1, 11, EOS, 2, 3, 12, EOS], [0, 1, 1, 0, 0, 1, 1])], 10),
        _vsl_row([([4, 14, EOS], [0, 1, 1]), ([5, 6, 15, 16, 17, 18, EOS], [0, 0, 1, 0, 1, 1, 1])], 10),
    ]),
    "DPO": np.stack([
        _dpo_row([1, 2, 3], [11, EOS], [12, 13, EOS], MSL),
        _dpo_row([4], [14, 15, 16, EOS], [EOS], MSL),
        _dpo_row([5, 6], [17, 18, 19, 20, 21, EOS], [22, EOS], MSL),  # chosen fills the row: |S| = msl
    ]),
}
MODES = list(ROWS)


def _features(mode: str) -> tuple:
    return DPO_FEATURES if mode == "DPO" else VSL_FEATURES if mode.endswith("_VSL") else LM_FEATURES


def _sequences(mode: str, rows: np.ndarray) -> np.ndarray:
    """[n * sides, F, msl]: DPO's chosen and rejected sides (row r's at 2r, 2r + 1), else the rows."""
    n, f, msl = rows.shape
    return rows.reshape(2 * n, 3, msl) if mode == "DPO" else rows


def _real_lengths(mode: str, seqs: np.ndarray, inverted: bool = False) -> list[int]:
    """The contract's real part: up to the last trained position, one more for a trailing EOS input."""
    out = []
    for s in seqs:
        trained = np.flatnonzero(s[1] == (0 if inverted else 1))
        end = int(trained[-1]) + 1 if len(trained) else 0
        out.append(min(end + (mode in TRAILING_EOS_INPUT), s.shape[1]) if end else 0)
    return out


def _params(mode: str, rows: np.ndarray, inverted: bool = False) -> dict:
    """data_params.json as our pipeline writes it for these rows (statistics as the contract defines them)."""
    n, _, msl = rows.shape
    seqs = _sequences(mode, rows)
    trained = int((seqs[:, 1] == (0 if inverted else 1)).sum())
    real = _real_lengths(mode, seqs, inverted)
    tokens = len(seqs) * msl
    post = {"n_examples": n, "num_tokens": tokens, "loss_valid_tokens": trained, "num_masked_tokens": tokens - trained,
            "num_pad_tokens": tokens - sum(real), "eos_id": EOS, "pad_id": PAD, "vocab_size": VOCAB}
    docs = n
    if mode.endswith("_VSL"):
        docs = sum(int((r[4, :k] == 0).sum()) for r, k in zip(rows, real))
        post.update(num_sequences_before_packing=docs, vsl_packing_factor=round(docs / n, 4))
    post.update(processed_files=docs, discarded_files=0, successful_files=docs)
    return {
        "setup": {"mode": mode, "dataset_processor": _PROCESSORS[mode]},
        "processing": {"max_seq_length": msl, "eos_id": EOS, "pad_id": PAD},
        "dataset": {"inverted_mask": inverted},
        "features": list(_features(mode)),
        "post-process": post,
        "h5_dataset_stats": {"num_sequences": n, "num_tokens": tokens, "loss_valid_tokens": trained,
                             "non_pad_tokens": sum(real), "detokenized_chars": 0, "detokenized_bytes": 0},
        "files": {SHARD: n},
        "input": {"documents_read": docs, "good": docs, "bad": 0, "used": docs, "dropped": 0},
    }


# -------------------------------------------------------------------------------- what the contract fixes


def _document_bounds(mode: str, seq: np.ndarray, real: int) -> list[tuple[int, int]]:
    """[start, end) of each document (VSL) or of the one sequence, over the real part."""
    if not mode.endswith("_VSL"):
        return [(0, real)]
    starts = [p for p in range(real) if seq[4, p] == 0]
    return list(zip(starts, starts[1:] + [real]))


def _free_labels(mode: str, seq: np.ndarray, real: int) -> set[int]:
    """Real positions whose label's token lies beyond the row (the module docstring's list)."""
    if mode in ("LMData", "Chat"):
        return {real - 1}
    if mode in ("LMData_VSL", "Chat_VSL"):
        return {end - 1 for _, end in _document_bounds(mode, seq, real)}
    return set()


def _free_inputs(mode: str, seq: np.ndarray, real: int) -> set[int]:
    """Real positions whose input no label of the row repeats: each sequence's (document's) first; none in DPO,
    whose sides share their prompt."""
    if mode == "DPO":
        return set()
    return {start for start, _ in _document_bounds(mode, seq, real)}


def _where(mode: str, q: int) -> str:
    """How verify names sequence q: "row 3", or a DPO side, "row 1 (rejected)"."""
    return f"row {q // 2} ({('chosen', 'rejected')[q % 2]})" if mode == "DPO" else f"row {q}"


def _replacements(value: int) -> list[int]:
    """Wrong values for an id: an ordinary one, and pad_id and EOS, which a check might mistake for padding or a
    document's end."""
    return [v for v in (OTHER, PAD, EOS) if v != value]


def _tamper(mode: str, rows: np.ndarray, q: int, feature: int, p: int, value: int) -> np.ndarray:
    """A copy of rows with sequence q's `feature` (0 input_ids, 2 labels) at position p set to value."""
    out = rows.copy()
    if mode == "DPO":
        out[q // 2, 3 * (q % 2) + feature, p] = value
    else:
        out[q, feature, p] = value
    return out


def _row_problems(tmp_path, mode: str, rows: np.ndarray, params: dict, name: str) -> list[str]:
    return verify_problems(write_dataset(tmp_path / name, rows, params))


def _sweep(tmp_path, mode: str, feature: int, inverted: bool = False, values=_replacements) -> tuple[list, list]:
    """Every real position of every sequence changed in turn: (missed, false alarms).

    A determined position must be reported by a problem of the shard naming its sequence and the position
    (the one changed, or for an input id the position whose label it breaks, or DPO's prompt position); a
    free one must give no problem at all."""
    rows = ROWS[mode].copy()
    if inverted:
        for k in range(len(_features(mode)) // 3 if mode == "DPO" else 1):
            rows[:, 3 * k + 1] = 1 - rows[:, 3 * k + 1]
    params = _params(mode, rows, inverted)
    seqs = _sequences(mode, rows)
    missed, false_alarms = [], []
    case = 0
    for q, (seq, real) in enumerate(zip(seqs, _real_lengths(mode, seqs, inverted))):
        free = (_free_labels if feature == 2 else _free_inputs)(mode, seq, real)
        for p in range(real):
            for value in values(int(seq[feature, p])):
                case += 1
                problems = _row_problems(tmp_path, mode, _tamper(mode, rows, q, feature, p, value), params,
                                         f"case{case}")
                what = f"{_where(mode, q)}, position {p} = {value}"
                if p in free:
                    if problems:
                        false_alarms.append((what, problems))
                    continue
                reported = {p} if feature == 2 else {p - 1, p}
                names = [f"{_where(mode, q)}, position {x}:" for x in reported]
                if mode == "DPO" and feature == 0:
                    names.append(f"row {q // 2}, position {p}:")  # the two sides' prompts differ there
                if not any(line.startswith(f"{SHARD}: ") and any(n in line for n in names) for line in problems):
                    missed.append((what, problems))
    assert case > 0
    return missed, false_alarms


# ------------------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("mode", MODES)
def test_the_good_rows_verify(tmp_path, mode):
    assert _row_problems(tmp_path, mode, ROWS[mode], _params(mode, ROWS[mode]), "good") == []


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_label_at_every_real_position_is_reported(tmp_path, mode):
    missed, false_alarms = _sweep(tmp_path, mode, feature=2)
    assert missed == [], missed
    assert false_alarms == [], false_alarms


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_input_id_at_every_real_position_is_reported(tmp_path, mode):
    missed, false_alarms = _sweep(tmp_path, mode, feature=0)
    assert missed == [], missed
    assert false_alarms == [], false_alarms


@pytest.mark.parametrize("mode", MODES)
def test_every_real_position_in_an_inverted_dataset(tmp_path, mode):
    """The same with the mask written inverted (trained = 0): the real part is read from the mask either way."""
    for feature in (2, 0):
        missed, false_alarms = _sweep(tmp_path, mode, feature, inverted=True, values=lambda v: [x for x in (OTHER, PAD) if x != v])
        assert missed == [] and false_alarms == [], (feature, missed, false_alarms)


def test_the_sweep_changes_every_real_position():
    """The sweep's own bookkeeping, by hand: the real parts and the free positions of a few rows."""
    seqs = _sequences("DPO", ROWS["DPO"])
    assert _real_lengths("DPO", seqs) == [5, 6, 5, 2, 8, 4]
    assert _real_lengths("Summarization", ROWS["Summarization"]) == [6, 8, 8, 4]
    assert _real_lengths("LMData", ROWS["LMData"]) == [8, 4, 1]
    vsl = ROWS["LMData_VSL"]
    assert [_free_labels("LMData_VSL", s, r) for s, r in zip(vsl, _real_lengths("LMData_VSL", vsl))] == [
        {2, 4}, {7}, {0, 3, 6, 7}]
    assert _free_inputs("Chat_VSL", ROWS["Chat_VSL"][0], 6) == {0, 4}


# ------------------------------------------------------------------- Cerebras 2.10's loss span in Chat rows

# Conversations as Qwen's template writes them under 2.10's `chat_loss_span: content`: the assistant's content
# and end-of-turn (EOS here) trained, then the template's closing "\n" (token 20), an untrained label that is
# still part of the conversation: the real part runs to the last label that is not padding.
TAIL_ROWS = np.stack([
    _shifted([1, 2, 11, 12, EOS, 20], [0, 0, 1, 1, 1, 0], 10),
    _shifted([3, 13, EOS, 20], [0, 1, 1, 0], 10),
])


def _tail_params(span: str) -> dict:
    params = _params("Chat", TAIL_ROWS)
    params["dataset"]["chat_loss_span"] = span
    real = 5 + 3  # each row's real part: up to its last label that is not padding
    params["post-process"]["num_pad_tokens"] = 2 * 10 - real
    params["h5_dataset_stats"]["non_pad_tokens"] = real
    return params


def test_a_template_tail_after_the_last_turn_is_real_under_2_10s_loss_span(tmp_path):
    assert _row_problems(tmp_path, "Chat", TAIL_ROWS, _tail_params("content"), "content") == []


def test_the_same_tail_under_our_loss_span_is_a_token_where_padding_should_be(tmp_path):
    problems = _row_problems(tmp_path, "Chat", TAIL_ROWS, _tail_params("turn"), "turn")
    assert f"{SHARD}: 2 rows whose real part does not end with a trained position: a token follows the last " \
           f"trained one where padding should (first: row 0, position 4: input_id {EOS})" in problems


def test_a_token_after_the_tail_is_still_reported_under_2_10s_loss_span(tmp_path):
    rows = TAIL_ROWS.copy()
    rows[1, 0, 4] = 7  # an input id after row 1's tail (its real part ends at position 3)
    problems = _row_problems(tmp_path, "Chat", rows, _tail_params("content"), "tail")
    assert f"{SHARD}: 1 input_ids after the real part are not pad_id {PAD} (first: row 1, position 4: 7)" \
        in problems
