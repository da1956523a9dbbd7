"""A PyTorch DataLoader over H5MapDataset with ResumableSampler and worker processes: `make test-torch`.

Not in CI (the torch wheel is several GB); skipped where torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import REFERENCE, require_shared, run_job

torch = pytest.importorskip("torch", reason="make test-torch installs torch (not in CI: its wheel is several GB)")

from transforms.core.hf import collate_causal_lm  # noqa: E402
from transforms.io.map_dataset import H5MapDataset, ResumableSampler  # noqa: E402


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch") / "out"
    run_job(["LMData_VSL", "--input_dir", str(require_shared(REFERENCE / "inputs" / "fim")), "--output_dir", str(out),
             "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(REFERENCE / "tokenizer" / "hf"),
             "--max_seq_length", "128", "--files_per_record", "50"])
    return out


@pytest.mark.worker_processes
def test_dataloader_workers_read_the_sampled_rows_and_resume(out):
    ds = H5MapDataset(str(out))
    ds[0]  # a handle opened in the parent: forked workers must open their own
    sampler = ResumableSampler(len(ds), seed=1, rank=1, world_size=2)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=4, num_workers=2,
                                         collate_fn=lambda rows: collate_causal_lm([ds.to_hf(r) for r in rows]))
    expected = list(ResumableSampler(len(ds), seed=1, rank=1, world_size=2))
    seen = []
    for k, batch in enumerate(loader):
        assert batch["input_ids"].shape[1] == 128 and batch["position_ids"].dtype == np.int64
        seen.append(batch)
        if k == 2:
            state = sampler.state_dict()
            break
    # Resumed in a fresh sampler: the rest of the epoch, as an uninterrupted run reads it.
    resumed = ResumableSampler(len(ds), seed=1, rank=1, world_size=2)
    resumed.load_state_dict(state)
    rest = list(resumed)
    # The loader's workers prefetch, so the main process's sampler ran ahead of the three batches consumed.
    assert rest == expected[len(expected) - len(rest):]
    for batch, first in zip(seen, range(0, 12, 4)):
        for j, index in enumerate(expected[first:first + 4]):
            assert np.array_equal(np.asarray(batch["input_ids"][j]), ds[index]["input_ids"])
