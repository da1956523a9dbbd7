"""Seeds derived from (user seed, stable identity), never from global state.

Every random draw in the pipeline comes from a generator seeded here, so the
same inputs and seed give the same output whatever the runner, the worker
count or the order in which bundles run.
"""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed", "hash_key"]


def derive_seed(seed: int, *identity: object) -> int:
    """A 64-bit seed for `identity` under the user's `seed`.

    >>> derive_seed(0, "a.jsonl#0") == derive_seed(0, "a.jsonl#0")
    True
    """
    text = "\x1f".join([str(seed), *map(str, identity)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def hash_key(prefix: str, seed: int) -> bytes:
    """A 32-byte BLAKE2b key for a draw by content under `seed` (`prefix` names the draw: "split_seed\\x1f",
    "mixture:"): BLAKE2b's own keyed mode makes the draw a PRF of the content, and each draw its own."""
    return hashlib.sha256(f"{prefix}{int(seed)}".encode()).digest()[:32]
