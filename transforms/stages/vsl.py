"""PackDocumentsVsl: TokenBatch -> WindowBlock of VSL rows, one independent packing per packing group."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.records import PerPart, WindowBlock, for_group
from transforms.core.timing import timed
from transforms.core.vsl import VslConfig, vsl_lm_batch, vsl_summarization_batch
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["PackDocumentsVsl"]


class PackDocumentsVsl(beam.PTransform):
    """PCollection[TokenBatch] -> PCollection[WindowBlock] whose rows ([n, 5, msl]) EncodeRows builds.

    LMData_VSL takes documents ending in EOS; with `summarization` the batch
    holds (prompt ids, completion ids) pairs (Summarization_VSL). Dropped
    documents are counted by reason in the batch's stats.
    """

    def __init__(self, config: VslConfig | PerPart, *, seed: int, summarization: bool = False):
        super().__init__()
        self._config = config
        self._seed = seed
        self._summarization = summarization

    def expand(self, batches):
        if self._summarization:
            return batches | "PackPairs" >> beam.Map(timed("pack", _pairs), self._config).with_output_types(WindowBlock)
        return batches | "PackDocuments" >> beam.Map(timed("pack", _documents), self._config,
                                                     self._seed).with_output_types(WindowBlock)


def _pairs(batch, config):
    with progress.working("pack", key=batch.group.name):
        return vsl_summarization_batch(batch, for_group(config, batch.group))


def _documents(batch, config, seed: int):
    with progress.working("pack", key=batch.group.name):
        return vsl_lm_batch(batch, for_group(config, batch.group), seed)
