"""`create_hdf5_dataset verify`: passes on good outputs (ours and the reference's), fails naming the file and
the problem on corrupted copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipelines.create_hdf5_dataset import main
from tests.helpers import GOLDEN, REFERENCE, ROOT, h5_files, require_shared, run_job
from transforms.core import verify as V
from transforms.core.summarization import SummarizationConfig, summarization_row

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
SAMPLE = ROOT / "data" / "sample"
GPT2_ARGS = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]


def _summarization_input(path) -> None:
    """Prompt/completion records cut from the sample corpus."""
    lines = []
    for line in (SAMPLE / "jargon_devil_sample.jsonl").read_text().splitlines()[:60]:
        text = json.loads(line)["text"]
        lines.append(json.dumps({"prompt": "Define: " + text[:200], "completion": text[200:320]}))
    path.mkdir()
    (path / "part_0.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Our three modes, produced once; FIM needs the shared tokenizer with sentinels."""
    base = tmp_path_factory.mktemp("verify")
    out = {}
    out["LMData"] = base / "lm"
    run_job(["LMData", "--input_dir", str(SAMPLE), "--output_dir", str(out["LMData"]), *GPT2_ARGS,
             "--max_seq_length", "128", "--files_per_record", "400", "--pack_sequences", "False"])
    _summarization_input(base / "sum_in")
    out["Summarization"] = base / "sum"
    run_job(["Summarization", "--input_dir", str(base / "sum_in"), "--output_dir", str(out["Summarization"]),
             *GPT2_ARGS, "--max_seq_length", "128", "--prompt_key", "prompt", "--completion_key", "completion"])
    if REFERENCE.exists():
        out["FIM"] = base / "fim"
        run_job(["FIM", "--input_dir", str(REFERENCE / "inputs" / "fim"), "--output_dir", str(out["FIM"]),
                 "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer",
                 str(REFERENCE / "tokenizer" / "hf"), "--max_seq_length", "128", "--files_per_record", "150",
                 "--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok", "<fim_middle>",
                 "--fim_suffix_tok", "<fim_suffix>"])
    return out


def _verify(capsys, out, *extra) -> tuple[int, list[str]]:
    code = main(["verify", str(out), *extra])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("mode", ["LMData", "Summarization", "FIM"])
def test_verify_passes_on_our_outputs(outputs, capsys, mode):
    if mode not in outputs:
        require_shared(REFERENCE)
    code, lines = _verify(capsys, outputs[mode])
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith(f"verify {outputs[mode]}: OK") and mode in lines[-1]
    # The tokenizer was rebuilt, so every statistic was recounted, detokenized ones included.
    assert not any("not checked" in line or "not rebuilt" in line for line in lines), lines


GOLDEN_CASES = sorted(p.parent.name for p in GOLDEN.glob("*/out")) if GOLDEN.exists() else ["<absent>"]


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_verify_passes_on_reference_goldens(capsys, case):
    require_shared(GOLDEN)
    code, lines = _verify(capsys, GOLDEN / case / "out")
    assert code == 0, "\n".join(lines)
    assert "(reference output)" in lines[-1]


# ------------------------------------------------------------------ corrupted copies


@pytest.fixture
def lm_copy(outputs, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(outputs["LMData"], dst)
    return dst


def _rewrite(path, *, chunks="same", data=None, attrs=True):
    """Rewrite one shard with h5py, changing only what is asked."""
    with h5py.File(path, "r") as f:
        rows = f["data"][()] if data is None else data
        n_examples = f.attrs["n_examples"]
        old_chunks = f["data"].chunks
    path.unlink()
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=rows, dtype="i4", chunks=old_chunks if chunks == "same" else chunks,
                         compression="gzip")
        if attrs:
            f.attrs["n_examples"] = n_examples


def _problems_for(lines, name) -> list[str]:
    return [line for line in lines if line.startswith(f"{name}: ")]


def test_wrong_chunks_are_reported(lm_copy, capsys):
    first = h5_files(lm_copy)[0]
    _rewrite(Path(first), chunks=(4, 3, 128))
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    name = first.rsplit("/", 1)[-1]
    assert any("chunks (4, 3, 128), expected (1, 3, 128)" in p for p in _problems_for(lines, name)), lines
    assert "FAILED" in lines[-1]


def test_missing_attribute_is_reported(lm_copy, capsys):
    path = h5_files(lm_copy)[1]
    with h5py.File(path, "a") as f:
        del f.attrs["n_examples"]
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    assert any("attribute n_examples is missing" in p for p in _problems_for(lines, path.rsplit("/", 1)[-1])), lines


def test_wrong_n_examples_is_reported(lm_copy, capsys):
    path = h5_files(lm_copy)[0]
    with h5py.File(path, "a") as f:
        n = f["data"].shape[0]
        f.attrs["n_examples"] = np.int64(n + 1)
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    assert any(f"attribute n_examples {n + 1} != {n} rows" in p
               for p in _problems_for(lines, path.rsplit("/", 1)[-1])), lines


def test_id_at_or_above_vocab_size_is_reported(lm_copy, capsys):
    path = h5_files(lm_copy)[-1]
    vocab = json.loads((lm_copy / "data_params.json").read_text())["post-process"]["vocab_size"]
    with h5py.File(path, "a") as f:
        row = f["data"][2]
        row[0, 1] = vocab
        f["data"][2] = row
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    problems = _problems_for(lines, path.rsplit("/", 1)[-1])
    assert any(f"1 input_ids >= vocab_size {vocab} (max {vocab}; first: row 2, position 1" in p
               for p in problems), lines
    # The same id also breaks the shift (labels[0] no longer equals input_ids[1]).
    assert any("shifted by one" in p for p in problems), lines


def test_stats_that_do_not_recount_are_reported(lm_copy, capsys):
    params_path = lm_copy / "data_params.json"
    params = json.loads(params_path.read_text())
    params["post-process"]["num_pad_tokens"] += 1
    params["h5_dataset_stats"]["detokenized_chars"] -= 3
    params_path.write_text(json.dumps(params))
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    problems = _problems_for(lines, "data_params.json")
    assert any(p.startswith("data_params.json: post-process.num_pad_tokens is") for p in problems), lines
    assert any(p.startswith("data_params.json: h5_dataset_stats.detokenized_chars is") for p in problems), lines
    assert len(problems) == 2, problems


def test_rows_changed_behind_the_stats_back_are_reported(lm_copy, capsys):
    """A padded row given one more real position: file-level checks pass, the recount does not."""
    path = h5_files(lm_copy)[0]
    with h5py.File(path, "r") as f:
        rows = f["data"][()]
    r = int(np.flatnonzero(rows[:, 1, -1] == 0)[0])  # a padded row
    k = int(rows[r, 1].sum())
    rows[r, 1, k] = 1
    rows[r, 0, k] = rows[r, 2, k - 1]  # keep the shift consistent
    _rewrite(Path(path), data=rows)
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    problems = _problems_for(lines, "data_params.json")
    assert any("post-process.loss_valid_tokens is" in p for p in problems), lines
    assert not _problems_for(lines, path.rsplit("/", 1)[-1]), lines


def test_model_config_mismatch_is_reported(lm_copy, capsys):
    code, lines = _verify(capsys, lm_copy, "--max_seq_length", "256", "--vocab_size", "50000")
    assert code == 1
    assert any("rows hold 128 tokens but max_seq_length is 256" in line for line in lines), lines
    assert any("vocab_size 50257 > the model's vocab_size 50000" in line for line in lines), lines
    code, lines = _verify(capsys, lm_copy, "--max_seq_length", "128", "--vocab_size", "50304")
    assert code == 0, lines


def test_missing_params_and_missing_dir(lm_copy, capsys, tmp_path):
    (lm_copy / "data_params.json").unlink()
    code, lines = _verify(capsys, lm_copy)
    assert code == 1
    assert any(line.startswith("data_params.json: missing") for line in lines), lines
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


# ------------------------------------------------------------------------ pure checks


def test_summarization_row_checks():
    cfg = SummarizationConfig(max_seq_length=12, eos_id=0, pad_id=1, min_sequence_len=1)
    row, _ = summarization_row(np.array([5, 6, 7]), np.array([8, 9]), cfg)
    spec = V.DatasetSpec("Summarization", V.OURS, False, 12, 20, 0, 1)
    good = V.RowChecker(spec, 20)
    good.add(row[None])
    assert good.problems() == []
    assert V.real_lengths(row[None], spec).tolist() == [6]  # prompt, completion, EOS
    bad = row.copy()
    bad[2, 4] = 9  # the last trained label must be EOS (0)
    checker = V.RowChecker(spec, 20)
    checker.add(bad[None], start=7)
    problems = checker.problems()
    assert any("last trained label is not EOS 0 (first: row 7, position 4" in p for p in problems), problems
    assert any("shifted by one" in p for p in problems), problems


def test_reference_conventions_for_statistics():
    counts = {"num_sequences": 2, "num_tokens": 20, "loss_valid_tokens": 6, "num_masked_tokens": 14,
              "non_pad_tokens": 10, "num_pad_tokens": 10, "input_ids_equal_pad_id": 13}
    ours = V.DatasetSpec("Summarization", V.OURS, False)
    ref = V.DatasetSpec("Summarization", V.REFERENCE, False)
    assert V.expected_post_process(counts, ours)["num_pad_tokens"] == 10
    assert V.expected_post_process(counts, ref)["num_pad_tokens"] == 12  # one per row too many (SPEC §1e)
    assert V.expected_post_process(counts, ref)["num_masked_tokens"] == 16
    fim_ref = V.DatasetSpec("FIM", V.REFERENCE, False)
    assert V.expected_post_process(counts, fim_ref)["num_pad_tokens"] == 13  # input ids equal to pad_id
    spec, notes = V.dataset_spec({"setup": {"dataset_processor": "LMDataPreprocessor"},
                                  "dataset": {"inverted_mask": True}})
    assert spec.producer == V.REFERENCE and not spec.inverted_mask and notes
