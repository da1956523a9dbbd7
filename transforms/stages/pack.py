"""PackSequences: TokenBatch -> RowBlock, one independent stream per packing group."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.pack import PackConfig, pack_batch
from transforms.core.timing import timed

__all__ = ["PackSequences"]


class PackSequences(beam.PTransform):
    """PCollection[TokenBatch] -> PCollection[RowBlock] of int32 [n, 3, msl] rows,
    or of CompactBlock when `compact_dtype` is given (rows never built in full)."""

    def __init__(self, config: PackConfig, *, seed: int, compact_dtype=None):
        super().__init__()
        self._config = config
        self._seed = seed
        self._compact_dtype = compact_dtype

    def expand(self, batches):
        return batches | "Pack" >> beam.Map(timed("pack", pack_batch), self._config, self._seed,
                                            self._compact_dtype)
