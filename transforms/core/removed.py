"""What every step that removes records on purpose must agree on with itself (language identification, the
quality filters, decontamination): its section's total, its sources, its `listed` count and its listing's lines.
`verify` asks each step's check, which adds its own (the input's dropped records per reason)."""

from __future__ import annotations

from typing import Mapping, Optional

__all__ = ["agreement_problems"]


def agreement_problems(name: str, removed: int, section: Mapping, listing: Optional[Mapping[str, int]],
                       listing_dir: str, reason: Optional[str] = None, cut: int = 0,
                       cut_reason: Optional[str] = None) -> list[str]:
    """The problems of a section named `name` that says `removed` records were removed: its per_source total, its
    `listed` count, and its listing (per reason; None when there is no directory: then nothing may have been
    removed). `reason`: the one reason its listing's lines must all give, where the step has one. A step that
    also cuts records (keeps less of them) lists each of `cut` with `cut_reason`, and counts them in `listed`."""
    problems = []
    if cut_reason is not None:
        listed_cut = (listing or {}).get(cut_reason, 0)
        if listed_cut != cut:
            problems.append(f"{listing_dir}/ lists {listed_cut} records cut, {name}.documents_cut is {cut}")
        if listing is not None:
            listing = {k: v for k, v in listing.items() if k != cut_reason}
    by_source = sum(s.get("documents_removed", 0) for s in section.get("per_source", {}).values())
    if by_source != removed:
        problems.append(f"{name}.per_source removes {by_source} records, the total is {removed}")
    listed = section.get("listed")
    if isinstance(listed, int):
        listed -= cut
    if listed != removed:
        problems.append(f"{name}.listed is {listed}, {removed} records were removed")
    if listing is None:
        if removed:
            problems.append(f"{name}: the removed records are not listed (no {listing_dir}/ directory)")
    elif sum(listing.values()) != removed or (reason is not None and listing.get(reason, 0) != removed):
        problems.append(f"{listing_dir}/ lists {sum(listing.values())} records"
                        + (f" ({listing.get(reason, 0)} {reason})" if reason is not None else "")
                        + f", {name}.documents_removed is {removed}")
    return problems
