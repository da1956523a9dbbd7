"""A progress bar over input bytes, for runs that read in this process (the local in-memory runner).

One bar per process, shared by every reader DoFn instance; only drawn when
asked for and stderr is a terminal, so logs and CI output stay clean.
"""

from __future__ import annotations

import sys
import threading
__all__ = ["advance", "close"]

_lock = threading.Lock()
_bar = None


def advance(nbytes: int, total: int) -> None:
    global _bar
    with _lock:
        if _bar is None:
            from tqdm import tqdm

            _bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="reading",
                        file=sys.__stderr__, dynamic_ncols=True, smoothing=0.1)  # the real terminal
        _bar.update(nbytes)


def close() -> None:
    global _bar
    with _lock:
        if _bar is not None:
            _bar.close()
            _bar = None
