"""NormalizeDocuments: ftfy and the wikitext detokenizer on every value of every document."""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from transforms.core.normalize import NormalizeConfig, normalize_batch
from transforms.core.records import DocBatch
from transforms.core.timing import timed
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["NormalizeDocuments"]


class NormalizeDocuments(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[DocBatch] with normalized text and char/byte counts."""

    def __init__(self, config: NormalizeConfig):
        super().__init__()
        self._config = config

    def expand(self, batches):
        return batches | "Normalize" >> beam.Map(timed("normalize", _normalize), self._config).with_output_types(
            DocBatch)  # sized for Beam's metrics without pickling (transforms.stages.coders)


# A group's share is reported in this many steps, as its documents are normalized: with ftfy a group of
# 64 MiB takes a second or more, which reported in one step would leave the bar still (and its cost unmeasured
# until a worker's second group: its first report is its start-up).
SLICES = 16


def _normalize(batch, config: NormalizeConfig):
    with progress.working("normalize"):
        return normalize_batch(dataclasses.replace(batch, docs=_reporting(batch.docs, batch.progress_bytes)),
                               config)


def _reporting(docs: list, share: int):
    """`docs` in order; once each slice of them has been normalized (the next one is asked for), its part of
    the group's `share` is done, in proportion to the documents."""
    step = -(-len(docs) // SLICES) or 1
    reported = 0
    for i, doc in enumerate(docs):
        if i and i % step == 0:
            nbytes = share * i // len(docs) - reported
            reported += nbytes
            progress.done("normalize", nbytes)
        yield doc
    progress.done("normalize", share - reported)
