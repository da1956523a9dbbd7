"""transforms/core/verify.py, function by function: the spec read from data_params.json, the file layout, the row
checks' counts and messages, the recount and the statistics and configuration checks.

Pure functions over dicts and arrays, no file: each rule is stated with the smallest input that shows it (the tools'
tests, tests/test_verify*.py, tests/test_vsl_tools.py and tests/test_chat_tools.py, run them on written datasets).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from transforms.core import verify as V
from transforms.core.modes import MODE_NAMES
from transforms.core.features import DPO_FEATURES, LM_FEATURES, VSL_FEATURES

EOS, PAD, VOCAB = 50, 99, 100


def spec(mode, producer=V.OURS, inverted=False, msl=None, vocab=VOCAB, eos=EOS, pad=PAD, features=None):
    return V.DatasetSpec(mode, producer, inverted, msl, vocab, eos, pad, features)


# ------------------------------------------------------------------------------------------ the spec


def test_spec_properties_by_mode():
    assert spec("LMData").loss_value == 1 and spec("LMData", inverted=True).loss_value == 0
    assert [m for m in MODE_NAMES if spec(m).trailing_eos_input] == ["Summarization", "FIM", "DPO"]
    assert [m for m in MODE_NAMES if spec(m).vsl] == ["LMData_VSL", "Summarization_VSL", "Chat_VSL"]
    for mode in ("LMData", "Summarization", "FIM", "Chat", None):
        assert V.mode_features(mode) == LM_FEATURES
        assert spec(mode).feature_names == LM_FEATURES and spec(mode).num_features == 3
    for mode in ("LMData_VSL", "Summarization_VSL", "Chat_VSL"):
        assert V.mode_features(mode) == VSL_FEATURES and spec(mode).num_features == 5
    assert V.mode_features("DPO") == DPO_FEATURES and spec("DPO").num_features == 6
    assert spec("DPO").sides == ("chosen", "rejected") == ("chosen", "rejected")
    assert spec("Chat").sides == ("",) and spec("LMData_VSL").sides == ("",)


def test_recorded_features_decide_what_rows_hold():
    odd = ("input_ids", "labels")
    assert spec("LMData", features=odd).feature_names == odd and spec("LMData", features=odd).num_features == 2
    assert not spec("LMData", features=odd).rows_known  # the mode-specific checks need the mode's own features
    assert spec("LMData", features=LM_FEATURES).rows_known and spec("LMData").rows_known
    assert not spec(None).rows_known
    assert spec("DPO", features=DPO_FEATURES).sides == ("chosen", "rejected")
    assert spec("DPO", features=LM_FEATURES).sides == ("",)  # DPO rows of 3 features: one sequence each


def _ours(mode="LMData", **sections):
    params = {"setup": {"mode": mode}, "features": list(V.mode_features(mode))}
    params.update(sections)
    return params


def test_dataset_spec_without_params():
    for params in (None, {}):
        got, notes = V.dataset_spec(params)
        assert got == V.DatasetSpec(None, V.OURS, False)
        assert notes == ["no data_params.json: mode-specific row checks are skipped"]


def test_dataset_spec_reads_mode_producer_numbers_and_features():
    params = _ours("Summarization", processing={"max_seq_length": 128}, dataset={"inverted_mask": True},
                   **{"post-process": {"vocab_size": 1000, "eos_id": np.int64(3), "pad_id": 4}})
    got, notes = V.dataset_spec(params)
    assert got == V.DatasetSpec("Summarization", V.OURS, True, 128, 1000, 3, 4, LM_FEATURES)
    assert notes == []
    assert isinstance(got.eos_id, int)
    # The reference writes no setup.mode: its dataset_processor names the mode.
    # Cerebras' processor names, as its data_params.json writes them (MODES.md).
    processors = {"LMDataPreprocessor": "LMData", "SummarizationPreprocessor": "Summarization",
                  "FIMDataPreprocessor": "FIM", "VSLLMDataPreprocessor": "LMData_VSL",
                  "VSLSummarizationPreprocessor": "Summarization_VSL", "ChatPreprocessor": "Chat",
                  "VSLChatPreprocessor": "Chat_VSL", "DPOPreprocessor": "DPO"}
    for processor, mode in processors.items():
        got, notes = V.dataset_spec({"setup": {"dataset_processor": processor}})
        assert (got.mode, got.producer, got.features) == (mode, V.REFERENCE, None)
        assert notes == []  # the reference writes no features list: nothing to say about it
    # setup.mode wins over the processor
    got, _ = V.dataset_spec({"setup": {"mode": "FIM", "dataset_processor": "LMDataPreprocessor"}, "features": list(
        LM_FEATURES)})
    assert (got.mode, got.producer) == ("FIM", V.OURS)


@pytest.mark.parametrize("value", [True, 1.0, "128", None, [128]])
def test_dataset_spec_numbers_must_be_integers(value):
    got, _ = V.dataset_spec(_ours(processing={"max_seq_length": value},
                                  **{"post-process": {"vocab_size": value, "eos_id": value, "pad_id": value}}))
    assert (got.max_seq_length, got.vocab_size, got.eos_id, got.pad_id) == (None, None, None, None)


def test_dataset_spec_unknown_mode():
    got, notes = V.dataset_spec({"setup": {"mode": "Poetry"}, "features": list(LM_FEATURES)})
    assert got.mode is None and got.producer == V.OURS
    assert notes == ["data_params.json names no known mode ('Poetry'): mode-specific row checks are skipped"]
    got, notes = V.dataset_spec({"setup": {"dataset_processor": "PoetryPreprocessor"}})
    assert got.mode is None and got.producer == V.REFERENCE
    assert notes == ["data_params.json names no known mode ('PoetryPreprocessor'): mode-specific row checks are "
                     "skipped"]
    got, notes = V.dataset_spec({"setup": {}, "processing": {}})
    assert notes == ["data_params.json names no known mode (None): mode-specific row checks are skipped"]


def test_dataset_spec_features():
    got, notes = V.dataset_spec(_ours("LMData_VSL"))
    assert got.features == VSL_FEATURES and notes == []
    params = _ours("LMData_VSL")
    params["features"] = list(LM_FEATURES)
    got, notes = V.dataset_spec(params)
    assert got.features == LM_FEATURES and not got.rows_known
    assert notes == ["features ['input_ids', 'attention_mask', 'labels'] are not what LMData_VSL writes: "
                     "mode-specific row checks are skipped"]
    del params["features"]
    got, notes = V.dataset_spec(params)
    assert got.features is None and got.feature_names == VSL_FEATURES
    assert notes == ["data_params.json has no features list: rows read as input_ids, attention_mask, labels, "
                     "attention_span, position_ids"]
    for malformed in ([], "input_ids", ["input_ids", ""], ["input_ids", 3], None):
        params["features"] = malformed
        got, notes = V.dataset_spec(params)
        assert got.features is None and notes == [], malformed  # check_config reports a malformed list
    params["features"] = ["a", "b"]
    got, notes = V.dataset_spec({**params, "setup": {"mode": "Poetry"}})
    assert got.features == ("a", "b") and len(notes) == 1  # no mode: nothing to compare the list with


def test_dataset_spec_the_references_inverted_mask():
    """The reference's LMData and FIM writers ignore inverted_mask: their masks are read as not inverted."""
    for processor in ("LMDataPreprocessor", "FIMDataPreprocessor"):
        got, notes = V.dataset_spec({"setup": {"dataset_processor": processor}, "dataset": {"inverted_mask": True}})
        assert not got.inverted_mask
        assert notes == ["reference output: its LMData/FIM writer ignores inverted_mask (SPEC §1h-3), so the masks "
                         "are checked as not inverted"]
    got, notes = V.dataset_spec({"setup": {"dataset_processor": "SummarizationPreprocessor"},
                                 "dataset": {"inverted_mask": True}})
    assert got.inverted_mask and notes == []
    got, notes = V.dataset_spec({"setup": {"dataset_processor": "LMDataPreprocessor"},
                                 "dataset": {"inverted_mask": False}})
    assert not got.inverted_mask and notes == []
    got, _ = V.dataset_spec(_ours("LMData", dataset={"inverted_mask": True}))
    assert got.inverted_mask  # ours honours it
    got, _ = V.dataset_spec(_ours("LMData", dataset={}))
    assert got.inverted_mask is False
    got, _ = V.dataset_spec({"setup": {"dataset_processor": "FIMDataPreprocessor"}, "dataset": {"inverted_mask": 1}})
    assert got.inverted_mask is False


# ----------------------------------------------------------------------------------------- file layout


def layout(**fields):
    base = dict(name="examples_0.h5", datasets=("data",), dtype="int32", shape=(4, 3, 8), chunks=(1, 3, 8),
                compression="gzip", has_n_examples=True, n_examples=4)
    base.update(fields)
    return V.FileLayout(**base)


def test_a_good_layout():
    assert V.check_layout(layout(), 8) == ([], [])
    assert V.check_layout(layout(), None) == ([], [])
    assert V.check_layout(layout(shape=(2, 6, 8), chunks=(1, 6, 8), n_examples=2), 8, DPO_FEATURES) == ([], [])
    assert V.check_layout(layout(n_examples=np.array([4])), 8) == ([], [])
    assert V.check_layout(layout(n_examples=np.int64(4)), 8) == ([], [])


def test_layout_problems():
    assert V.check_layout(layout(name="examples_0.hdf5"))[0] == [
        "name does not end in .h5: the Cerebras dataloader only reads *.h5"]
    assert V.check_layout(layout(datasets=("rows", "x"))) == (["no dataset 'data' (datasets: ['rows', 'x'])"], [])
    assert V.check_layout(layout(datasets=("data", "index"))) == ([], ["extra datasets ['index'] are ignored by "
                                                                        "the dataloader"])
    assert V.check_layout(layout(dtype="int64"))[0] == ["dataset 'data' has dtype int64, expected int32"]
    assert V.check_layout(layout(shape=(4, 24))) == (
        ["dataset 'data' has shape (4, 24), expected [n, 3, max_seq_length]"], [])
    assert V.check_layout(layout(shape=None))[0] == ["dataset 'data' has shape (), expected [n, 3, max_seq_length]"]
    assert V.check_layout(layout(shape=(4, 5, 8)), 8) == (
        ["dataset 'data' holds 5 features per row (shape (4, 5, 8)), but data_params.json expects 3 (input_ids, "
         "attention_mask, labels)"], [])
    assert V.check_layout(layout(), 16)[0] == ["rows hold 8 tokens but max_seq_length is 16"]
    assert V.check_layout(layout(chunks=(4, 3, 8)))[0] == ["chunks (4, 3, 8), expected (1, 3, 8) (one sample per "
                                                           "chunk)"]
    assert V.check_layout(layout(chunks=None))[0] == ["chunks None, expected (1, 3, 8) (one sample per chunk)"]
    assert V.check_layout(layout(compression="lzf"))[0] == ["compression 'lzf', expected 'gzip'"]
    assert V.check_layout(layout(compression=None))[0] == ["compression None, expected 'gzip'"]
    assert V.check_layout(layout(has_n_examples=False))[0] == ["attribute n_examples is missing"]
    assert V.check_layout(layout(n_examples="4"))[0] == ["attribute n_examples is '4', not an integer"]
    assert V.check_layout(layout(n_examples=True))[0] == ["attribute n_examples is True, not an integer"]
    assert V.check_layout(layout(n_examples=np.array([4, 4])))[0][0].startswith("attribute n_examples is array(")
    assert V.check_layout(layout(n_examples=5))[0] == ["attribute n_examples 5 != 4 rows in 'data'"]
    assert V.check_layout(layout(n_examples=np.array([[3]])))[0] == ["attribute n_examples 3 != 4 rows in 'data'"]
    # several at once, in order
    problems, _ = V.check_layout(layout(name="x", dtype="float32", compression="lzf", n_examples=3), 8)
    assert [p.split(" ")[0] for p in problems] == ["name", "dataset", "compression", "attribute"]


def test_an_empty_shard():
    """No rows: nothing to chunk (HDF5 cannot chunk an empty dataset), so chunks and compression are not asked."""
    problems, notes = V.check_layout(layout(shape=(0, 3, 8), chunks=None, compression=None, n_examples=0), 8)
    assert problems == []
    assert notes == ["holds no rows (an empty dataset cannot be chunked, chunks/compression not checked)"]
    assert V.check_layout(layout(shape=(0, 3, 8), chunks=None, compression=None, n_examples=1), 8)[0] == [
        "attribute n_examples 1 != 0 rows in 'data'"]
    assert V.check_layout(layout(shape=(1, 3, 8), chunks=None, compression=None, n_examples=1), 8)[0] == [
        "chunks None, expected (1, 3, 8) (one sample per chunk)", "compression None, expected 'gzip'"]


# ------------------------------------------------------------------------------------- row helpers


def _row(inputs, mask, labels, msl=8):
    row = np.full((3, msl), PAD, dtype=np.int64)
    row[1] = 0
    row[0, :len(inputs)], row[1, :len(mask)], row[2, :len(labels)] = inputs, mask, labels
    return row


LM = np.stack([_row([1, 2, 3], [1, 1, 1], [2, 3, EOS]),
               _row([4, 5, 6, 7, 8, 9, 10, 11], [1] * 8, [5, 6, 7, 8, 9, 10, 11, 12]),
               _row([], [], [])])


def test_loss_positions_and_real_lengths():
    assert V.loss_positions(LM, spec("LMData")).sum(axis=1).tolist() == [3, 8, 0]
    assert V.real_lengths(LM, spec("LMData")).tolist() == [3, 8, 0]
    inverted = LM.copy()
    inverted[:, 1] = 1 - inverted[:, 1]
    assert V.real_lengths(inverted, spec("LMData", inverted=True)).tolist() == [3, 8, 0]
    # a trailing EOS input: one more real position, never past the row, none without a trained one
    assert V.real_lengths(LM, spec("Summarization")).tolist() == [4, 8, 0]
    assert V.real_lengths(LM, spec("FIM")).tolist() == [4, 8, 0]
    gaps = _row([1, 2, 3, 4, 5], [0, 1, 0, 1, 0], [2, 3, 4, 5, EOS])[None]
    assert V.real_lengths(gaps, spec("Chat")).tolist() == [4]  # up to the last trained position
    assert V._loss_end(np.array([[True, False, False], [False, False, True], [False] * 3])).tolist() == [1, 3, 0]


def test_sequences_split_dpo_rows_into_sides():
    rows = np.arange(2 * 6 * 4).reshape(2, 6, 4)
    seqs = V.sequences(rows, spec("DPO"))
    assert seqs.shape == (4, 3, 4)
    assert (seqs[1] == rows[0, 3:]).all() and (seqs[2] == rows[1, :3]).all()
    assert V.sequences(rows, spec("Chat")) is rows
    assert V.sequences(rows[:, :3], spec("DPO")) is not None and V.sequences(rows[:, :3], spec("DPO")).shape == (
        2, 3, 4)  # not 6 features: left as they are
    assert V.sequences(rows[0], spec("DPO")).shape == (6, 4)  # not a block of rows
    square = np.zeros((6, 6), np.int64)
    assert V.sequences(square, spec("DPO")) is square
    assert V.sequences(LM, spec("LMData")) is LM


def test_trained_runs_and_documents_per_row():
    rows = np.stack([_row([1, 2, 3, 4, 5], [1, 0, 1, 1, 0], [2, 3, 4, 5, 6]),
                     _row([1, 2], [1, 1], [2, 3]), _row([], [], [])])
    assert V.trained_runs(rows, spec("Chat")).tolist() == [2, 1, 0]
    assert V.trained_runs(rows[:1], spec("Chat", inverted=True)).tolist() == [2]  # the 0s: positions 1, 4 .. 7
    assert V.documents_per_row(rows, spec("Chat")).tolist() == [1, 1, 1]
    assert V.documents_per_row(rows, spec("DPO")).tolist() == [1, 1, 1]
    # otherwise: EOS among the real inputs (documents that end inside the row)
    lm = np.stack([_row([1, EOS, 2, EOS], [1] * 4, [EOS, 2, EOS, 3]), _row([EOS, 1], [1, 1], [1, EOS])])
    lm[1, 0, 5] = EOS  # padding is not counted
    assert V.documents_per_row(lm, spec("LMData")).tolist() == [2, 1]
    assert V.documents_per_row(lm, spec("LMData", eos=None)).tolist() == [0, 0]
    vsl = np.zeros((1, 5, 8), np.int64)
    vsl[0, 1, :6] = 1
    vsl[0, 4, :6] = [0, 1, 0, 1, 2, 0]
    assert V.document_starts(vsl, spec("LMData_VSL")).tolist() == [[True, False, True, False, False, True, False,
                                                                      False]]
    assert V.documents_per_row(vsl, spec("LMData_VSL")).tolist() == [3]
    assert V.documents_per_row(vsl[:, :3], spec("LMData_VSL")).tolist() == [0]  # 3 features: read by EOS


# ---------------------------------------------------------------------------------------- row checks


def check(rows, s, vocab=VOCAB, start=0):
    checker = V.RowChecker(s, vocab)
    checker.add(np.asarray(rows), start)
    return checker.problems()


def test_ids_outside_the_vocabulary():
    rows = LM.copy()
    rows[0, 0, 1] = VOCAB + 5
    rows[1, 0, 2] = VOCAB
    rows[1, 2, 7] = VOCAB + 1
    got = check(rows, spec("LMData"), start=10)
    assert "2 input_ids >= vocab_size 100 (max 105; first: row 10, position 1: 105)" in got
    assert "1 labels >= vocab_size 100 (max 101; first: row 11, position 7: 101)" in got
    assert check(LM, spec("LMData"), vocab=PAD + 1) == []  # the largest id is pad_id, 99
    assert check(LM, spec("LMData"), vocab=PAD)[:2] == [
        "13 input_ids >= vocab_size 99 (max 99; first: row 0, position 3: 99)",
        "13 labels >= vocab_size 99 (max 99; first: row 0, position 3: 99)"]
    # unknown vocabulary: not checked, the rest is
    assert check(rows, spec("LMData"), vocab=None) == [
        "2 rows whose labels are not input_ids shifted by one in the real part (first: row 0, position 0: label 2, "
        "next input_id 105)"]


def test_negative_ids_and_mask_values():
    rows = LM.copy()
    rows[0, 0, 0] = -1
    rows[2, 2, 3] = -7
    rows[1, 1, 4] = 2
    rows[2, 1, 6] = -1
    got = check(rows, spec("LMData"), start=3)
    assert "1 negative input_ids (first: row 3, position 0: -1)" in got
    assert "1 negative labels (first: row 5, position 3: -7)" in got
    assert "2 attention_mask values are neither 0 nor 1 (first: row 4, position 4: 2)" in got
    assert check(LM, spec("LMData")) == []


def test_counts_and_first_examples_add_up_over_blocks():
    """A file is checked block by block: counts add up, the first example stays the first block's, the max grows."""
    rows = LM.copy()
    rows[0, 0, 1] = VOCAB
    later = LM.copy()
    later[1, 0, 1] = VOCAB + 3
    later[1, 0, 2] = VOCAB + 2
    checker = V.RowChecker(spec("LMData"), VOCAB)
    checker.add(rows, 0)
    checker.add(later, 3)
    problems = checker.problems()
    assert "3 input_ids >= vocab_size 100 (max 103; first: row 0, position 1: 100)" in problems
    assert [p for p in problems if "shifted" in p] == [
        "2 rows whose labels are not input_ids shifted by one in the real part (first: row 0, position 0: label 2, "
        "next input_id 100)"]


def test_rows_of_another_width_or_no_rows_are_not_checked():
    checker = V.RowChecker(spec("LMData"), VOCAB)
    bad = LM.copy()
    bad[0, 0, 0] = -1
    checker.add(np.concatenate([bad, bad[:, :2]], axis=1))  # 5 features for a 3-feature spec
    checker.add(bad[0])  # not [n, F, msl]
    checker.add(bad[:0])
    assert checker.problems() == [] and checker.notes() == []


def test_rows_without_a_trained_position_are_noted():
    checker = V.RowChecker(spec("LMData"), VOCAB)
    checker.add(LM)
    checker.add(LM[2:])
    assert checker.problems() == []
    assert checker.notes() == ["2 rows have no trained position (they teach nothing)"]
    dpo = np.zeros((1, 6, 8), np.int64)  # a DPO side without one is a problem, not a note
    dpo[:, [0, 2, 3, 5]] = PAD
    checker = V.RowChecker(spec("DPO", features=DPO_FEATURES), VOCAB)
    checker.add(dpo)
    assert checker.notes() == []
    assert checker.problems() == ["2 sides whose mask is not one run of trained positions (those whose labels are "
                                  "the response) as DPO writes it (first: row 0 (chosen): no trained position)"]


def test_unknown_modes_and_layouts_get_only_the_generic_checks():
    rows = LM.copy()
    rows[0, 2, 0] = 7  # breaks the shift
    rows[0, 1, 6] = 1  # breaks the prefix
    assert check(rows, spec(None)) == []
    assert check(rows, spec("LMData", features=("a", "b", "c"))) == []
    assert check(rows, spec("LMData")) == [
        "1 row whose mask is not trained positions first, then untrained ones as LMData writes it (first: row 0)",
        "1 row whose labels are not input_ids shifted by one in the real part (first: row 0, position 0: label 7, "
        "next input_id 2)"]


def test_lmdata_rows():
    assert check(LM, spec("LMData")) == []
    rows = LM.copy()
    rows[0, 1, 1] = 0  # a hole in the trained prefix
    assert check(rows, spec("LMData"), start=4) == [
        "1 row whose mask is not trained positions first, then untrained ones as LMData writes it (first: row 4)"]
    rows = LM.copy()
    rows[0, 1, 0] = 0  # the prefix must start at position 0
    assert "1 row whose mask is not trained positions first, then untrained ones as LMData writes it (first: row 0)" \
           in check(rows, spec("LMData"))
    rows = LM.copy()
    rows[0, 0, 3] = 7  # padding
    rows[0, 2, 5] = 8
    rows[1, 2, 7] = 9  # the last real label: the stream's next token, free
    assert check(rows, spec("LMData")) == [
        "1 input_ids after the real part are not pad_id 99 (first: row 0, position 3: 7)",
        "1 labels after the real part are not pad_id 99 (first: row 0, position 5: 8)"]
    assert check(rows, spec("LMData", pad=None)) == []  # pad_id unknown: padding is not checked
    inverted = LM.copy()
    inverted[:, 1] = 1 - inverted[:, 1]
    assert check(inverted, spec("LMData", inverted=True)) == []
    inverted[0, 1, 1] = 1
    assert check(inverted, spec("LMData", inverted=True)) == [
        "1 row whose inverted mask is not trained positions first, then untrained ones as LMData writes it "
        "(first: row 0)"]


def _x(x, first, msl=8):
    """Summarization / FIM: x[:-1], x[1:], trained labels x[first:]."""
    x = list(x) + [PAD] * (msl + 1 - len(x))
    row = np.zeros((3, msl), np.int64)
    row[0], row[2] = x[:-1], x[1:]
    n = len([t for t in x if t != PAD])
    row[1, first - 1:n - 1] = 1
    return row


SUMM = np.stack([_x([1, 2, 3, 4, EOS], 3), _x([5, 6, 7, 8, 9, 10, 11, EOS], 2), _x([12, 13] + [14] * 6 + [EOS], 2)])


def test_summarization_rows():
    assert check(SUMM, spec("Summarization")) == []
    assert V.real_lengths(SUMM, spec("Summarization")).tolist() == [5, 8, 8]
    rows = SUMM.copy()
    rows[0, 1, 0] = 1  # two runs: the prompt's first position trained
    assert check(rows, spec("Summarization"), start=2) == [
        "1 row whose mask is not one run of trained positions (completion + EOS) as Summarization writes it (first: "
        "row 2)"]
    rows = SUMM.copy()
    rows[1, 2, 7] = 5  # the trailing EOS input's label (the row's last position) is padding
    assert check(rows, spec("Summarization")) == [
        "1 labels after the last trained position are not pad_id 99 (first: row 1, position 7: 5)"]
    rows = SUMM.copy()
    rows[2, 2, 7] = 7  # the last trained label (the row's last position) is EOS
    assert check(rows, spec("Summarization")) == ["1 row whose last trained label is not EOS 50 (first: row 2, "
                                                  "position 7: 7)"]
    assert check(rows, spec("Summarization", eos=None)) == []
    rows = SUMM.copy()
    rows[0, 2, 6] = 3  # padding labels are the next (pad) input: x[:-1], x[1:] everywhere
    rows[0, 0, 7] = 4
    got = check(rows, spec("Summarization"))
    assert got == ["1 row whose labels are not input_ids shifted by one (x[:-1], x[1:] construction) (first: row 0, "
                   "position 6: label 3, next input_id 4)",
                   "1 input_ids after the real part are not pad_id 99 (first: row 0, position 7: 4)",
                   "1 labels after the last trained position are not pad_id 99 (first: row 0, position 6: 3)"]


def test_fim_rows():
    fim = np.stack([_x([1, 2, 3, EOS], 1), _x(list(range(1, 9)) + [EOS], 1)])
    assert check(fim, spec("FIM")) == []
    rows = fim.copy()
    rows[0, 1, 1] = 0
    assert check(rows, spec("FIM")) == ["1 row whose mask is not trained positions first, then untrained ones as FIM "
                                        "writes it (first: row 0)"]
    rows = fim.copy()
    rows[0, 2, 2] = 3
    got = check(rows, spec("FIM"))
    assert "1 row whose last trained label is not EOS 50 (first: row 0, position 2: 3)" in got
    rows = fim.copy()
    rows[1, 2, 3] = 3
    assert check(rows, spec("FIM")) == [
        "1 row whose labels are not input_ids shifted by one (x[:-1], x[1:] construction) (first: row 1, position 3: "
        "label 3, next input_id 5)"]


def test_several_rows_with_one_problem_are_counted_as_rows():
    rows = np.concatenate([SUMM, SUMM])
    rows[1, 2, 1] = rows[4, 2, 1] = 60
    rows[1, 2, 2] = 61
    assert check(rows, spec("Summarization"), start=1) == [
        "2 rows whose labels are not input_ids shifted by one (x[:-1], x[1:] construction) (first: row 2, position 1: "
        "label 60, next input_id 7)"]
    rows = np.concatenate([SUMM, SUMM])
    rows[0, 2, 3] = rows[3, 2, 3] = 1
    assert "2 rows whose last trained label is not EOS 50 (first: row 0, position 3: 1)" in check(
        rows, spec("Summarization"))
    rows = np.concatenate([LM, LM])
    rows[0, 1, 1] = rows[3, 1, 1] = 0
    assert check(rows, spec("LMData"))[0].startswith("2 rows whose mask")
    rows = LM.copy()
    rows[2, 0, 2:4] = 1  # two wrong padding positions in one row: padding is counted in positions
    assert check(rows, spec("LMData")) == ["2 input_ids after the real part are not pad_id 99 (first: row 2, "
                                           "position 2: 1)"]


def test_describe_names_the_unit_and_the_mask():
    vsl = spec("Chat_VSL")
    assert V._describe("vsl_start", 1, "row 0", None, VOCAB, vsl).startswith(
        "1 row whose real part does not start with a conversation (position_ids[0] is not 0)")
    assert "each document's start" in V._describe("vsl_position_ids", 2, "row 0", None, VOCAB, spec("LMData_VSL"))
    dpo = spec("DPO", features=DPO_FEATURES)
    assert V._describe("shift", 2, "x", None, VOCAB, dpo).startswith("2 sides whose labels are not input_ids shifted "
                                                                     "by one over the trained positions (the "
                                                                     "response)")
    assert V._describe("dpo_prompts", 2, "x", None, VOCAB, dpo).startswith("2 rows whose chosen and rejected")
    assert V._describe("shift", 1, "x", None, VOCAB, spec(None)) == (
        "1 row whose labels are not input_ids shifted by one (x[:-1], x[1:] construction) (first: x)")
    assert V._describe("pad_attention_mask", 2, "x", 1, VOCAB, spec("Chat", inverted=True)) == (
        "2 padding positions are trained: inverted mask not 1 (first: x)")
    assert V._describe("pad_position_ids", 3, "x", 0, VOCAB, spec("LMData_VSL")) == (
        "3 position_ids after the real part are not 0 (first: x)")
    assert V._describe("doc_last_label", 2, "x", EOS, VOCAB, spec("Summarization_VSL")) == (
        "2 documents whose last label (a trained position) is not EOS 50 (first: x)")
    assert V._describe("something_new", 4, "x", None, VOCAB, spec("LMData")) == "4 something_new (first: x)"


# --------------------------------------------------------------------------------------------- counts


def test_count_rows():
    got = V.count_rows(LM, spec("LMData"))
    assert got == Counter({"num_sequences": 3, "num_tokens": 24, "loss_valid_tokens": 11, "num_masked_tokens": 13,
                           "non_pad_tokens": 11, "num_pad_tokens": 13, "input_ids_equal_pad_id": 13})
    assert "input_ids_equal_pad_id" not in V.count_rows(LM, spec("LMData", pad=None))
    assert V.count_rows(LM[:0], spec("LMData")) == Counter()
    assert V.count_rows(np.zeros((0,), np.int64), spec("LMData")) == Counter()
    summ = V.count_rows(SUMM, spec("Summarization"))
    assert (summ["loss_valid_tokens"], summ["non_pad_tokens"], summ["num_pad_tokens"]) == (2 + 6 + 7, 5 + 8 + 8, 3)


def test_count_rows_in_the_references_conventions():
    rows = LM.copy()
    rows[0, 0, 1] = EOS
    ref = V.count_rows(rows, spec("LMData", producer=V.REFERENCE))
    assert ref["mask_sum"] == 11
    assert ref["input_ids_not_eos_or_pad"] == 2 + 8  # row 0: 1, 3 (EOS and pad left out); row 1: all 8
    inverted = rows.copy()
    inverted[:, 1] = 1 - inverted[:, 1]
    assert V.count_rows(inverted, spec("LMData", producer=V.REFERENCE, inverted=True))["mask_sum"] == 13
    assert "input_ids_not_eos_or_pad" not in V.count_rows(rows, spec("LMData", producer=V.REFERENCE, eos=None))
    assert "input_ids_not_eos_or_pad" not in V.count_rows(rows, spec("LMData", producer=V.REFERENCE, pad=None))
    assert "mask_sum" not in V.count_rows(rows, spec("LMData"))


def test_count_rows_of_vsl_and_dpo():
    vsl = np.zeros((2, 5, 6), np.int64)
    vsl[:, [0, 2]] = PAD
    vsl[0, 1, :5] = 1
    vsl[0, 4, :5] = [0, 1, 0, 0, 1]
    vsl[1, 1, :2] = 1
    vsl[1, 4, :2] = [0, 1]
    got = V.count_rows(vsl, spec("LMData_VSL"))
    assert got["num_sequences_before_packing"] == 4 and got["non_pad_tokens"] == 7
    assert "num_sequences_before_packing" not in V.count_rows(vsl[:, :3], spec("LMData"))
    dpo = np.full((1, 6, 4), PAD, np.int64)
    dpo[0, [1, 4]] = [[0, 1, 0, 0], [0, 1, 1, 0]]
    got = V.count_rows(dpo, spec("DPO"))
    assert got == Counter({"num_sequences": 1, "num_tokens": 8, "loss_valid_tokens": 3, "num_masked_tokens": 5,
                           "non_pad_tokens": 3 + 4, "num_pad_tokens": 1, "input_ids_equal_pad_id": 8})


def test_inputs_for_detokenizing():
    assert V.real_inputs(LM, spec("LMData")) == [[1, 2, 3], list(range(4, 12)), []]
    assert V.real_inputs(SUMM[:1], spec("Summarization")) == [[1, 2, 3, 4, EOS]]
    dpo = np.full((1, 6, 4), PAD, np.int64)
    dpo[0, 0], dpo[0, 3] = [1, 2, 3, PAD], [1, 4, PAD, PAD]
    dpo[0, [1, 4]] = [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert V.real_inputs(dpo, spec("DPO")) == [[1, 2, 3], [1, 4]]
    assert V.detokenized_inputs(LM, spec("LMData")) == [[1, 2, 3], list(range(4, 12)), []]
    assert V.detokenized_inputs(LM[:1], spec("LMData", producer=V.REFERENCE)) == [[1, 2, 3] + [PAD] * 5]
    assert V.text_counts(["ab", "é", "", "😀"]) == Counter({"detokenized_chars": 4, "detokenized_bytes": 8})
    assert V.text_counts(["\ud800"]) == Counter({"detokenized_chars": 1, "detokenized_bytes": 3})  # a lone surrogate
    assert V.text_counts([]) == Counter({"detokenized_chars": 0, "detokenized_bytes": 0})


# --------------------------------------------------------------------------------------------- statistics


COUNTS = {"num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 20, "num_masked_tokens": 12,
          "non_pad_tokens": 24, "num_pad_tokens": 8, "input_ids_equal_pad_id": 9, "mask_sum": 21,
          "input_ids_not_eos_or_pad": 17, "num_sequences_before_packing": 7}


def test_expected_post_process():
    ours = {"n_examples": 4, "num_tokens": 32, "loss_valid_tokens": 20, "num_masked_tokens": 12, "num_pad_tokens": 8}
    for mode in ("LMData", "Summarization", "FIM", "Chat", "DPO"):
        assert V.expected_post_process(COUNTS, spec(mode)) == ours
    assert V.expected_post_process(COUNTS, spec("LMData", producer=V.REFERENCE)) == ours
    assert V.expected_post_process(COUNTS, spec("Chat_VSL")) == {
        **ours, "num_sequences_before_packing": 7, "vsl_packing_factor": 1.75}
    assert V.expected_post_process({"num_sequences": 3, "num_sequences_before_packing": 7},
                                   spec("LMData_VSL"))["vsl_packing_factor"] == 2.3333
    assert V.expected_post_process({}, spec("LMData_VSL")) == {
        "n_examples": 0, "num_tokens": 0, "loss_valid_tokens": 0, "num_masked_tokens": 0, "num_pad_tokens": 0,
        "num_sequences_before_packing": 0, "vsl_packing_factor": 0.0}
    # the reference: Summarization counts one pad and one masked token too many per row; FIM's pad tokens are
    # input ids equal to pad_id; its VSL script records only n_examples
    assert V.expected_post_process(COUNTS, spec("Summarization", producer=V.REFERENCE)) == {
        **ours, "num_pad_tokens": 12, "num_masked_tokens": 16}
    assert V.expected_post_process(COUNTS, spec("FIM", producer=V.REFERENCE)) == {**ours, "num_pad_tokens": 9}
    without = {k: v for k, v in COUNTS.items() if k != "input_ids_equal_pad_id"}
    assert V.expected_post_process(without, spec("FIM", producer=V.REFERENCE)) == {
        k: v for k, v in ours.items() if k != "num_pad_tokens"}
    for mode in ("LMData_VSL", "Summarization_VSL", "Chat_VSL"):
        assert V.expected_post_process(COUNTS, spec(mode, producer=V.REFERENCE)) == {"n_examples": 4}
    assert all(type(v) is int for v in V.expected_post_process(
        {k: np.int64(v) for k, v in COUNTS.items()}, spec("FIM", producer=V.REFERENCE)).values())


def test_expected_h5_dataset_stats():
    ours = {"num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 20, "non_pad_tokens": 24}
    assert V.expected_h5_dataset_stats(COUNTS, spec("LMData")) == ours
    assert V.expected_h5_dataset_stats(COUNTS, spec("LMData_VSL")) == ours
    assert V.expected_h5_dataset_stats({}, spec("LMData")) == dict.fromkeys(ours, 0)
    assert V.expected_h5_dataset_stats(COUNTS, spec("LMData", producer=V.REFERENCE)) == {
        **ours, "loss_valid_tokens": 21, "non_pad_tokens": 17}
    assert V.expected_h5_dataset_stats(COUNTS, spec("LMData", producer=V.REFERENCE, pad=None)) == {
        "num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 21}
    assert V.expected_h5_dataset_stats(COUNTS, spec("LMData", producer=V.REFERENCE, eos=None)) == {
        "num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 21}
    assert V.expected_h5_dataset_stats({"num_tokens": 3}, spec("LMData", producer=V.REFERENCE)) == {
        "num_sequences": 0, "num_tokens": 3, "loss_valid_tokens": 0, "non_pad_tokens": 0}


def _good_params(counts=COUNTS, s=None):
    s = s or spec("LMData")
    post = dict(V.expected_post_process(counts, s))
    post.update(processed_files=5, discarded_files=1, successful_files=4)
    return {"post-process": post,
            "h5_dataset_stats": {**V.expected_h5_dataset_stats(counts, s), "detokenized_chars": 10,
                                 "detokenized_bytes": 12},
            "files": {"a.h5": 3, "b.h5": 1},
            "input": {"documents_read": 6, "good": 5, "bad": 1, "used": 4, "dropped": 1}}


FILES = {"a.h5": 3, "b.h5": 1}
DETOK = Counter({"detokenized_chars": 10, "detokenized_bytes": 12})


def stats(params, s=None, files=FILES, detok=DETOK, note=""):
    return V.check_stats(params, COUNTS, s or spec("LMData"), file_rows=files, detokenized=detok,
                         detokenized_note=note)


def test_check_stats_passes_on_numbers_that_recount():
    assert stats(_good_params()) == ([], [])


def test_check_stats_post_process():
    assert stats({}) == (["post-process section is missing"], [])
    assert stats({"post-process": 3})[0] == ["post-process section is missing"]
    params = _good_params()
    params["post-process"]["num_tokens"] = 31
    del params["post-process"]["loss_valid_tokens"]
    assert stats(params)[0] == ["post-process.num_tokens is 31, the files recount to 32",
                                "post-process.loss_valid_tokens is missing"]


def test_check_stats_packing_factor_tolerance():
    s = spec("LMData_VSL")
    params = _good_params(s=s)
    for claimed, ok in ((1.75, True), (1.75004, True), (1.74996, True), (1.7501, False), (1.7499, False),
                        ("1.75", False), (True, False), (2, False), (None, False)):
        params["post-process"]["vsl_packing_factor"] = claimed
        problems = stats(params, s)[0]
        assert (problems == []) == ok, (claimed, problems)
        if not ok:
            assert problems == [f"post-process.vsl_packing_factor is {claimed}, the files recount to 1.75"]
    assert V._same(1, 1.00004) and not V._same(False, 0.0) and V._same(3, 3) and not V._same(3, 4)


def test_check_stats_formulas_between_keys():
    params = _good_params()
    post = params["post-process"]
    post.update(raw_chars_count=10, average_chars_per_sequence=3, raw_bytes_count=13, average_bytes_per_sequence=3)
    assert stats(params)[0] == ["post-process.average_bytes_per_sequence is 3, ceil(raw_bytes_count / n_examples) "
                                "is 4"]
    post["average_bytes_per_sequence"] = 4
    assert stats(params)[0] == []
    post["average_chars_per_sequence"] = 2.5  # not all integers: not checked
    assert stats(params)[0] == []
    post.update(average_chars_per_sequence=0, n_examples=0)
    problems = stats(params)[0]  # no rows: the average is 0
    assert "post-process.average_bytes_per_sequence is 4, ceil(raw_bytes_count / n_examples) is 0" in problems
    assert not any("average_chars" in p for p in problems)
    params = _good_params()
    params["post-process"]["successful_files"] = 5
    assert stats(params)[0] == ["post-process.successful_files is 5, processed_files - discarded_files is 4",
                                "post-process.successful_files is 5, input.used is 4"]
    del params["input"]
    params["post-process"]["discarded_files"] = "1"
    assert stats(params)[0] == ["input section is missing"]  # not all integers: the formula is not checked


def test_check_stats_h5_dataset_stats():
    params = _good_params()
    params["h5_dataset_stats"]["non_pad_tokens"] = 25
    del params["h5_dataset_stats"]["num_tokens"]
    params["h5_dataset_stats"]["detokenized_bytes"] = 13
    assert stats(params)[0] == ["h5_dataset_stats.num_tokens is missing",
                                "h5_dataset_stats.non_pad_tokens is 25, the files recount to 24",
                                "h5_dataset_stats.detokenized_bytes is 13, the files recount to 12"]
    del params["h5_dataset_stats"]["detokenized_chars"]
    problems, notes = stats(params, detok=None, note="no tokenizer here")
    assert problems == ["h5_dataset_stats.num_tokens is missing",
                        "h5_dataset_stats.non_pad_tokens is 25, the files recount to 24"]
    assert notes == ["h5_dataset_stats.detokenized_chars/bytes not checked: no tokenizer here"]
    assert stats(params, detok=None)[1] == ["h5_dataset_stats.detokenized_chars/bytes not checked: no tokenizer"]
    assert "h5_dataset_stats.detokenized_chars is missing" in stats(params)[0]
    params = _good_params()
    params["h5_dataset_stats"]["detokenized_chars"] = 11
    assert stats(params, detok=Counter({"detokenized_chars": 11}))[0] == [
        "h5_dataset_stats.detokenized_bytes is 12, the files recount to 0"]
    del params["h5_dataset_stats"]
    assert stats(params)[0] == ["h5_dataset_stats section is missing"]
    params["h5_dataset_stats"] = [1]
    assert stats(params)[0] == ["h5_dataset_stats section is missing"]


def test_check_stats_files():
    params = _good_params()
    assert stats(params, files={"a.h5": 3, "c.h5": 2})[0] == [
        "files lists b.h5, which is not in the directory", "c.h5 is in the directory but not listed under files"]
    assert stats(params, files={"a.h5": 2, "b.h5": 1})[0] == ["files.a.h5 is 3, the file holds 2 rows"]
    del params["files"]
    assert stats(params)[0] == ["files section is missing"]


def test_check_stats_input_accounting():
    params = _good_params()
    params["input"]["documents_read"] = 7
    assert stats(params)[0] == ["input: total: read 7 != good 5 + bad 1"]
    params = _good_params()
    params["input"].update(good=6, documents_read=7)
    assert stats(params)[0] == ["input: total: good 6 != used 4 + dropped 1",
                                "post-process.processed_files is 5, input.good is 6"]
    params = _good_params()
    params["input"].update(dropped=2, used=3, good=5)
    assert stats(params)[0] == ["post-process.discarded_files is 1, input.dropped is 2",
                                "post-process.successful_files is 4, input.used is 3"]
    params = _good_params()
    del params["input"]["used"]
    assert stats(params)[0] == ["input section is malformed (KeyError('used'))"]
    params = _good_params()
    params["input"]["per_source"] = {"a": {"documents_read": 1}}
    assert stats(params)[0] == ["input section is malformed (KeyError('good'))"]
    params = _good_params()
    del params["post-process"]["processed_files"]
    assert stats(params)[0] == []  # a document counter is not recountable: only compared when written


def test_check_stats_of_the_reference():
    """The reference writes no h5_dataset_stats, input or files sections: not problems, said in a note."""
    s = spec("Summarization", producer=V.REFERENCE)
    post = dict(V.expected_post_process(COUNTS, s))
    problems, notes = stats({"post-process": post}, s)
    assert problems == []
    assert notes == [
        "reference Summarization: num_pad_tokens and num_masked_tokens checked with the reference's one-per-row "
        "over-count (SPEC §1e)",
        "reference output: no h5_dataset_stats/input/files sections; document counters "
        "(processed/discarded/successful) and raw/normalized counts are not recountable from the files"]
    s = spec("FIM", producer=V.REFERENCE)
    h5s = {**V.expected_h5_dataset_stats(COUNTS, s), **DETOK}
    problems, notes = stats({"post-process": dict(V.expected_post_process(COUNTS, s)), "h5_dataset_stats": h5s,
                             "files": FILES}, s)
    assert problems == []
    assert notes == [
        "reference FIM: num_pad_tokens checked as the count of input ids equal to pad_id (SPEC §1h-16)",
        "reference h5_dataset_stats checked in its conventions (MODES.md §A0): loss_valid_tokens = the mask row "
        "summed, non_pad_tokens = input ids neither EOS nor pad, detokenized_* = whole input rows decoded, padding "
        "included",
        "reference output: no input sections; document counters (processed/discarded/successful) and "
        "raw/normalized counts are not recountable from the files"]
    s = spec("LMData_VSL", producer=V.REFERENCE)
    problems, notes = stats({"post-process": {"n_examples": 4}, "h5_dataset_stats": h5s, "files": FILES,
                             "input": _good_params()["input"]}, s)
    assert problems == []
    assert notes[0] == ("reference VSL: its post-process records no token counts, only n_examples is recounted "
                        "there (MODES.md §A4)")
    assert notes[-1] == ("reference output: document counters (processed/discarded/successful) and raw/normalized "
                         "counts are not recountable from the files")
    assert stats({"post-process": {"n_examples": 4}}, spec("LMData_VSL"))[0] == [
        "post-process.num_tokens is missing", "post-process.loss_valid_tokens is missing",
        "post-process.num_masked_tokens is missing", "post-process.num_pad_tokens is missing",
        "post-process.num_sequences_before_packing is missing", "post-process.vsl_packing_factor is missing",
        "h5_dataset_stats section is missing", "files section is missing", "input section is missing"]


# ------------------------------------------------------------------------------------------ configuration


def config(params=None, s=None, msls=(8,), vocab_flag=None, msl_flag=None, tokenizer_vocab=None):
    return V.check_config(params if params is not None else {}, s or spec("LMData", msl=8), file_msls=list(msls),
                          vocab_flag=vocab_flag, msl_flag=msl_flag, tokenizer_vocab=tokenizer_vocab)


def test_check_config_passes():
    assert config() == ([], [])
    assert config({"features": list(LM_FEATURES)}, msls=(8, 8), vocab_flag=VOCAB, msl_flag=8,
                  tokenizer_vocab=VOCAB) == ([], [])
    assert config(vocab_flag=VOCAB + 1) == ([], [])  # a larger model vocabulary is fine


def test_check_config_features():
    assert config({"features": "input_ids"})[0] == ["features is 'input_ids', not a list of feature names"]
    assert config({"features": []})[0] == ["features is [], not a list of feature names"]
    assert config({"features": list(VSL_FEATURES)})[0] == [
        "features is ['input_ids', 'attention_mask', 'labels', 'attention_span', 'position_ids'], but LMData rows "
        "hold ['input_ids', 'attention_mask', 'labels']"]
    assert config({"features": ["x"]}, s=spec(None)) == ([], [])  # no mode to compare with
    assert config(None, s=spec("LMData", msl=8)) == ([], [])


def test_check_config_lengths_and_vocabulary():
    assert config(msls=(8, 16, 8))[0] == ["files hold rows of different lengths: [8, 16]",
                                          "processing.max_seq_length is 8, but files hold rows of 16"]
    assert config(msls=(16,))[0] == ["processing.max_seq_length is 8, but files hold rows of 16"]
    assert V.check_config(None, spec("LMData", msl=8), file_msls=[16], vocab_flag=None, msl_flag=None,
                          tokenizer_vocab=None) == ([], [])  # without data_params.json: nothing configured
    assert config(msls=(16,), s=spec("LMData")) == ([], [])
    assert config(msl_flag=16)[0] == ["the model's max_seq_length 16 != processing.max_seq_length 8"]
    assert config(msl_flag=16, s=spec("LMData")) == ([], [])
    assert config(vocab_flag=VOCAB - 1)[0] == [
        "post-process.vocab_size 100 > the model's vocab_size 99: the tokenizer can emit ids the model cannot embed"]
    assert config(vocab_flag=VOCAB - 1, s=spec("LMData", msl=8, vocab=None)) == ([], [])
    assert config(tokenizer_vocab=VOCAB + 2)[0] == [
        "post-process.vocab_size is 100, the tokenizer rebuilt from data_params.json has 102"]
    assert config(tokenizer_vocab=VOCAB + 2, s=spec("LMData", producer=V.REFERENCE, msl=8)) == ([], [
        "post-process.vocab_size is 100, the tokenizer rebuilt from data_params.json has 102 (the reference's HF "
        "vocab_size excludes added tokens, SPEC §1h-15)"])
    assert config(tokenizer_vocab=VOCAB + 2, s=spec("LMData", msl=8, vocab=None)) == ([], [])


# ------------------------------------------------------------------------------------- more row checks


def _vsl(docs, msl=8):
    """[5, msl] VSL row of documents (tokens, trained flags per token): the contract's layout."""
    row = np.zeros((5, msl), np.int64)
    row[0] = row[2] = PAD
    at = 0
    for tokens, trained in docs:
        n = len(tokens) - 1
        row[0, at:at + n], row[2, at:at + n], row[1, at:at + n] = tokens[:-1], tokens[1:], trained[1:]
        row[3, at:at + n], row[4, at:at + n] = np.arange(n - 1, -1, -1), np.arange(n)
        at += n
    return row


LM_VSL = np.stack([_vsl([([1, 2, 3, EOS], [1] * 4), ([4, 5, EOS], [1] * 3)]), _vsl([([6, 7, EOS], [1] * 3)])])


def test_documents_are_counted_as_integers_and_padding_is_no_document():
    """pad_id may be EOS (GPT-2): an EOS in the padding ends no document."""
    lm = np.stack([_row([1, EOS, 2], [1, 1, 1], [EOS, 2, EOS]), _row([3], [1], [EOS])])
    lm[:, [0, 2], 3:] = EOS
    got = V.documents_per_row(lm, spec("LMData", pad=EOS))
    assert got.tolist() == [1, 0] and got.dtype == np.int64
    for mode in ("Chat", "DPO", "LMData"):
        s = spec(mode, eos=None) if mode == "LMData" else spec(mode)
        assert V.documents_per_row(LM, s).dtype == np.int64


def test_a_single_trained_position_is_a_trained_row():
    """A row trained at position 0 only has loss: it is no row without loss, and its checks apply."""
    one = _x([5, EOS], 1)[None]  # Summarization: an empty completion, the EOS label at position 0
    checker = V.RowChecker(spec("Summarization"), VOCAB)
    checker.add(one)
    assert checker.problems() == [] and checker.notes() == []
    bad = one.copy()
    bad[0, 2, 0] = 7
    assert check(bad, spec("Summarization")) == [
        "1 row whose labels are not input_ids shifted by one (x[:-1], x[1:] construction) (first: row 0, position 0: "
        "label 7, next input_id 50)",
        "1 row whose last trained label is not EOS 50 (first: row 0, position 0: 7)"]


def test_vsl_rows_without_a_known_pad_id():
    """pad_id unknown: the documents are still read from the mask and the position ids, and padding must still
    have span and position 0."""
    s = spec("LMData_VSL", pad=None)
    assert check(LM_VSL, s) == []
    rows = LM_VSL.copy()
    rows[1, 3, 5] = 2
    rows[1, 4, 6] = 1
    rows[1, 0, 7] = 3  # an input id in the padding: not checked without pad_id
    assert check(rows, s) == ["1 attention_span after the real part are not 0 (first: row 1, position 5: 2)",
                              "1 position_ids after the real part are not 0 (first: row 1, position 6: 1)"]


def test_row_counts_of_the_chat_vsl_and_dpo_checks():
    """Problems found per sequence are counted in rows (DPO: sides), not in positions."""
    rows = np.concatenate([LM_VSL, LM_VSL])
    rows[0, 2, 0] = rows[0, 2, 1] = rows[2, 2, 0] = 9
    assert check(rows, spec("LMData_VSL"), start=4) == [
        "2 rows whose labels are not input_ids shifted by one inside each document (first: row 4, position 0: "
        "label 9, next input_id 2)"]
    chat = np.stack([_row([1, 2, 3], [0, 1, 1], [2, 3, EOS])] * 3)
    chat[0, 2, 0] = chat[2, 2, 1] = 7
    assert check(chat, spec("Chat")) == [
        "2 rows whose labels are not input_ids shifted by one in the real part (first: row 0, position 0: label 7, "
        "next input_id 2)"]


def test_summarization_vsl_messages():
    summ = np.stack([_vsl([([1, 2, 3, EOS], [0, 0, 1, 1]), ([4, 5, 6, EOS], [0, 1, 1, 1])])])
    assert check(summ, spec("Summarization_VSL")) == []
    rows = summ.copy()
    rows[0, 2, 0] = 9
    assert check(rows, spec("Summarization_VSL")) == [
        "1 row whose labels are not input_ids shifted by one inside each document (first: row 0, position 0: label 9, "
        "next input_id 2)"]
    rows = summ.copy()
    rows[0, 1, 1:3] = 0  # document 1 trains nothing: its last position is the first problem
    assert check(rows, spec("Summarization_VSL")) == [
        "1 row whose mask is not one run of trained positions per document, ending at its last position as "
        "Summarization_VSL writes it (first: row 0, position 2: a document's last position, not trained)"]


def test_vsl_position_ids_from_the_second_position_on():
    rows = LM_VSL.copy()
    rows[0, 4, 0] = 1  # the first position: only "does not start with a document"
    assert check(rows, spec("LMData_VSL")) == [
        "1 row whose real part does not start with a document (position_ids[0] is not 0) (first: row 0, position 0: "
        "position_ids 1)"]
    rows = LM_VSL.copy()
    rows[1, 4, 1] = 3
    assert check(rows, spec("LMData_VSL")) == [
        "1 row whose position_ids do not count 0, 1, 2, ... from each document's start (first: row 1, position 1: 3, "
        "expected 1)"]


def test_the_first_padding_position_trained():
    rows = LM_VSL.copy()
    rows[1, 1, 2] = 1  # row 1's real part is positions 0-1
    assert check(rows, spec("LMData_VSL")) == [
        "1 padding position is trained: mask not 0 (first: row 1, position 2: 1)"]


def test_a_dpo_side_without_a_trained_position_is_not_compared():
    """A side with no trained position is reported as such; its prompt (unknown) is not compared with the other
    side's."""
    row = np.full((1, 6, 8), PAD, np.int64)
    for k, (prompt, response) in enumerate((([1, 2, 3], [11, EOS]), ([1, 2, 3], [12, 13, EOS]))):
        s = prompt + response
        row[0, 3 * k, :len(s)] = s
        row[0, 3 * k + 1] = 0
        row[0, 3 * k + 1, len(prompt) - 1:len(s) - 1] = 1
        row[0, 3 * k + 2, len(prompt) - 1:len(s) - 1] = response
    dpo = spec("DPO", features=DPO_FEATURES)
    assert check(row, dpo) == []
    for side in (0, 1):
        bad = row.copy()
        bad[0, 3 * side + 1] = 0
        bad[0, 3 * side, 0] = 9
        name = ("chosen", "rejected")[side]
        assert check(bad, dpo) == [
            "1 side whose mask is not one run of trained positions (those whose labels are the response) as DPO "
            f"writes it (first: row 0 ({name}): no trained position)"]


def test_only_vsl_modes_count_documents_before_packing():
    assert V.count_rows(LM_VSL, spec("LMData_VSL"))["num_sequences_before_packing"] == 3
    assert "num_sequences_before_packing" not in V.count_rows(LM_VSL, spec("LMData", features=VSL_FEATURES))


def test_statistics_boundaries_and_defaults():
    # the packing factor is rounded to 4 decimals: half the last digit either way is accepted, the bound included
    assert V._same(0.00005, 0.0) and V._same(-0.00005, 0.0) and not V._same(0.0000501, 0.0)
    # without a reason given, the detokenized sizes are said to be unchecked for want of a tokenizer
    params = _good_params()
    problems, notes = V.check_stats(params, COUNTS, spec("LMData"), file_rows=FILES, detokenized=None)
    assert problems == [] and notes == ["h5_dataset_stats.detokenized_chars/bytes not checked: no tokenizer"]
    # the character average too is ceil(raw / n_examples)
    params["post-process"].update(raw_chars_count=9, average_chars_per_sequence=2)
    assert stats(params)[0] == ["post-process.average_chars_per_sequence is 2, ceil(raw_chars_count / n_examples) "
                                "is 3"]


def test_a_mask_layout_problem_names_its_row_in_the_file():
    rows = LM.copy()
    rows[1, 1, 2] = 0
    assert check(rows, spec("LMData"), start=5) == [
        "1 row whose mask is not trained positions first, then untrained ones as LMData writes it (first: row 6)"]
