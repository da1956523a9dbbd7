"""Per-stage wall time, carried in the statistics (run-specific: reported under data_params "run")."""

from __future__ import annotations

import functools
import time

__all__ = ["timed", "TIME_PREFIX"]

TIME_PREFIX = "time_ms."


def timed(stage: str, fn):
    """Wrap fn(batch, ...) -> batch-like with .stats so its wall time is added to the stats."""

    @functools.wraps(fn)
    def wrapper(batch, *args, **kwargs):
        start = time.perf_counter()
        out = fn(batch, *args, **kwargs)
        out.stats.totals[TIME_PREFIX + stage] += int((time.perf_counter() - start) * 1000)
        return out

    return wrapper
