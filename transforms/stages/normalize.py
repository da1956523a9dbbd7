"""NormalizeDocuments: ftfy and the wikitext detokenizer on every value of every document."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.normalize import NormalizeConfig, normalize_batch
from transforms.core.records import DocBatch
from transforms.core.timing import timed
from transforms.io import progress
from transforms.io.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["NormalizeDocuments"]


class NormalizeDocuments(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[DocBatch] with normalized text and char/byte counts."""

    def __init__(self, config: NormalizeConfig):
        super().__init__()
        self._config = config

    def expand(self, batches):
        return batches | "Normalize" >> beam.Map(timed("normalize", _normalize), self._config).with_output_types(
            DocBatch)  # sized for Beam's metrics without pickling (transforms.io.coders)


def _normalize(batch, config: NormalizeConfig):
    with progress.working("normalize", nbytes=batch.progress_bytes):
        return normalize_batch(batch, config)
