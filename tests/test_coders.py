"""A packing group's batches are never pickled just to be measured (transforms/stages/coders.py)."""

from __future__ import annotations

import pickle

import numpy as np
from apache_beam import coders as beam_coders
from apache_beam.coders import coders as beam_coder_module

from tests.helpers import ROOT, run_job
from transforms.core.records import DocBatch, Document, EncodedBlock, GroupId, RowBlock, TokenBatch, WindowBlock
from transforms.io.coders import estimate_bytes
from transforms.stages.coders import BatchCoder

BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"


def _group():
    return GroupId(file_index=0, slice_index=0, source="a.jsonl", relpath="a.jsonl")


def test_the_registry_gives_the_batches_their_coder():
    for cls in (DocBatch, TokenBatch, RowBlock, WindowBlock, EncodedBlock):
        assert isinstance(beam_coders.registry.get_coder(cls), BatchCoder), cls


def test_it_encodes_as_pickle_and_sizes_without_pickling():
    tokens = np.arange(10_000, dtype=np.int32)
    batch = TokenBatch(_group(), [(tokens[:4000],), (tokens[4000:],)], flat=tokens)
    impl = BatchCoder().get_impl()
    encoded = impl.encode(batch)
    assert encoded == pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)
    back = impl.decode(encoded)
    assert np.array_equal(back.flat, tokens) and back.group == batch.group
    # Within a factor of the pickled size: the arrays counted by their bytes (views twice, as pickle does).
    assert 0.5 * len(encoded) < impl.estimate_size(batch) < 2 * len(encoded)
    docs = DocBatch(_group(), [Document(i, ("x" * (i % 300),)) for i in range(5000)])
    size = estimate_bytes(docs)
    assert 0.5 * len(pickle.dumps(docs)) < size < 2 * len(pickle.dumps(docs))
    rows = RowBlock(_group(), np.zeros((8, 3, 128), np.int32))
    assert rows.rows.nbytes <= estimate_bytes(rows) < rows.rows.nbytes + 4096


def test_a_job_pickles_no_batch_to_measure_it(tmp_path, monkeypatch):
    """In one process every stage is fused: a batch crosses no boundary, so nothing should pickle it."""
    pickled = []
    real = pickle.dumps

    class Counting:
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
        loads = staticmethod(pickle.loads)

        @staticmethod
        def dumps(value, protocol=None):
            pickled.append(type(value).__name__)
            return real(value, protocol)

    monkeypatch.setattr(beam_coder_module, "pickle", Counting)
    run_job(["LMData", "--input_dir", str(ROOT / "data" / "sample"), "--output_dir", str(tmp_path / "out"),
             "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(BUNDLED / "vocab.bpe"),
             "--encoder_file", str(BUNDLED / "encoder.json"), "--max_seq_length", "256", "--display_pbar", "False"])
    assert pickled  # the counter does see Beam's pickling (small elements are still pickled)
    assert not {"DocBatch", "TokenBatch", "WindowBlock", "RowBlock"} & set(pickled)
