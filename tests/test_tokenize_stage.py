"""TokenizeDocuments hands groups on later than it receives them: every group must still get its own tokens."""

from __future__ import annotations

import random
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.core.records import DocBatch, Document, GroupId
from transforms.core.tokenizer import GPT2, shared_tokenizer, tokenize_documents
from transforms.io.tokenizer_files import read_tokenizer_files
from transforms.stages import tokenize as stage

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
WORDS = "the of and a to in is you that it he was for on are as with his they at be this".split()


@pytest.fixture(scope="module")
def files():
    return read_tokenizer_files(GPT2, encoder_file=str(BUNDLED / "encoder.json"), vocab_file=str(BUNDLED / "vocab.bpe"))


def _groups(n_groups: int, seed: int = 0) -> list[DocBatch]:
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        docs = [Document(i, (" ".join(rng.choices(WORDS, k=rng.randint(0, 300))),)) for i in range(rng.randint(0, 40))]
        out.append(DocBatch(GroupId(g, 0, f"f{g}", f"f{g}"), docs))
    return out


def _summary(batch) -> tuple:
    flat = batch.flat if batch.flat is not None else np.zeros(0, np.int32)
    return (batch.group.name, [t[0].tolist() for t in batch.tokens], flat.tolist(), batch.stats["tokens"])


def test_each_group_gets_its_own_tokens_in_a_pipeline(files, monkeypatch):
    # Slices of a few hundred characters: many per group, so groups and slices interleave on the pool.
    monkeypatch.setattr(stage, "TOKENIZE_BATCH_CHARS", 300)
    groups = _groups(12)
    tok = shared_tokenizer(files)
    expected = []
    for batch in groups:
        arrays = tokenize_documents(tok, [d.text for d in batch.docs])
        flat = np.concatenate(arrays).tolist() if arrays else []
        expected.append((batch.group.name, [a.tolist() for a in arrays], flat, len(flat)))

    with beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"])) as p:
        got = (p | beam.Create(groups, reshuffle=False) | stage.TokenizeDocuments(files) | beam.Map(_summary))
        assert_that(got, equal_to(expected))


def test_finish_bundle_hands_on_the_last_groups(files):
    fn = stage._TokenizeFn(files, None, False, True, False)
    fn.setup()
    try:
        fn.start_bundle()
        groups = _groups(3, seed=1)
        out = []
        for batch in groups:
            out.extend(fn.process(batch, window=beam.transforms.window.GlobalWindow(), timestamp=0))
        assert len(out) == 2  # each group is handed on once the next one is queued
        out.extend(fn.finish_bundle())
        assert [wv.value.group.name for wv in out] == [b.group.name for b in groups]
        assert all(wv.windows == [beam.transforms.window.GlobalWindow()] for wv in out)
    finally:
        fn.teardown()
