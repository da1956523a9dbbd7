"""How many threads a worker process should use: what it actually gets, not what the machine has.

Dataflow runs one Python SDK process per vCPU, so a process that sized its
thread pools by os.cpu_count() would run vCPUs x vCPUs threads on a worker.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["machine_cpus", "process_threads", "limit_native_threads"]


def machine_cpus() -> int:
    """Cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def process_threads(process_cpus: Optional[int]) -> int:
    """Threads for CPU-bound pools: `process_cpus` when the runner says how many this process gets."""
    return max(1, process_cpus) if process_cpus else machine_cpus()


def limit_native_threads(process_cpus: Optional[int]) -> None:
    """Size the tokenizers' native pools before they start; a user's own setting wins.

    The pools are created on the first parallel encode of the process and read
    their sizes then, so this must run before any tokenizer encodes: rayon's
    (tokenizers, fastokens' pre-tokenizer) from RAYON_NUM_THREADS, fastokens'
    own BPE workers from FASTOKENS_BPE_THREADS.
    """
    if process_cpus:
        os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, process_cpus)))
        os.environ.setdefault("FASTOKENS_BPE_THREADS", os.environ["RAYON_NUM_THREADS"])
