"""The job's own files beside the stored groups (transforms.io.spill): a mixture's plan, kept for a resumed job.

The Beam side (store packed groups, skip stored ones on resume, keep the plan) is transforms/stages/intermediate.py.
"""

from __future__ import annotations

from typing import Optional

from transforms.core.mixture import MixturePlan
from transforms.io import fs

__all__ = ["MIXTURE_PLAN", "keep_plan", "load_mixture_plan"]

MIXTURE_PLAN = "mixture_plan.json"  # in OUT/.tmp, beside the stored groups


def keep_plan(plan: MixturePlan, path: str) -> MixturePlan:
    """Write the plan to `path` (atomically); the same plan, to hand on once it is kept."""
    fs.write_text_atomic(path, plan.to_json())
    return plan


def load_mixture_plan(path: str) -> Optional[MixturePlan]:
    """The plan an interrupted mixture job kept, or None (it stopped before any group was selected)."""
    return MixturePlan.from_json(fs.read_bytes(path).decode("utf-8")) if fs.exists(path) else None
