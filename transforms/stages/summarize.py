"""BuildSummarizationRows: TokenBatch of (prompt, completion) ids -> RowBlock, one row per kept record."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.summarization import SummarizationConfig, summarization_batch
from transforms.core.timing import timed

__all__ = ["BuildSummarizationRows"]


class BuildSummarizationRows(beam.PTransform):
    """PCollection[TokenBatch] -> PCollection[RowBlock]; too long / too short records are counted."""

    def __init__(self, config: SummarizationConfig):
        super().__init__()
        self._config = config

    def expand(self, batches):
        return batches | "SummarizationRows" >> beam.Map(timed("pack", summarization_batch), self._config)
