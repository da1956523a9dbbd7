"""A progress bar that follows the work bounding the job: input tokenized and encoded, not input read.

Reading runs far ahead of the rest (groups queue up), so a bar over bytes
read would race to 100% and then sit there. Instead every packing group
carries its share of the input's bytes on storage; the tokenizer stage
advances the bar by part of a slice's share as each slice is encoded, and
the encoder (the other costly stage: gzip) by the rest as the group's rows are
compressed. The shares of a file add up to its size exactly, so the bar
reaches the total once, when the last rows are encoded, and never passes it.
Elapsed time counts from the command's start; the rate (and so the ETA)
counts from the first work done, so start-up does not make the ETA
pessimistic for the whole run.

One bar per process, made by the launcher and advanced by any DoFn in the same
process (the local in-memory runner); elsewhere every call is a no-op. Drawn
only where the launcher asks for it (stderr a terminal, --display_pbar True).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Optional

from transforms.core.units import shares  # noqa: F401 - the stages cut a group's share with it

__all__ = ["start", "advance", "count", "expect", "settle", "finish", "process_start_time", "shares",
           "TOKENIZE_SHARE"]

# The part of a group's share advanced as it is tokenized; the rest as its rows are encoded.
TOKENIZE_SHARE = 0.5

_lock = threading.Lock()
_bar = None
_counts: Counter = Counter()
_expected: dict = {}  # group -> [bytes promised to the encoder, bytes of them advanced]
_overshoot = 0  # work advanced past the total: a bug in the shares (tests check it stays 0)

# What the postfix shows, in this order, and how.
_SHOWN = (("documents", "docs", False), ("tokens", "tokens", True), ("sequences", "sequences", False),
          ("bad", "bad", False))


def process_start_time() -> float:
    """When this process started (time.time() scale): the command's start, imports included."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_IMPORTED = time.time()


def _bar_class():
    from tqdm import tqdm

    class _Bar(tqdm):
        """tqdm whose elapsed time starts at the command's start and whose rate starts at the first work."""

        def __init__(self, *args, command_started: float, **kwargs):
            self._command_started = command_started
            self._work_started: Optional[float] = None
            super().__init__(*args, **kwargs)

        @property
        def format_dict(self):
            d = super().format_dict
            now = self._time()
            d["elapsed"] = now - self._command_started
            if self._work_started is not None and self.n:
                d["rate"] = self.n / max(now - self._work_started, 1e-6)
            return d

    return _Bar


def start(total: Optional[int], *, file, command_started: Optional[float] = None) -> None:
    """Draw a bar on `file` for `total` bytes of input (None: unknown, counts only)."""
    global _bar, _overshoot
    with _lock:
        if _bar is not None:
            _bar.close()
        _counts.clear()
        _expected.clear()
        _overshoot = 0
        _bar = _bar_class()(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="tokenizing",
                            file=file, dynamic_ncols=True, mininterval=0.2,
                            command_started=process_start_time() if command_started is None else command_started)


def advance(nbytes: int) -> None:
    """Input bytes whose work is done; never past the total."""
    global _overshoot
    if _bar is None or nbytes <= 0:
        return
    with _lock:
        if _bar is None:
            return
        if _bar._work_started is None:
            # The rate counts from where work began: the first slice's share is done then, not before.
            _bar._work_started = _bar._time()
        if _bar.total is not None and _bar.n + nbytes > _bar.total:
            _overshoot += _bar.n + nbytes - _bar.total
            nbytes = _bar.total - _bar.n
        if nbytes:
            _bar.update(nbytes)


def expect(key: str, nbytes: int) -> None:
    """Promise `nbytes` of work on `key` (a group), to be advanced by `settle` as it is done."""
    if _bar is None:
        return
    with _lock:
        _expected[key] = [nbytes, 0]


def settle(key: str, fraction: float) -> None:
    """`fraction` of the work promised on `key` is done (1: all of it, and the promise is kept)."""
    if _bar is None:
        return
    with _lock:
        entry = _expected.get(key)
        if entry is None:
            return
        target = entry[0] if fraction >= 1 else min(entry[0], int(entry[0] * fraction))
        step, entry[1] = max(0, target - entry[1]), max(entry[1], target)
        if fraction >= 1:
            del _expected[key]
    advance(step)


def count(name: str, n: int = 1) -> None:
    """Add to a counter shown beside the bar (documents, tokens, sequences, bad)."""
    if _bar is None or not n:
        return
    with _lock:
        if _bar is None:
            return
        _counts[name] += n
        parts = []
        for key, label, scaled in _SHOWN:
            if _counts[key] or key in ("documents", "tokens", "sequences"):
                value = _counts[key]
                parts.append(f"{label} {_scaled(value) if scaled else f'{value:,}'}")
        _bar.set_postfix_str(" · ".join(parts), refresh=False)


def _scaled(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def finish() -> None:
    """Close the bar (at the end of the job, whether it succeeded or not)."""
    global _bar
    with _lock:
        if _bar is not None:
            _bar.close()
            _bar = None
