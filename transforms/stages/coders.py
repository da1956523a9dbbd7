"""The coder of a packing group's batches: pickle, with a size estimate that does not pickle.

Beam samples the elements a step outputs to estimate their size in bytes (a
metric), and samples every one of the first few: it estimates a pickled
element by pickling it. A packing group's batch is one element of hundreds of
megabytes (its texts, token arrays or rows), so on the bench corpus that
pickling alone cost 0.8 CPU-s of a 5.4 s job, on the main thread, for a
number nobody reads (transforms/io/coders.py estimates it instead). These
batches are only encoded for real where they cross a stage boundary (a
shuffle, a worker), and then exactly as before.

Steps whose output is one of these types say so (`with_output_types`), which
is how the registry finds this coder: a stage module that outputs them imports
this one, which registers it.
"""

from __future__ import annotations

import pickle
from typing import Any

from apache_beam import coders
from apache_beam.coders.coders import FastCoder
from apache_beam.coders.coder_impl import CallbackCoderImpl

from transforms.core.records import (DocBatch, EncodedBatch, EncodedBlock, MixtureBatch, RowBlock, TokenBatch,
                                     WindowBlock)
from transforms.io.coders import estimate_bytes

__all__ = ["BatchCoder"]


class BatchCoder(FastCoder):
    """PickleCoder's bytes; `estimate_bytes` for Beam's size sampling."""

    def _create_impl(self):
        protocol = pickle.HIGHEST_PROTOCOL
        return CallbackCoderImpl(lambda x: pickle.dumps(x, protocol), pickle.loads, size_estimator=estimate_bytes)

    def is_deterministic(self) -> bool:
        return False  # never a key

    def to_type_hint(self):
        return Any

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


for _cls in (DocBatch, TokenBatch, EncodedBatch, MixtureBatch, RowBlock, WindowBlock, EncodedBlock):
    coders.registry.register_coder(_cls, BatchCoder)
