"""The reader for training code: exactly the rows written, in file order; whole files per host, no overlap."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import ROOT, h5_files, read_rows, run_job
from transforms.io.dataset import H5Dataset, host_files, iter_dataset, list_h5_files, open_dataset_params
from transforms.io.hdf5_format import write_shard

MSL = 8


def _rows(file_index: int, n: int) -> np.ndarray:
    """Rows whose ids say which file and row they come from."""
    rows = np.zeros((n, 3, MSL), dtype=np.int32)
    for r in range(n):
        rows[r, 0] = file_index * 1000 + r
        rows[r, 1] = 1
        rows[r, 2] = file_index * 1000 + r + 1
    return rows


@pytest.fixture
def shards(tmp_path):
    """Seven files named so that plain string order is wrong (x_10 after x_9); sizes differ."""
    sizes = {0: 5, 1: 3, 2: 4, 3: 6, 9: 2, 10: 7, 11: 2}
    for i, n in sizes.items():
        write_shard(str(tmp_path / f"x_{i}.h5"), _rows(i, n))
    (tmp_path / "data_params.json").write_text('{"setup": {"mode": "LMData"}}')
    (tmp_path / "notes.txt").write_text("not a shard")
    order = list(sizes)
    return tmp_path, order, sizes


def _ids(rows) -> list[int]:
    return [int(r["input_ids"][0]) for r in rows]


def test_rows_in_file_order(shards):
    out, order, sizes = shards
    assert [p.rsplit("/", 1)[-1] for p in list_h5_files(str(out))] == [f"x_{i}.h5" for i in order]
    rows = list(iter_dataset(str(out)))
    assert _ids(rows) == [i * 1000 + r for i in order for r in range(sizes[i])]
    first = rows[0]
    assert set(first) == {"input_ids", "attention_mask", "labels"}
    np.testing.assert_array_equal(first["labels"], _rows(0, 1)[0, 2])
    assert first["input_ids"].dtype == np.int32 and first["input_ids"].shape == (MSL,)
    assert len(H5Dataset(str(out))) == sum(sizes.values())
    assert open_dataset_params(str(out)) == {"setup": {"mode": "LMData"}}


def test_hosts_get_whole_files_without_overlap(shards):
    out, order, sizes = shards
    names = [f"x_{i}" for i in order]
    for num_hosts in (1, 2, 3, 7):
        kept = len(order) - len(order) % num_hosts
        seen = []
        per_host_files = []
        for h in range(num_hosts):
            ds = H5Dataset(str(out), host_index=h, num_hosts=num_hosts)
            per_host_files.append([p.rsplit("/", 1)[-1][:-3] for p in ds.files])
            assert per_host_files[-1] == names[h:kept:num_hosts]  # i % num_hosts == h
            seen += _ids(ds)
        assert len({len(f) for f in per_host_files}) == 1  # equal file counts
        assert len(seen) == len(set(seen))  # no overlap
        # Every row of the kept files, and only those: the trailing remainder files are dropped.
        assert sorted(seen) == sorted(i * 1000 + r for i in order[:kept] for r in range(sizes[i]))


def test_uneven_split_can_raise_and_too_many_hosts_is_an_error(shards):
    out, order, _ = shards
    with pytest.raises(ValueError, match="cannot be split equally"):
        H5Dataset(str(out), host_index=0, num_hosts=2, remainder="error")
    with pytest.raises(ValueError, match="fewer than 8 hosts"):
        H5Dataset(str(out), host_index=0, num_hosts=8)
    with pytest.raises(ValueError, match="host_index"):
        host_files(["a.h5"], host_index=2, num_hosts=2)


def test_equal_rows_caps_every_host_at_the_smallest(shards):
    out, _, _ = shards
    # Hosts of 2 over files 0,1,2,3,9,10 get rows 5+4+2=11 and 3+6+7=16.
    counts = [len(list(H5Dataset(str(out), host_index=h, num_hosts=2, equal_rows=True))) for h in range(2)]
    assert counts == [11, 11]
    assert [len(H5Dataset(str(out), host_index=h, num_hosts=2, equal_rows=True)) for h in range(2)] == [11, 11]
    first = _ids(H5Dataset(str(out), host_index=1, num_hosts=2, equal_rows=True))
    assert first == [1000, 1001, 1002] + [3000 + r for r in range(6)] + [10000, 10001]


def test_batches(shards):
    out, order, sizes = shards
    total = sum(sizes.values())
    batches = list(H5Dataset(str(out), batch_size=4))
    assert [b["input_ids"].shape for b in batches] == [(4, MSL)] * (total // 4) + [(total % 4, MSL)]
    flat = np.concatenate([b["input_ids"][:, 0] for b in batches]).tolist()
    assert flat == [i * 1000 + r for i in order for r in range(sizes[i])]  # batches cross file boundaries
    dropped = H5Dataset(str(out), batch_size=4, drop_remainder=True)
    assert len(list(dropped)) == len(dropped) == total // 4
    assert all(set(b) == {"input_ids", "attention_mask", "labels"} for b in dropped)


def test_reads_an_fsspec_url(shards):
    import fsspec

    out, order, sizes = shards
    mem = fsspec.filesystem("memory")
    for p in list_h5_files(str(out)):
        mem.put_file(p, "/reader_test/" + p.rsplit("/", 1)[-1])
    try:
        rows = list(iter_dataset("memory://reader_test", host_index=1, num_hosts=3))
        assert _ids(rows) == [i * 1000 + r for i in (1, 9) for r in range(sizes[i])]
    finally:
        mem.rm("/reader_test", recursive=True)


def test_yields_exactly_what_the_pipeline_wrote(tmp_path):
    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    out = tmp_path / "out"
    run_job(["LMData", "--input_dir", str(ROOT / "data" / "sample"), "--output_dir", str(out),
             "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(gpt2 / "vocab.bpe"),
             "--encoder_file", str(gpt2 / "encoder.json"), "--max_seq_length", "64", "--files_per_record", "500"])
    assert len(h5_files(out)) > 2
    written = read_rows(out)
    got = list(H5Dataset(str(out)))
    assert len(got) == len(written)
    np.testing.assert_array_equal(np.stack([np.stack([r["input_ids"], r["attention_mask"], r["labels"]])
                                            for r in got]), written)
    params = open_dataset_params(str(out))
    assert params["post-process"]["n_examples"] == len(written)


def test_rows_are_named_by_the_features_data_params_lists(shards):
    out, order, sizes = shards
    (out / "data_params.json").write_text('{"setup": {"mode": "LMData"}, '
                                          '"features": ["input_ids", "attention_mask", "labels"]}')
    ds = H5Dataset(str(out), batch_size=3)
    assert ds.features == ("input_ids", "attention_mask", "labels")
    assert all(list(b) == list(ds.features) for b in ds)
    (out / "data_params.json").write_text('{"setup": {"mode": "LMData_VSL"}}')  # 5 names, 3-feature files
    with pytest.raises(ValueError, match="x_0.h5: rows of shape \\(3, 8\\), but the dataset's features are 5"):
        list(H5Dataset(str(out)))
