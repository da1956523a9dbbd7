"""BuildSummarizationRows: TokenBatch of (prompt, completion) ids -> RowBlock, one row per kept record."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.records import PerPart, RowBlock, for_group
from transforms.core.summarization import SummarizationConfig, summarization_batch
from transforms.core.timing import timed
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["BuildSummarizationRows"]


class BuildSummarizationRows(beam.PTransform):
    """PCollection[TokenBatch] -> PCollection[RowBlock]; too long / too short records are counted."""

    def __init__(self, config: SummarizationConfig | PerPart):
        super().__init__()
        self._config = config

    def expand(self, batches):
        return batches | "SummarizationRows" >> beam.Map(timed("pack", _rows), self._config).with_output_types(RowBlock)


def _rows(batch, config):
    with progress.working("pack", key=batch.group.name):
        return summarization_batch(batch, for_group(config, batch.group))
