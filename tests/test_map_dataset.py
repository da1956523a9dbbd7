"""The training-side readers: rows by index equal to the files, Hugging Face's convention, Grain's loader.

Rows are read back from what every mode's job wrote; the conversion is
checked against rows written out by hand, and on every row of every mode
against the rule itself: the (position, target) pairs a causal LM trains
under Hugging Face's shift are the Cerebras row's, minus only its last.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers import GOLDEN, REFERENCE, SHARED, h5_files, read_rows, require_shared, run_job
from transforms.core.hf import IGNORE_INDEX, to_hf_causal_lm
from transforms.io.map_dataset import H5MapDataset

HF = REFERENCE / "tokenizer" / "hf"
FIM_INPUT = REFERENCE / "inputs" / "fim"


def _pairs(root: Path) -> Path:
    src = require_shared(SHARED / "corpora" / "en_small_pd.jsonl")
    (root / "pairs").mkdir(exist_ok=True)
    with open(root / "pairs" / "p.jsonl", "w") as f:
        for line in src.read_text().splitlines()[:80]:
            text = json.loads(line)["text"]
            f.write(json.dumps({"prompt": text[:200], "completion": text[200:300], "chosen": text[200:250],
                                "rejected": text[250:300]}) + "\n")
    return root / "pairs"


def _chats(root: Path) -> Path:
    (root / "chat").mkdir(exist_ok=True)
    with open(root / "chat" / "c.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"question {i} " * (1 + i % 4)},
                                             {"role": "assistant", "content": f"answer {i} " * (1 + i % 6)}]})
                    + "\n")
    return root / "chat"


MODES = {
    "LMData": lambda r: ["--input_dir", str(FIM_INPUT), "--files_per_record", "40"],
    "Summarization": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--completion_key",
                                "completion", "--params", str(_inverted(r))],
    "FIM": lambda r: ["--input_dir", str(FIM_INPUT), "--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok",
                      "<fim_middle>", "--fim_suffix_tok", "<fim_suffix>"],
    "LMData_VSL": lambda r: ["--input_dir", str(FIM_INPUT), "--files_per_record", "30"],
    "Summarization_VSL": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--completion_key",
                                    "completion"],
    "Chat": lambda r: ["--input_dir", str(_chats(r)), "--chat_template", "chatml"],
    "Chat_VSL": lambda r: ["--input_dir", str(_chats(r)), "--chat_template", "chatml"],
    "DPO": lambda r: ["--input_dir", str(_pairs(r)), "--prompt_key", "prompt", "--chat_template", "chatml"],
}


def _inverted(root: Path) -> Path:
    path = root / "inverted.yaml"
    path.write_text("dataset:\n  inverted_mask: True\n")
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every mode's output, written once: mode -> (directory, data_params)."""
    require_shared(HF)
    root = tmp_path_factory.mktemp("map_outputs")
    done = {}
    for mode, flags in MODES.items():
        out = root / mode
        done[mode] = out, run_job([mode, *flags(root), "--output_dir", str(out), "--tokenizer_type",
                                   "HuggingFaceTokenizer", "--huggingface_tokenizer", str(HF),
                                   "--max_seq_length", "128"])
    return done


@pytest.mark.parametrize("mode", sorted(MODES))
def test_rows_by_index_equal_the_files(outputs, mode):
    out, params = outputs[mode]
    ds = H5MapDataset(str(out))
    rows = read_rows(out)
    assert len(ds) == len(rows) == params["post-process"]["n_examples"] > 0
    assert ds.features == tuple(params["features"]) and len(ds.files) == len(params["files"])
    for i in range(len(rows)):
        got = ds[i]
        assert list(got) == params["features"]
        assert all(v.dtype == np.int32 and v.shape == (128,) for v in got.values())
        assert np.array_equal(np.stack(list(got.values())), rows[i]), (mode, i)
    assert np.array_equal(np.stack(list(ds[-1].values())), rows[-1])
    for bad in (len(rows), -len(rows) - 1):
        with pytest.raises(IndexError):
            ds[bad]


def test_only_the_index_is_read_at_construction(outputs, monkeypatch):
    out, _ = outputs["LMData"]
    reads = []
    original = h5py.Dataset.__getitem__
    monkeypatch.setattr(h5py.Dataset, "__getitem__", lambda self, key: reads.append(key) or original(self, key))
    ds = H5MapDataset(str(out))
    assert len(ds) > 40 and not reads  # the count came from n_examples, not from the rows
    ds[len(ds) - 1]
    assert not reads  # a row of our own layout is read by its chunk, not through h5py


def test_a_copy_in_another_process_opens_its_own_files(outputs):
    out, _ = outputs["LMData_VSL"]
    ds = H5MapDataset(str(out))
    first = ds[3]
    again = pickle.loads(pickle.dumps(ds))  # as a spawned DataLoader worker gets it
    assert not again._open
    assert all(np.array_equal(first[k], v) for k, v in again[3].items())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads through handles of its own, never the parent's
        try:
            ok = all(np.array_equal(first[k], v) for k, v in ds[3].items()) and ds._pid == os.getpid()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    ds.close()


def test_other_layouts_are_read_through_h5py(tmp_path):
    """The reference's files (h5py's own writer) and a layout without per-row chunks read the same."""
    case = require_shared(GOLDEN / "lm_pack_gpt2" / "out")
    ds = H5MapDataset(str(case))
    assert len(ds.files) == len(h5_files(case)) >= 3
    rows = np.concatenate([h5py.File(p, "r")["data"][()] for p in ds.files])
    assert len(ds) == len(rows) and all(np.array_equal(np.stack(list(ds[i].values())), rows[i])
                                        for i in range(0, len(rows), 7))
    plain = tmp_path / "plain"
    plain.mkdir()
    data = np.arange(2 * 3 * 8, dtype=np.int32).reshape(2, 3, 8)
    with h5py.File(plain / "x_00000.h5", "w") as f:
        f.create_dataset("data", data=data)  # contiguous, no filter
        f.attrs["n_examples"] = 2
    ds = H5MapDataset(str(plain))
    assert ds.features == ("input_ids", "attention_mask", "labels")
    assert np.array_equal(ds[1]["labels"], data[1, 2])


# ---------------------------------------------------------------- Hugging Face's convention


def _row(ids, mask, labels, **extra) -> dict:
    return {"input_ids": np.array(ids, np.int32), "attention_mask": np.array(mask, np.int32),
            "labels": np.array(labels, np.int32), **{k: np.array(v, np.int32) for k, v in extra.items()}}


X = IGNORE_INDEX


def test_lmdata_row_by_hand():
    # "a b c EOS" packed, then "d e": every position trained; pad 0 after the real ones.
    row = _row([1, 2, 3, 9, 4, 5, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0], [2, 3, 9, 4, 5, 0, 0, 0])
    hf = to_hf_causal_lm(row)
    assert hf["input_ids"].tolist() == [1, 2, 3, 9, 4, 5, 0, 0]
    assert hf["attention_mask"].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert hf["labels"].tolist() == [X, 2, 3, 9, 4, 5, X, X]
    full = to_hf_causal_lm(_row([1, 2, 3], [1, 1, 1], [2, 3, 9]))
    assert full["labels"].tolist() == [X, 2, 3]  # the last target, 9, has no place: the documented loss
    kept = to_hf_causal_lm(_row([1, 2, 3], [1, 1, 1], [2, 3, 9]), keep_last_target=True)
    assert kept["input_ids"].tolist() == [1, 2, 3, 9] and kept["labels"].tolist() == [X, 2, 3, 9]
    assert kept["attention_mask"].tolist() == [1, 1, 1, 1]


def test_summarization_row_by_hand():
    # prompt p1 p2, sep s, completion c1 c2, EOS: trained from the sep on; the EOS input carries no loss.
    row = _row([11, 12, 7, 21, 22, 9, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0], [12, 7, 21, 22, 9, 0, 0, 0])
    hf = to_hf_causal_lm(row, trailing_eos_input=True)
    assert hf["attention_mask"].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]  # the prompt is real, although untrained
    assert hf["labels"].tolist() == [X, X, X, 21, 22, 9, X, X]
    inverted = _row([11, 12, 7, 21, 22, 9, 0, 0], [1, 1, 0, 0, 0, 1, 1, 1], [12, 7, 21, 22, 9, 0, 0, 0])
    assert to_hf_causal_lm(inverted, inverted_mask=True, trailing_eos_input=True)["labels"].tolist() == \
        hf["labels"].tolist()


def test_vsl_row_by_hand_keeps_documents_apart():
    # Two documents "a b EOS" and "c d EOS" packed: no target crosses the boundary, positions restart.
    row = _row([1, 2, 3, 4, 0, 0], [1, 1, 1, 1, 0, 0], [2, 9, 4, 9, 0, 0],
               attention_span=[1, 0, 1, 0, 0, 0], position_ids=[0, 1, 0, 1, 0, 0])
    hf = to_hf_causal_lm(row)
    assert hf["labels"].tolist() == [X, 2, 9, 4, 9, X]
    assert hf["position_ids"].tolist() == [0, 1, 0, 1, 0, 0]
    assert hf["attention_mask"].tolist() == [1, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="DPO rows"):
        to_hf_causal_lm({"chosen_input_ids": np.zeros(3)})


def _cerebras_pairs(row: dict, inverted: bool) -> set:
    trained = row["attention_mask"] == (0 if inverted else 1)
    return {(i, int(row["labels"][i])) for i in np.flatnonzero(trained)}


def _hf_pairs(hf: dict) -> set:
    # Hugging Face's loss: position i's output against labels[i + 1], -100 ignored.
    labels = hf["labels"]
    return {(i, int(labels[i + 1])) for i in range(len(labels) - 1) if labels[i + 1] != IGNORE_INDEX}


@pytest.mark.parametrize("mode", ["LMData", "Summarization", "FIM", "LMData_VSL", "Summarization_VSL", "Chat",
                                  "Chat_VSL"])
def test_every_row_trains_the_same_pairs_but_its_last(outputs, mode):
    out, params = outputs[mode]
    ds = H5MapDataset(str(out))
    inverted = params["dataset"]["inverted_mask"]
    assert inverted == (mode == "Summarization")
    last_dropped = 0
    for i in range(len(ds)):
        row = ds[i]
        want = _cerebras_pairs(row, inverted)
        hf = ds.to_hf(row)
        assert len(hf["input_ids"]) == 128 and np.array_equal(hf["input_ids"], row["input_ids"])
        got = _hf_pairs(hf)
        assert got <= want and want - got <= {(127, int(row["labels"][127]))}, (mode, i)
        last_dropped += len(want - got)
        assert _hf_pairs(ds.to_hf(row, keep_last_target=True)) == want
        # Attention covers the real positions: every trained one, and nothing after the real end.
        real = int(hf["attention_mask"].sum())
        assert np.all(hf["attention_mask"][:real] == 1) and all(p < real for p, _ in want)
        if "position_ids" in row:
            assert np.array_equal(hf["position_ids"], row["position_ids"])
    assert last_dropped <= len(ds)


# ---------------------------------------------------------------- the frameworks users have


def test_grain_loads_it_with_an_index_sampler(outputs):
    grain = pytest.importorskip("grain.python", reason="grain is a test dependency: pip install -e '.[test]'")
    out, _ = outputs["LMData_VSL"]
    ds = H5MapDataset(str(out))
    assert isinstance(ds, grain.RandomAccessDataSource)  # the protocol: __len__ and __getitem__
    sampler = grain.IndexSampler(num_records=len(ds), shard_options=grain.ShardOptions(0, 2, drop_remainder=True),
                                 shuffle=True, num_epochs=1, seed=3)
    loader = grain.DataLoader(data_source=ds, sampler=sampler, worker_count=0)
    seen = list(loader)
    assert len(seen) == len(ds) // 2
    # Each element is the row Grain's sampler named: the loader of shard 0 of 2 takes the sampler's records 0, 2,
    # 4, ..., each naming a row (its record key) of this shard's half.
    keys = [sampler[i].record_key for i in range(0, 2 * len(seen), 2)]
    assert len(set(keys)) == len(keys) and max(keys) < len(ds) // 2 + 1
    for element, key in zip(seen, keys):
        expected = ds[key]
        assert all(np.array_equal(element[k], expected[k]) for k in expected)


@pytest.mark.worker_processes
def test_grain_worker_processes_read_through_their_own_handles(outputs):
    grain = pytest.importorskip("grain.python", reason="grain is a test dependency: pip install -e '.[test]'")
    out, _ = outputs["Chat"]
    ds = H5MapDataset(str(out))
    ds[0]  # the parent has opened a file: the workers must not use its handle
    sampler = grain.IndexSampler(num_records=len(ds), shuffle=False, num_epochs=1, seed=0)
    seen = list(grain.DataLoader(data_source=ds, sampler=sampler, worker_count=2))
    assert len(seen) == len(ds)
    for i, element in enumerate(seen):
        assert all(np.array_equal(element[k], v) for k, v in ds[i].items())


def test_a_batch_of_examples_stacks_every_key(outputs):
    from transforms.core.hf import collate_causal_lm

    out, _ = outputs["LMData_VSL"]
    ds = H5MapDataset(str(out))
    batch = collate_causal_lm([ds.to_hf(ds[i]) for i in (0, 5, 9)])
    assert sorted(batch) == ["attention_mask", "input_ids", "labels", "position_ids"]
    assert all(v.shape == (3, 128) and v.dtype == np.int64 for v in batch.values())
    assert np.array_equal(batch["labels"][1], ds.to_hf(ds[5])["labels"])
    with pytest.raises(ValueError):
        collate_causal_lm([])


def test_inflate_gives_zlibs_bytes_and_refuses_a_damaged_chunk():
    import zlib

    from transforms.io.map_dataset import inflate

    rows = np.random.default_rng(0).integers(0, 50_000, size=(3, 256)).astype("<i4").tobytes()
    chunk = zlib.compress(rows, 4)
    assert inflate(chunk, len(rows)) == rows == zlib.decompress(chunk)
    with pytest.raises(Exception):
        inflate(chunk[:-1] + bytes([chunk[-1] ^ 1]), len(rows))  # its adler32 no longer matches
    with pytest.raises(Exception):
        inflate(chunk, len(rows) + 4)  # a row of another shape


def test_the_conversion_keeps_huggingfaces_conventions_exactly():
    assert IGNORE_INDEX == -100  # what torch's cross-entropy ignores by default
    row = _row([1, 2, 3, 4, 0, 0], [1, 1, 1, 1, 0, 0], [2, 9, 4, 9, 0, 0],
               attention_span=[1, 0, 1, 0, 0, 0], position_ids=[0, 1, 0, 1, 0, 0])
    for keep in (False, True):
        hf = to_hf_causal_lm(row, keep_last_target=keep)
        assert sorted(hf) == ["attention_mask", "input_ids", "labels", "position_ids"]  # no attention_span
        assert all(v.dtype == np.int64 for v in hf.values())  # what Hugging Face's tensors hold
        assert all(len(v) == 6 + keep for v in hf.values())
    # A row that ends in padding gains a padding position: not attended, no target.
    kept = to_hf_causal_lm(row, keep_last_target=True)
    assert kept["input_ids"].tolist() == [1, 2, 3, 4, 0, 0, 0]
    assert kept["attention_mask"].tolist() == [1, 1, 1, 1, 0, 0, 0]
    assert kept["labels"].tolist() == [X, 2, 9, 4, 9, X, X]
    assert kept["position_ids"].tolist() == [0, 1, 0, 1, 0, 0, 1]
    # A full VSL row: the appended position continues the last document's positions and is attended.
    full = _row([5, 6, 7], [1, 1, 1], [6, 7, 9], attention_span=[2, 1, 0], position_ids=[4, 5, 6])
    kept = to_hf_causal_lm(full, keep_last_target=True)
    assert kept["position_ids"].tolist() == [4, 5, 6, 7] and kept["attention_mask"].tolist() == [1, 1, 1, 1]
    assert kept["labels"].tolist() == [X, 6, 7, 9] and kept["input_ids"].tolist() == [5, 6, 7, 9]
    with pytest.raises(ValueError) as err:
        to_hf_causal_lm({"chosen_input_ids": np.zeros(3)})
    assert str(err.value) == ("not a causal-LM row (features ['chosen_input_ids']): DPO rows have two sequences; "
                              "convert each side's input_ids / attention_mask / labels on its own")


def test_collate_by_hand():
    from transforms.core.hf import collate_causal_lm

    a = {"input_ids": np.array([1, 2]), "labels": np.array([X, 2])}
    b = {"input_ids": np.array([3, 4]), "labels": np.array([X, X])}
    batch = collate_causal_lm([a, b])
    assert list(batch) == ["input_ids", "labels"]
    assert batch["input_ids"].tolist() == [[1, 2], [3, 4]] and batch["labels"].tolist() == [[X, 2], [X, X]]
    with pytest.raises(ValueError, match="^an empty batch$"):
        collate_causal_lm([])


def test_the_appended_position_is_attended_as_the_rows_last():
    from transforms.core.hf import collate_causal_lm

    # The last position is padding, the one before is real (a Summarization row's EOS input).
    row = _row([11, 7, 21, 9, 0], [0, 1, 1, 0, 0], [7, 21, 9, 0, 0])
    kept = to_hf_causal_lm(row, trailing_eos_input=True, keep_last_target=True)
    assert kept["attention_mask"].tolist() == [1, 1, 1, 1, 0, 0] and kept["labels"].tolist() == [X, X, 21, 9, X, X]
    one = collate_causal_lm([kept])
    assert {k: v.tolist() for k, v in one.items()} == {k: [v.tolist()] for k, v in kept.items()}


def test_a_reference_dataset_is_read_as_verify_reads_it():
    """The reference writes LMData masks as not inverted whatever its data_params.json says (SPEC §1h-3): the
    conversion trains where its mask is 1, as verify reads it."""
    ds = H5MapDataset(str(require_shared(GOLDEN / "lm_nopack_neox_invmask_ignored" / "out")))
    assert ds.params["dataset"]["inverted_mask"] is True
    for i in range(0, len(ds), 5):
        row = ds[i]
        assert _hf_pairs(ds.to_hf(row)) | {(len(row["labels"]) - 1, int(row["labels"][-1]))} >= \
            _cerebras_pairs(row, inverted=False)
        assert _hf_pairs(ds.to_hf(row, keep_last_target=True)) == _cerebras_pairs(row, inverted=False)
