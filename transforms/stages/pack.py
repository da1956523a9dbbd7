"""PackSequences: TokenBatch -> RowBlock, one independent stream per packing group."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.pack import PackConfig, pack_batch
from transforms.core.records import PerPart, RowBlock, WindowBlock, for_group
from transforms.core.timing import timed
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["PackSequences"]


class PackSequences(beam.PTransform):
    """PCollection[TokenBatch] -> PCollection[RowBlock] of int32 [n, 3, msl] rows,
    or of WindowBlock with `windows_only` (rows built later, a batch at a time)."""

    def __init__(self, config: PackConfig | PerPart, *, seed: int, windows_only: bool = False):
        super().__init__()
        self._config = config
        self._seed = seed
        self._windows_only = windows_only

    def expand(self, batches):
        # Sized for Beam's metrics without pickling (transforms.stages.coders).
        return batches | "Pack" >> beam.Map(timed("pack", _pack), self._config, self._seed,
                                            self._windows_only).with_output_types(
            WindowBlock if self._windows_only else RowBlock)


def _pack(batch, config, seed: int, windows_only: bool):
    with progress.working("pack", key=batch.group.name):
        return pack_batch(batch, for_group(config, batch.group), seed, windows_only)
