"""The size of a packing group's batch as pickled, estimated without pickling it.

Beam samples the elements a step outputs to estimate their size in bytes (a
metric), and samples every one of the first few: it estimates a pickled
element by pickling it. A packing group's batch is one element of hundreds of
megabytes (its texts, token arrays or rows), so on the bench corpus that
pickling alone cost 0.8 CPU-s of a 5.4 s job, on the main thread, for a
number nobody reads. `estimate_bytes` answers from the arrays', bytes' and
strings' lengths instead; transforms/stages/coders.py (BatchCoder) gives it to
Beam, and encodes the batches for real, as before, where they cross a stage
boundary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["estimate_bytes"]

_SAMPLE = 256  # elements of a long list measured; the rest are taken to be like them


def estimate_bytes(value: Any, depth: int = 0) -> int:
    """About the bytes `value` pickles to: arrays, bytes and strings by their length, the rest by a constant."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    if depth >= 6:
        return 16
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return 16 + sum(estimate_bytes(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        if len(value) <= _SAMPLE:
            return 16 + sum(estimate_bytes(v, depth + 1) for v in value)
        step = len(value) / _SAMPLE
        sample = sum(estimate_bytes(value[int(i * step)], depth + 1) for i in range(_SAMPLE))
        return 16 + int(sample * len(value) / _SAMPLE)
    if hasattr(value, "__dict__"):
        return 16 + sum(estimate_bytes(v, depth + 1) for v in vars(value).values())
    return 16
