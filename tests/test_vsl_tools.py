"""The tools on 5-feature (VSL) datasets: `verify` accepts good rows and names each broken invariant with its row,
`inspect` shows the documents of a row, `report` builds, and the reader yields the five features by name.

Hand-made datasets are the worked examples of MODES.md §A1.6 / §A2.3 written with `write_shard`, beside a
hand-written data_params.json; the reference's own VSL outputs are in ../shared/reference/golden-vsl.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat

import h5py
import numpy as np
import pytest

from pipelines.create_hdf5_dataset import main
from pipelines.tools import inspect_row, verify_dataset
from tests.helpers import (REFERENCE, ROOT, SHARD, assert_verifies_without_a_tokenizer, require_shared, set_value,
                           verify_problems, write_dataset)
from transforms.core import verify as V
from transforms.core.features import LM_FEATURES, VSL_FEATURES
from transforms.io.dataset import H5Dataset, open_dataset_tokenizer
from transforms.io.hdf5_format import write_shard

EOS, PAD, SEP, VOCAB, MSL = 50, 99, 77, 100, 8
GOLDEN_VSL = REFERENCE / "golden-vsl"
GOLDEN_VSL_CASES = ["vsl_lm_gpt2_small_256", "vsl_summ_gpt2_small_256"]
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
_PROCESSORS = {"LMData_VSL": "VSLLMDataPreprocessor", "Summarization_VSL": "VSLSummarizationPreprocessor"}


def _rows(*rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int32)


def _window(first: int) -> list[list[int]]:
    """A full fold window of msl + 1 tokens first .. first + 8 (MODES.md §A1.6)."""
    return [list(range(first, first + 8)), [1] * 8, list(range(first + 1, first + 9)), list(range(7, -1, -1)),
            list(range(8))]


# MODES.md §A1.6: documents [1,2,3,EOS] and [4,5,EOS] in one row; then the fold example, 19 tokens + EOS:
# windows [1..9], [9..17] and the remainder [17,18,19,EOS].
LM_ROWS = _rows(
    [[1, 2, 3, 4, 5, PAD, PAD, PAD],
     [1, 1, 1, 1, 1, 0, 0, 0],
     [2, 3, EOS, 5, EOS, PAD, PAD, PAD],
     [2, 1, 0, 1, 0, 0, 0, 0],
     [0, 1, 2, 0, 1, 0, 0, 0]],
    _window(1),
    _window(9),
    [[17, 18, 19, PAD, PAD, PAD, PAD, PAD],
     [1, 1, 1, 0, 0, 0, 0, 0],
     [18, 19, EOS, PAD, PAD, PAD, PAD, PAD],
     [2, 1, 0, 0, 0, 0, 0, 0],
     [0, 1, 2, 0, 0, 0, 0, 0]],
)

# MODES.md §A2.3: pairs (P=[1,2], C=[3,4]) and (P=[5], C=[6]), with sep 77 (row 0) and without (row 1).
SUMM_ROWS = _rows(
    [[1, 2, SEP, 3, 4, 5, SEP, 6],
     [0, 0, 1, 1, 1, 0, 1, 1],
     [2, SEP, 3, 4, EOS, SEP, 6, EOS],
     [4, 3, 2, 1, 0, 2, 1, 0],
     [0, 1, 2, 3, 4, 0, 1, 2]],
    [[1, 2, 3, 4, 5, 6, PAD, PAD],
     [0, 1, 1, 1, 1, 1, 0, 0],
     [2, 3, 4, EOS, 6, EOS, PAD, PAD],
     [3, 2, 1, 0, 1, 0, 0, 0],
     [0, 1, 2, 3, 0, 1, 0, 0]],
)


def _params(mode: str, rows: np.ndarray, *, inverted: bool = False, tokenizer: bool = False,
            detok: tuple = (0, 0)) -> dict:
    """data_params.json as our pipeline writes it for these rows (statistics as the contract defines them)."""
    n, _, msl = rows.shape
    trained = rows[:, 1] == (0 if inverted else 1)
    ends = [int(np.flatnonzero(t)[-1]) + 1 if t.any() else 0 for t in trained]
    docs = sum(int((r[4, :e] == 0).sum()) for r, e in zip(rows, ends))
    loss, real = int(trained.sum()), sum(ends)
    processing = {"max_seq_length": msl, "eos_id": EOS, "pad_id": PAD}
    if tokenizer:
        processing.update(tokenizer_type="GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                          encoder_file=str(GPT2 / "encoder.json"))
    return {
        "setup": {"mode": mode, "dataset_processor": _PROCESSORS[mode]},
        "processing": processing,
        "dataset": {"inverted_mask": inverted, "position_ids_dtype": "int32",
                    **({"fold_long_doc": True} if mode == "LMData_VSL" else {})},
        "features": list(VSL_FEATURES),
        "tokenizer": {"sep_id": SEP} if mode == "Summarization_VSL" else {},
        "post-process": {"n_examples": n, "num_tokens": n * msl, "loss_valid_tokens": loss,
                         "num_masked_tokens": n * msl - loss, "num_pad_tokens": n * msl - real,
                         "num_sequences_before_packing": docs, "vsl_packing_factor": round(docs / n, 4) if n else 0.0,
                         "eos_id": EOS, "pad_id": PAD, "vocab_size": 50257 if tokenizer else VOCAB,
                         "processed_files": docs, "discarded_files": 0, "successful_files": docs},
        "h5_dataset_stats": {"num_sequences": n, "num_tokens": n * msl, "loss_valid_tokens": loss,
                             "non_pad_tokens": real, "detokenized_chars": detok[0], "detokenized_bytes": detok[1]},
        "files": {SHARD: n},
        "input": {"documents_read": docs, "good": docs, "bad": 0, "used": docs, "dropped": 0},
    }


def _dataset(path, mode: str, rows: np.ndarray, params: dict | None = None, **options):
    return write_dataset(path, rows, params if params is not None else _params(mode, rows, **options))


_problems = verify_problems


# ------------------------------------------------------------------------------------------- good datasets


def test_the_worked_examples_recount_as_the_contract_says():
    lm, summ = _params("LMData_VSL", LM_ROWS), _params("Summarization_VSL", SUMM_ROWS)
    assert {k: lm["post-process"][k] for k in ("loss_valid_tokens", "num_pad_tokens", "num_sequences_before_packing",
                                               "vsl_packing_factor")} == {
        "loss_valid_tokens": 24, "num_pad_tokens": 8, "num_sequences_before_packing": 5, "vsl_packing_factor": 1.25}
    assert {k: summ["post-process"][k] for k in ("loss_valid_tokens", "num_pad_tokens", "num_sequences_before_packing",
                                                 "vsl_packing_factor")} == {
        "loss_valid_tokens": 10, "num_pad_tokens": 2, "num_sequences_before_packing": 4, "vsl_packing_factor": 2.0}


@pytest.mark.parametrize("mode, rows", [("LMData_VSL", LM_ROWS), ("Summarization_VSL", SUMM_ROWS)])
@pytest.mark.parametrize("inverted", [False, True])
def test_verify_passes_on_the_worked_examples(tmp_path, capsys, mode, rows, inverted):
    if inverted:
        rows = rows.copy()
        rows[:, 1] = 1 - rows[:, 1]  # the whole mask row flips, padding included
    assert_verifies_without_a_tokenizer(_dataset(tmp_path / "out", mode, rows, inverted=inverted), capsys, mode,
                                        len(rows))


def test_verify_recounts_our_detokenized_sizes_over_the_real_part(tmp_path):
    """With a tokenizer, detokenized_* are the decoded inputs of positions [0, R), padding left out."""
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS, tokenizer=True)
    params = json.loads((out / "data_params.json").read_text())
    tok, how = open_dataset_tokenizer(str(out), params)
    assert tok is not None, how
    texts = [tok.decode(r[0, :int(np.flatnonzero(r[1])[-1]) + 1].tolist()) for r in LM_ROWS]
    detok = (sum(map(len, texts)), sum(len(t.encode()) for t in texts))
    assert detok[0] < sum(len(tok.decode(r[0].tolist())) for r in LM_ROWS)  # padding would count
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS, tokenizer=True, detok=detok)
    res = verify_dataset(str(out))
    assert res.ok, res.lines()
    assert not any("not checked" in n or "not rebuilt" in n for n in res.notes), res.notes
    params["h5_dataset_stats"]["detokenized_bytes"] = detok[1] + 1
    (out / "data_params.json").write_text(json.dumps(params | {"h5_dataset_stats": {
        **params["h5_dataset_stats"], "detokenized_chars": detok[0], "detokenized_bytes": detok[1] + 1}}))
    assert _problems(out) == [f"data_params.json: h5_dataset_stats.detokenized_bytes is {detok[1] + 1}, "
                              f"the files recount to {detok[1]}"]


def test_position_ids_and_spans_beyond_vocab_size_are_not_ids(tmp_path):
    """One document of 127 positions in a 128 row with a vocabulary of 100: span and position reach 126
    (the reference's verification rejects this, MODES.md §A5.9)."""
    tokens = [1 + i % 40 for i in range(127)] + [EOS]
    row = np.zeros((1, 5, 128), dtype=np.int32)
    row[0, 0, :127], row[0, 2, :127] = tokens[:-1], tokens[1:]
    row[0, 0, 127] = row[0, 2, 127] = PAD
    row[0, 1, :127] = 1
    row[0, 3, :127] = np.arange(126, -1, -1)
    row[0, 4, :127] = np.arange(127)
    out = _dataset(tmp_path / "out", "LMData_VSL", row)
    assert _problems(out) == []


# ------------------------------------------------------------------------------------- broken invariants


_set = set_value


# (mode, change to the good rows, the problem verify must report: it names the file and the first row)
BROKEN = {
    "first document starts at 0": (
        "LMData_VSL", _set(0, 4, 0, 1),
        "1 row whose real part does not start with a document (position_ids[0] is not 0) (first: row 0, position 0: "
        "position_ids 1)"),
    "position_ids count up": (
        "LMData_VSL", _set(1, 4, 3, 5),
        "1 row whose position_ids do not count 0, 1, 2, ... from each document's start (first: row 1, position 3: "
        "5, expected 3)"),
    "attention_span counts down to 0": (
        "LMData_VSL", _set(2, 3, 5, 9),
        "1 row whose attention_span does not count down to 0 at each document's last position (first: row 2, "
        "position 5: 9, expected 2)"),
    "a document's last span is 0": (
        "Summarization_VSL", _set(1, 3, 3, 1),
        "1 row whose attention_span does not count down to 0 at each document's last position (first: row 1, "
        "position 3: 1, expected 0)"),
    "labels are the next input inside a document": (
        "LMData_VSL", _set(0, 2, 1, 7),
        "1 row whose labels are not input_ids shifted by one inside each document (first: row 0, position 1: "
        "label 7, next input_id 3)"),
    "pad input_ids": (
        "LMData_VSL", _set(3, 0, 6, 5),
        "1 input_ids after the real part are not pad_id 99 (first: row 3, position 6: 5)"),
    "pad labels": (
        "Summarization_VSL", _set(1, 2, 7, 0),
        "1 labels after the real part are not pad_id 99 (first: row 1, position 7: 0)"),
    "pad attention_span": (
        "LMData_VSL", _set(0, 3, 6, 1),
        "1 attention_span after the real part are not 0 (first: row 0, position 6: 1)"),
    "pad position_ids": (
        "LMData_VSL", _set(3, 4, 7, 4),
        "1 position_ids after the real part are not 0 (first: row 3, position 7: 4)"),
    "pad mask": (
        "LMData_VSL", _set(3, 1, 5, 1),
        "1 padding position is trained: mask not 0 (first: row 3, position 5: 1)"),
    "mask values": (
        "Summarization_VSL", _set(1, 1, 7, 2),
        "1 attention_mask values are neither 0 nor 1 (first: row 1, position 7: 2)"),
    "LMData_VSL trains every real position": (
        "LMData_VSL", _set(1, 1, 3, 0),
        "1 row whose mask is not trained on every real position as LMData_VSL writes it (first: row 1, "
        "position 3: not trained)"),
    "Summarization_VSL trains one run per document": (
        "Summarization_VSL", _set(0, 1, 3, 0),
        "1 row whose mask is not one run of trained positions per document, ending at its last position as "
        "Summarization_VSL writes it (first: row 0, position 2: trained, the next position of its document not)"),
    "Summarization_VSL trains each document's last position": (
        "Summarization_VSL", _set(1, 1, 3, 0),
        "1 row whose mask is not one run of trained positions per document, ending at its last position as "
        "Summarization_VSL writes it (first: row 1, position 2: trained, the next position of its document not)"),
    "Summarization_VSL documents end with EOS": (
        "Summarization_VSL", _set(0, 2, 4, 4),
        "1 document whose last label (a trained position) is not EOS 50 (first: row 0, position 4: 4)"),
    "labels below vocab_size": (
        "Summarization_VSL", _set(0, 2, 0, VOCAB),
        "1 labels >= vocab_size 100 (max 100; first: row 0, position 0: 100)"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_verify_names_each_broken_invariant_and_its_row(tmp_path, name):
    mode, change, problem = BROKEN[name]
    rows = (LM_ROWS if mode == "LMData_VSL" else SUMM_ROWS).copy()
    params = _params(mode, rows)  # the statistics of the good rows: only the row checks may complain
    change(rows)
    out = _dataset(tmp_path / "out", mode, rows, params)
    problems = [p for p in _problems(out) if not p.startswith("data_params.json: ")]
    assert f"{SHARD}: {problem}" in problems, problems


def test_a_broken_invariant_in_an_inverted_dataset(tmp_path):
    rows = LM_ROWS.copy()
    rows[:, 1] = 1 - rows[:, 1]
    params = _params("LMData_VSL", rows, inverted=True)
    rows[0, 1, 6] = 0  # padding marked trained (inverted: 0)
    out = _dataset(tmp_path / "out", "LMData_VSL", rows, params)
    assert (f"{SHARD}: 1 padding position is trained: inverted mask not 1 (first: row 0, position 6: 0)"
            in _problems(out))


def test_the_feature_count_must_match(tmp_path):
    out = _dataset(tmp_path / "vsl", "LMData_VSL", LM_ROWS[:, :3], _params("LMData_VSL", LM_ROWS))
    assert (f"{SHARD}: dataset 'data' holds 3 features per row (shape (4, 3, 8)), but data_params.json expects 5 "
            "(input_ids, attention_mask, labels, attention_span, position_ids)") in _problems(out)
    params = _params("LMData_VSL", LM_ROWS)
    params["features"] = list(LM_FEATURES)
    out = _dataset(tmp_path / "named", "LMData_VSL", LM_ROWS, params)
    problems = _problems(out)
    assert ("data_params.json: features is ['input_ids', 'attention_mask', 'labels'], but LMData_VSL rows hold "
            "['input_ids', 'attention_mask', 'labels', 'attention_span', 'position_ids']") in problems
    assert f"{SHARD}: dataset 'data' holds 5 features per row (shape (4, 5, 8)), but data_params.json expects 3 " \
           "(input_ids, attention_mask, labels)" in problems


def test_without_a_features_list_a_vsl_processor_means_five(tmp_path):
    params = _params("LMData_VSL", LM_ROWS)
    del params["features"]
    res = verify_dataset(str(_dataset(tmp_path / "out", "LMData_VSL", LM_ROWS, params)))
    assert res.ok, res.lines()
    assert any("no features list: rows read as input_ids, attention_mask, labels, attention_span, position_ids"
               in n for n in res.notes)


def test_packing_statistics_are_recounted(tmp_path):
    params = _params("LMData_VSL", LM_ROWS)
    params["post-process"]["num_sequences_before_packing"] = 6
    params["post-process"]["vsl_packing_factor"] = 1.25004  # within the rounding to 4 decimals: accepted
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS, params)
    assert _problems(out) == ["data_params.json: post-process.num_sequences_before_packing is 6, "
                              "the files recount to 5"]
    params["post-process"]["num_sequences_before_packing"] = 5
    params["post-process"]["vsl_packing_factor"] = 1.2
    del params["post-process"]["num_masked_tokens"]
    (out / "data_params.json").write_text(json.dumps(params))
    assert _problems(out) == ["data_params.json: post-process.num_masked_tokens is missing",
                              "data_params.json: post-process.vsl_packing_factor is 1.2, the files recount to 1.25"]


def test_vsl_statistics_in_both_conventions():
    rows = LM_ROWS.copy()
    rows[:, 1] = 1 - rows[:, 1]
    ours = V.DatasetSpec("LMData_VSL", V.OURS, True, 8, VOCAB, EOS, PAD)
    ref = V.DatasetSpec("LMData_VSL", V.REFERENCE, True, 8, VOCAB, EOS, PAD)
    counts, ref_counts = V.count_rows(rows, ours), V.count_rows(rows, ref)
    assert V.documents_per_row(rows, ours).tolist() == [2, 1, 1, 1]
    assert V.expected_post_process(counts, ours) == {
        "n_examples": 4, "num_tokens": 32, "loss_valid_tokens": 24, "num_masked_tokens": 8, "num_pad_tokens": 8,
        "num_sequences_before_packing": 5, "vsl_packing_factor": 1.25}
    assert V.expected_post_process(ref_counts, ref) == {"n_examples": 4}  # its post-process has no token counts
    assert V.expected_h5_dataset_stats(counts, ours) == {
        "num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 24, "non_pad_tokens": 24}
    # The reference sums the mask row (the 8 padding positions when inverted) and counts ids neither EOS nor pad.
    assert V.expected_h5_dataset_stats(ref_counts, ref) == {
        "num_sequences": 4, "num_tokens": 32, "loss_valid_tokens": 8, "non_pad_tokens": 24}
    assert V.detokenized_inputs(rows, ref)[0] == rows[0, 0].tolist()  # whole rows, padding included
    assert V.detokenized_inputs(rows, ours)[0] == [1, 2, 3, 4, 5]
    assert V.expected_post_process({}, ours)["vsl_packing_factor"] == 0.0


# ------------------------------------------------------------------------------- the reference's VSL output


@pytest.mark.parametrize("case", GOLDEN_VSL_CASES)
def test_verify_passes_on_the_reference_vsl_outputs(capsys, case):
    require_shared(GOLDEN_VSL)
    out = GOLDEN_VSL / case / "out"
    code = main(["verify", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, "\n".join(lines)
    mode = "LMData_VSL" if "_lm_" in case else "Summarization_VSL"
    assert lines[-1].startswith(f"verify {out}: OK") and f"{mode} (reference output)" in lines[-1]
    # Every h5_dataset_stats number was recounted, detokenized sizes included (the tokenizer was rebuilt).
    assert not any("not checked" in line or "not rebuilt" in line for line in lines), lines


@pytest.fixture
def golden_copy(tmp_path):
    require_shared(GOLDEN_VSL)
    dst = tmp_path / "copy"
    shutil.copytree(GOLDEN_VSL / "vsl_summ_gpt2_small_256" / "out", dst)
    for name in os.listdir(dst):
        os.chmod(dst / name, stat.S_IRUSR | stat.S_IWUSR)
    return dst


def test_verify_checks_the_reference_rows_and_statistics(golden_copy):
    with h5py.File(golden_copy / "examples_0_0.h5", "a") as f:
        row = f["data"][5]
        row[4, 3] += 1
        f["data"][5] = row
    params = json.loads((golden_copy / "data_params.json").read_text())
    params["h5_dataset_stats"]["non_pad_tokens"] += 1
    (golden_copy / "data_params.json").write_text(json.dumps(params))
    problems = _problems(golden_copy)
    assert len(problems) == 2, problems
    assert problems[0].startswith("examples_0_0.h5: 1 row whose position_ids do not count 0, 1, 2, ... from each "
                                  "document's start (first: row 5, position 3:")
    assert problems[1].startswith("data_params.json: h5_dataset_stats.non_pad_tokens is")


# ------------------------------------------------------------------------------------------------- inspect


def test_inspect_shows_each_document_on_its_own_lines(tmp_path):
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS)
    text = inspect_row(str(out), row=0)
    header, body = text.split("─" * 60 + "\n", 1)
    assert "examples_0.h5 row 0 of 4 · LMData_VSL · 8 positions: 5 real, 5 trained, 3 pad, 2 documents" in header
    assert "── document k/m = a document starts (position_ids 0)" in header
    # No tokenizer: ids are shown; a document's first token is context only, its EOS is its last label.
    assert body == ("── document 1/2 · positions 0–2 · 3 positions, 3 trained\n"
                    "[1 ]2 3 ⟨EOS⟩\n"
                    "── document 2/2 · positions 3–4 · 2 positions, 2 trained\n"
                    "[4 ]5 ⟨EOS⟩\n"
                    "… 3 pad")


def test_inspect_brackets_each_prompt_of_a_summarization_row(tmp_path):
    out = _dataset(tmp_path / "out", "Summarization_VSL", SUMM_ROWS)
    body = inspect_row(str(out), row=0).split("─" * 60 + "\n", 1)[1]
    assert body == ("── document 1/2 · positions 0–4 · 5 positions, 3 trained\n"
                    "[1 2 ⟨SEP⟩]3 4 ⟨EOS⟩\n"
                    "── document 2/2 · positions 5–7 · 3 positions, 2 trained\n"
                    "[5 ⟨SEP⟩]6 ⟨EOS⟩")
    body = inspect_row(str(out), row=-1).split("─" * 60 + "\n", 1)[1]
    # No sep: the last prompt position is trained, so only the first prompt token is context.
    assert body.splitlines()[1::2] == ["[1 2 ]3 4 ⟨EOS⟩", "[5 ]6 ⟨EOS⟩"]
    assert body.endswith("\n… 2 pad")


def test_inspect_ids_shows_span_and_position_columns(tmp_path):
    out = _dataset(tmp_path / "out", "Summarization_VSL", SUMM_ROWS)
    lines = inspect_row(str(out), row=1, ids=True).split("─" * 60 + "\n", 1)[1].splitlines()
    assert lines[0].split() == ["pos", "input", "token", "mask", "span", "pos_id", "label", "token"]
    assert lines[1] == "── document 1/2 · positions 0–3 · 4 positions, 3 trained"
    assert lines[2].split() == ["0", "1", "'1", "'", "0", "3", "0", "2", "'2", "'"]
    assert lines[6] == "── document 2/2 · positions 4–5 · 2 positions, 2 trained"
    assert lines[8].split() == ["5", "6", "'6", "'", "1", "0", "1", "50", "⟨EOS⟩"]
    assert lines[-1] == "… 2 pad"


def test_inspect_a_reference_vsl_row(capsys):
    require_shared(GOLDEN_VSL)
    assert main(["inspect", str(GOLDEN_VSL / "vsl_summ_gpt2_small_256" / "out"), "--row", "3",
                 "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "row 3 of 96 · Summarization_VSL (reference output)" in out and "4 documents" in out
    docs = re.findall(r"^── document (\d)/4 · positions (\d+)–(\d+)", out, re.M)
    assert [d[0] for d in docs] == ["1", "2", "3", "4"] and docs[0][1] == "0"
    # Each document: the prompt up to its sep is context, the completion and EOS are trained.
    body = out.split("─" * 60 + "\n", 1)[1]
    assert body.count("⟨SEP⟩] ") == 4 and body.count("⟨EOS⟩\n") == 4


# ------------------------------------------------------------------------------------------ report, reader


def test_report_counts_documents_from_position_ids(tmp_path):
    pytest.importorskip("matplotlib")
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS)
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text()
    assert "Documents packed into each row" in text and "mean 1.25" in text
    assert "<th>documents (packed segments)</th><td>5</td>" in text
    assert "<th>documents per sequence</th><td>1.2500</td>" in text
    assert "<th>fold_long_doc</th><td>True</td>" in text
    assert text.count('src="data:image/png;base64,') == 6


def test_report_on_a_reference_vsl_output(tmp_path):
    pytest.importorskip("matplotlib")
    require_shared(GOLDEN_VSL)
    out = tmp_path / "report.html"
    assert main(["report", str(GOLDEN_VSL / "vsl_lm_gpt2_small_256" / "out"), "--output", str(out)]) == 0
    text = out.read_text()
    assert "<th>documents (packed segments)</th><td>408</td>" in text  # position_ids 0 in the real parts


def test_reader_yields_the_five_features_by_name(tmp_path):
    out = _dataset(tmp_path / "out", "LMData_VSL", LM_ROWS)
    ds = H5Dataset(str(out))
    assert ds.features == VSL_FEATURES
    rows = list(ds)
    assert len(rows) == 4 and list(rows[0]) == list(VSL_FEATURES)
    for i, name in enumerate(VSL_FEATURES):
        np.testing.assert_array_equal(np.stack([r[name] for r in rows]), LM_ROWS[:, i])
    (batch,) = list(H5Dataset(str(out), batch_size=4))
    assert batch["position_ids"].shape == (4, MSL) and batch["attention_span"][0].tolist() == [2, 1, 0, 1, 0, 0, 0, 0]


def test_reader_names_without_a_features_list(tmp_path):
    params = _params("Summarization_VSL", SUMM_ROWS)
    del params["features"]
    out = _dataset(tmp_path / "processor", "Summarization_VSL", SUMM_ROWS, params)
    assert H5Dataset(str(out)).features == VSL_FEATURES
    out = tmp_path / "bare"  # no data_params.json: the first file's shape says
    out.mkdir()
    write_shard(str(out / SHARD), SUMM_ROWS)
    assert set(next(iter(H5Dataset(str(out))))) == set(VSL_FEATURES)
    (out / "data_params.json").write_text(json.dumps({"setup": {"mode": "LMData"}}))  # says 3: an error
    with pytest.raises(ValueError, match="rows of shape \\(5, 8\\), but the dataset's features are 3"):
        list(H5Dataset(str(out)))


def test_reader_of_a_reference_vsl_output():
    require_shared(GOLDEN_VSL)
    rows = list(H5Dataset(str(GOLDEN_VSL / "vsl_lm_gpt2_small_256" / "out"), batch_size=100))
    assert [len(b["position_ids"]) for b in rows] == [100, 100, 12]
    assert set(rows[0]) == set(VSL_FEATURES)
