"""Mixtures by token budget: which documents of each source a job takes, and how many times, from content alone.

A mixture is a list of sources, each with a share of the output's tokens
(`weight`) or an absolute budget (`tokens`), and a cap on repetition
(`max_repeats`, default 1: no document twice). A source's target t tokens
out of its T available become c = t // T whole copies of the source plus a
remainder of R = t - c * T tokens, taken from the documents whose keyed hash
(`document_hash`: BLAKE2b of the document's token ids under the mixture
seed) lies below a threshold. A document is thus taken c or c + 1 times,
decided by its content, the settings and nothing else: not its file, its
place, the runner, the worker count or how the work was split.

The threshold is found exactly, in two passes over summaries that add up in
any order:

1. `Histogram`: per source, the tokens of its documents by hash bucket (the
   hash's top `BUCKET_BITS` bits). `coarse_plan` walks the buckets up to the
   one where the remainder is reached: every document below that bucket is
   taken, and the boundary bucket (1/65,536 of the documents) is decided in
2. `refine_plan`, from the (hash, tokens) of the boundary bucket's documents,
   sorted: the cut that comes nearest the remainder. So the realized tokens
   of a source are within half a document of its target (a few identical
   documents, which share a hash, move together).

Without a total (`total_tokens`), the mixture is the largest one that keeps
every weighted source within its cap: the total is set by the source that
runs out first. Every function here is plain Python and numpy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.core import reasons
from transforms.core.records import document_token_counts
from transforms.core.seeds import hash_key

__all__ = ["MixtureSource", "MixtureSpec", "Histogram", "SourcePlan", "MixturePlan", "parse_token_count",
           "parse_mixture", "document_hash", "batch_hashes", "coarse_plan", "refine_plan", "BUCKET_BITS"]

BUCKET_BITS = 16
MIXTURE_KEY = "mixture:"  # the prefix of the mixture seed's hash key (transforms.core.seeds.hash_key)
_SHIFT = 64 - BUCKET_BITS
_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kKmMbBgGtT]?)\s*$")


def parse_token_count(value, what: str = "tokens") -> int:
    """A number of tokens: an integer, or a number with a k / M / B (or G) / T suffix (powers of 1000).

    >>> parse_token_count("1.5B"), parse_token_count("250k"), parse_token_count(1000)
    (1500000000, 250000, 1000)
    """
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a number of tokens")
    if isinstance(value, int):
        count = value
    else:
        match = _COUNT.match(str(value))
        if not match:
            raise ValueError(f"{what}: {value!r} is not a number of tokens (e.g. 2000000, 500M, 1.5B, 2T)")
        number, suffix = match.groups()
        exact = float(number) * _SUFFIXES[suffix.lower()]
        count = round(exact)
        if abs(exact - count) > 1e-6 * max(1.0, exact):
            raise ValueError(f"{what}: {value!r} is not a whole number of tokens")
    if count <= 0:
        raise ValueError(f"{what}: {value!r} must be at least 1 token")
    return count


@dataclasses.dataclass(frozen=True)
class MixtureSource:
    """One source of a mixture: where its files are, and its share (weight) or budget (tokens)."""

    name: str
    path: str  # a directory, a glob, or a metadata file listing input paths
    weight: Optional[float] = None
    tokens: Optional[int] = None
    max_repeats: float = 1.0  # at most this many times its available tokens (1: no document twice)


@dataclasses.dataclass(frozen=True)
class MixtureSpec:
    sources: tuple  # MixtureSource, in the order given
    total_tokens: Optional[int] = None
    seed: int = 0


_SOURCE_KEYS = {"source", "path", "name", "weight", "tokens", "max_repeats"}


def parse_mixture(entries, *, total_tokens=None, seed: int = 0) -> MixtureSpec:
    """The `mixture` setting (a list of mappings) -> MixtureSpec; ValueError names the entry at fault."""
    if isinstance(entries, Mapping):
        entries = [{"name": name, **(value if isinstance(value, Mapping) else {"weight": value})}
                   for name, value in entries.items()]
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ValueError("mixture: a list of sources, each {source: PATH, weight: W | tokens: N[, max_repeats: R]}")
    sources, names = [], set()
    for i, entry in enumerate(entries):
        where = f"mixture[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: {entry!r} is not a mapping")
        unknown = set(entry) - _SOURCE_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                             f"(known: {', '.join(sorted(_SOURCE_KEYS))})")
        path = entry.get("source", entry.get("path"))
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"{where}: needs source: a directory, a glob or a metadata file")
        name = str(entry.get("name") or _default_name(path.strip()))
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
            raise ValueError(f"{where}: name {name!r}: use letters, digits, '.', '_' or '-'")
        if name in names:
            raise ValueError(f"{where}: two sources are named {name!r}; give one a name:")
        names.add(name)
        has_weight, has_tokens = entry.get("weight") is not None, entry.get("tokens") is not None
        if has_weight == has_tokens:
            raise ValueError(f"{where} ({name}): give exactly one of weight (a share of the output's tokens) "
                             f"or tokens (a budget)")
        weight = tokens = None
        if has_weight:
            weight = _positive(entry["weight"], f"{where} ({name}) weight")
        else:
            tokens = parse_token_count(entry["tokens"], f"{where} ({name}) tokens")
        repeats = _positive(entry.get("max_repeats", 1), f"{where} ({name}) max_repeats")
        if repeats < 1:
            raise ValueError(f"{where} ({name}) max_repeats: {repeats!r} must be at least 1 (1: no repetition)")
        sources.append(MixtureSource(name, path.strip(), weight, tokens, repeats))
    total = None if total_tokens in (None, "") else parse_token_count(total_tokens, "total_tokens")
    if total is not None and not any(s.weight is not None for s in sources):
        budgets = sum(s.tokens for s in sources)
        if budgets != total:
            raise ValueError(f"total_tokens {total} but every source has a budget, adding up to {budgets}: "
                             f"give one of them a weight, or leave total_tokens out")
    return MixtureSpec(tuple(sources), total, int(seed))


def _default_name(path: str) -> str:
    parts = [p for p in re.split(r"[\\/]", path.rstrip("/\\")) if p and not any(c in p for c in "*?[")]
    base = parts[-1] if parts else "source"
    base = re.sub(r"\.(txt|list|json|jsonl)$", "", base)
    return re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip("._-") or "source"


def _positive(value, what: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what}: {value!r} must be > 0")
    return number


def document_hash(values: Sequence[np.ndarray], key: bytes) -> int:
    """A document's 64-bit keyed hash, from its token ids (each key's, with its length): its content."""
    h = hashlib.blake2b(digest_size=8, key=key)
    for ids in values:
        ids = np.ascontiguousarray(ids, dtype="<i4")
        h.update(len(ids).to_bytes(8, "little"))
        h.update(memoryview(ids).cast("B"))
    return int.from_bytes(h.digest(), "big")


def batch_hashes(tokens: Sequence[tuple], seed: int,
                 counts: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(hashes uint64, token counts int64) of a batch's documents (tuples of per-key id arrays); `counts`, when
    the batch knows its own (a DPO pair counts its prompt twice), else every key's ids."""
    key = hash_key(MIXTURE_KEY, seed)
    hashes = np.fromiter((document_hash(doc, key) for doc in tokens), dtype=np.uint64, count=len(tokens))
    return hashes, document_token_counts(tokens) if counts is None else counts


@dataclasses.dataclass
class Histogram:
    """Per source: documents and tokens by hash bucket. Adds up in any order (a sum)."""

    docs: np.ndarray  # int64 [sources, 2**BUCKET_BITS]
    tokens: np.ndarray  # int64 [sources, 2**BUCKET_BITS]

    @classmethod
    def empty(cls, n_sources: int) -> "Histogram":
        shape = (n_sources, 1 << BUCKET_BITS)
        return cls(np.zeros(shape, np.int64), np.zeros(shape, np.int64))

    @classmethod
    def of(cls, n_sources: int, source: int, hashes: np.ndarray, counts: np.ndarray) -> "Histogram":
        return cls.empty(n_sources).add_documents(source, hashes, counts)

    def add_documents(self, source: int, hashes: np.ndarray, counts: np.ndarray) -> "Histogram":
        """Count documents of `source` (their hashes and token counts) in their buckets."""
        buckets = bucket_of(hashes)
        np.add.at(self.docs[source], buckets, 1)
        np.add.at(self.tokens[source], buckets, counts)
        return self

    def add(self, other: "Histogram") -> "Histogram":
        self.docs += other.docs
        self.tokens += other.tokens
        return self


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """What a job takes of one source: every document `copies` times, one more below `threshold`."""

    name: str
    docs_available: int
    tokens_available: int
    target_tokens: int
    copies: int  # whole copies of the source
    remainder: int  # tokens wanted from the documents below the threshold
    bucket: int  # the boundary bucket (coarse plan), or -1 when no remainder is taken
    tokens_below: int  # tokens of the documents in the buckets below it
    threshold: Optional[int] = None  # refined: a document takes one more copy when its hash < threshold


@dataclasses.dataclass(frozen=True)
class MixturePlan:
    sources: tuple  # SourcePlan, in the spec's order
    total_tokens: int  # the mixture's target total
    limited_by: Optional[str] = None  # without total_tokens: the source whose cap set the total

    def groups_of(self, source: int) -> int:
        """Groups a packing group of `source` becomes: itself, then one per further copy any document can take."""
        plan = self.sources[source]
        return max(1, plan.copies + (1 if plan.threshold else 0))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "MixturePlan":
        data = json.loads(text)
        return cls(tuple(SourcePlan(**s) for s in data["sources"]), data["total_tokens"], data.get("limited_by"))

    def times(self, source: int, hashes: np.ndarray) -> np.ndarray:
        """Copies of each document of `source` (hashes uint64) -> int64 array."""
        plan = self.sources[source]
        extra = hashes < np.uint64(plan.threshold) if plan.threshold < 1 << 64 else np.ones(len(hashes), bool)
        return plan.copies + extra.astype(np.int64)

    def summary(self) -> dict:
        """data_params.json's mixture section's planned half (the counts come from the job's statistics)."""
        total = sum(s.target_tokens for s in self.sources) or 1
        return {
            "total_tokens_target": self.total_tokens,
            **({"limited_by": self.limited_by} if self.limited_by else {}),
            "sources": {s.name: {"documents_available": s.docs_available, "tokens_available": s.tokens_available,
                                 "target_tokens": s.target_tokens, "target_share": s.target_tokens / total,
                                 "whole_copies": s.copies, "threshold": s.threshold}
                        for s in self.sources},
        }


def targets(spec: MixtureSpec, available: Sequence[int]) -> tuple[list[int], int, Optional[str]]:
    """Per source its target tokens, the total, and (without total_tokens) the source whose cap set it.

    Raises ValueError when a source cannot give its budget or share within max_repeats.
    """
    budgets = sum(s.tokens for s in spec.sources if s.tokens is not None)
    weight_sum = sum(s.weight for s in spec.sources if s.weight is not None)
    for s, have in zip(spec.sources, available):
        if have == 0:
            raise ValueError(f"mixture source {s.name}: no tokens found in {s.path}")
        if s.tokens is not None and s.tokens > s.max_repeats * have:
            raise ValueError(f"mixture source {s.name}: a budget of {s.tokens} tokens, but it has {have} "
                             f"(max_repeats {s.max_repeats:g} allows {math.floor(s.max_repeats * have)})")
    limited_by = None
    if spec.total_tokens is not None:
        weighted = spec.total_tokens - budgets
        if weight_sum and weighted <= 0:
            raise ValueError(f"total_tokens {spec.total_tokens} leaves nothing for the weighted sources after "
                             f"the budgets ({budgets} tokens)")
        total = spec.total_tokens
    else:
        # The largest weighted total no weighted source runs out of: each allows the whole tokens max_repeats
        # gives it, floor(max_repeats * have), over its share. Not max_repeats * have itself: when that is not
        # whole (max_repeats 1.5 of 3 tokens), a share cut from the total in whole tokens can round up past it.
        weighted, limited_by = 0, None
        if weight_sum:
            caps = [(math.floor(math.floor(s.max_repeats * have) * weight_sum / s.weight), s.name)
                    for s, have in zip(spec.sources, available) if s.weight is not None]
            weighted, limited_by = min(caps)
        total = weighted + budgets
    wanted = []
    shares = _split_exactly(weighted, [s.weight for s in spec.sources if s.weight is not None])
    shares = iter(shares)
    for s in spec.sources:
        wanted.append(s.tokens if s.tokens is not None else next(shares))
    for s, have, want in zip(spec.sources, available, wanted):
        if want > s.max_repeats * have:
            raise ValueError(f"mixture source {s.name}: its share is {want} tokens of {total}, but it has {have} "
                             f"(max_repeats {s.max_repeats:g}); raise max_repeats, lower its weight or "
                             f"total_tokens, or leave total_tokens out for the largest mixture that fits")
    return wanted, total, limited_by


def _split_exactly(total: int, weights: list) -> list[int]:
    """`total` cut in proportion to `weights`, in whole tokens adding up to it (largest remainders)."""
    if not weights:
        return []
    s = sum(weights)
    exact = [total * w / s for w in weights]
    out = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (out[i] - exact[i], i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return out


def coarse_plan(spec: MixtureSpec, hist: Histogram) -> MixturePlan:
    """First pass: targets, whole copies, and each source's boundary bucket."""
    available = [int(t) for t in hist.tokens.sum(axis=1)]
    wanted, total, limited_by = targets(spec, available)
    plans = []
    for k, (s, have, want) in enumerate(zip(spec.sources, available, wanted)):
        copies, remainder = divmod(want, have)
        bucket, below = -1, 0
        if remainder:
            cum = np.cumsum(hist.tokens[k])
            bucket = int(np.searchsorted(cum, remainder, side="left"))  # first bucket reaching the remainder
            below = int(cum[bucket - 1]) if bucket else 0
        plans.append(SourcePlan(s.name, int(hist.docs[k].sum()), have, want, copies, remainder, bucket, below))
    return MixturePlan(tuple(plans), total, limited_by)


def bucket_of(hashes: np.ndarray) -> np.ndarray:
    return (hashes >> np.uint64(_SHIFT)).astype(np.int64)


def refine_plan(coarse: MixturePlan, boundary: Iterable[tuple[int, int, int]]) -> MixturePlan:
    """Second pass: (source, hash, tokens) of the boundary buckets' documents -> the exact thresholds.

    Within a source's boundary bucket the documents are taken in hash order
    up to the cut nearest its remainder (documents of one hash together).
    """
    by_source: dict = {}
    for source, h, n in boundary:
        by_source.setdefault(int(source), []).append((int(h), int(n)))
    plans = []
    for k, plan in enumerate(coarse.sources):
        if plan.bucket < 0:
            threshold = 0  # no remainder: every document exactly `copies` times
        else:
            need = plan.remainder - plan.tokens_below
            merged: dict = {}
            for h, n in by_source.get(k, []):
                merged[h] = merged.get(h, 0) + n
            taken, threshold = 0, (plan.bucket + 1) << _SHIFT  # all of the bucket, unless cut below
            for h in sorted(merged):
                after = taken + merged[h]
                if after > need and after - need > need - taken:  # stopping before it is nearer (or reached)
                    threshold = h
                    break
                taken = after
        plans.append(dataclasses.replace(plan, threshold=threshold))
    return dataclasses.replace(coarse, sources=tuple(plans))


# Counters a mixture adds to the job's statistics, per source name: `mixture.<field>.<source>`.
MIXTURE_PREFIX = "mixture."
NOT_IN_MIXTURE = reasons.NOT_IN_MIXTURE  # the reason a document the mixture did not take is counted as dropped
REPEATS = "docs_repeated"  # copies of documents past their first: documents the input did not have


def select_batch(batch, plan: MixturePlan, source: int, n_files: int, hashes: np.ndarray, counts: np.ndarray) -> list:
    """A TokenBatch (or EncodedBatch) of one source -> the batches the mixture makes of it: its documents taken at least once
    (the group itself), then per further copy k the documents taken more than k times, as a group of their own.

    A copy is a group of its own so that everything after sees distinct documents: its own packing (never
    two copies of a document in one row), shuffle keys, FIM and short_seq_prob draws, all seeded by its name.
    The group keeps the statistics of its reading; a copy counts only its documents, as repeats.
    """
    from transforms.core.stats import Stats

    name = plan.sources[source].name
    times = plan.times(source, hashes)
    stats, where = batch.stats, batch.group.source
    stats.add(f"{MIXTURE_PREFIX}docs_available.{name}", len(times))
    stats.add(f"{MIXTURE_PREFIX}tokens_available.{name}", int(counts.sum()))
    stats.add(f"{MIXTURE_PREFIX}docs_taken.{name}", int((times > 0).sum()))
    stats.add(f"{MIXTURE_PREFIX}tokens_taken.{name}", int((times * counts).sum()))
    stats.add(f"{MIXTURE_PREFIX}copies.{name}", int(times.sum()))
    stats.add(f"dropped.{NOT_IN_MIXTURE}", int((times == 0).sum()), where)
    out = []
    # Every copy group the source can have, empty ones too: a resume skips a group only when all are stored.
    for k in range(plan.groups_of(source)):
        keep = np.flatnonzero(times > k)
        if k == 0:
            out.append(batch.take(keep, batch.group, stats))
            continue
        copy_stats = Stats()
        copy_stats.add(REPEATS, len(keep), where)
        group = dataclasses.replace(batch.group, copy=k, file_index=batch.group.file_index + k * n_files)
        out.append(batch.take(keep, group, copy_stats))
    return out


def output_tokens_taken(stats) -> int:
    """The tokens a mixture took (copies included) as `stats` counted them: one output's of a split job (each
    output has its own counters). (Named apart from mixture_section's per-source `tokens_taken`.)"""
    return sum(v for k, v in stats.with_prefix(MIXTURE_PREFIX).items() if k.startswith("tokens_taken."))


def mixture_section(summary: dict, stats) -> dict:
    """data_params.json's `mixture`: the plan (targets, thresholds) with what the job took of each source."""
    counts = stats.with_prefix(MIXTURE_PREFIX)
    sources = {name: dict(planned) for name, planned in summary["sources"].items()}
    taken_total = sum(counts.get(f"tokens_taken.{name}", 0) for name in sources) or 1
    for name, entry in sources.items():
        docs_taken = counts.get(f"docs_taken.{name}", 0)
        tokens_taken = counts.get(f"tokens_taken.{name}", 0)
        seen = (counts.get(f"docs_available.{name}", 0), counts.get(f"tokens_available.{name}", 0))
        if seen != (entry["documents_available"], entry["tokens_available"]):
            raise RuntimeError(f"mixture source {name}: the plan counted {entry['documents_available']} documents "
                               f"and {entry['tokens_available']} tokens, the selection saw {seen[0]} and {seen[1]}")
        entry.update(documents_taken=docs_taken, tokens_taken=tokens_taken,
                     repeats=max(0, counts.get(f"copies.{name}", 0) - docs_taken),
                     realized_share=tokens_taken / taken_total)
    return {**{k: v for k, v in summary.items() if k != "sources"}, "tokens_taken": sum(
        counts.get(f"tokens_taken.{name}", 0) for name in sources), "sources": sources}


def check_mixture(section: Mapping, inp: Mapping, *, encoded: bool = False) -> list[str]:
    """Problems with data_params.json's mixture section, against itself and the input accounting (verify);
    `encoded`: a chat mode's (its records chosen once encoded)."""
    problems = []
    sources = section.get("sources")
    if not isinstance(sources, Mapping) or not sources:
        return ["mixture.sources is missing"]
    try:
        taken_total = sum(int(s["tokens_taken"]) for s in sources.values())
        if section.get("tokens_taken") != taken_total:
            problems.append(f"mixture.tokens_taken is {section.get('tokens_taken')}, its sources add up to "
                            f"{taken_total}")
        shares = sum(float(s["target_share"]) for s in sources.values())
        if abs(shares - 1) > 1e-9:
            problems.append(f"mixture: the target shares add up to {shares}, not 1")
        for name, s in sources.items():
            if not 0 <= s["documents_taken"] <= s["documents_available"]:
                problems.append(f"mixture.{name}: {s['documents_taken']} documents taken of "
                                f"{s['documents_available']}")
            if s["repeats"] < 0 or (s["repeats"] and s["documents_taken"] == 0):
                problems.append(f"mixture.{name}: {s['repeats']} repeats of {s['documents_taken']} documents")
            want = s["tokens_taken"] / taken_total if taken_total else 0.0
            if abs(s["realized_share"] - want) > 1e-9:
                problems.append(f"mixture.{name}.realized_share is {s['realized_share']}, its tokens make {want}")
            if s["tokens_taken"] > 0 and s["documents_taken"] == 0:
                problems.append(f"mixture.{name}: {s['tokens_taken']} tokens taken from no document")
        dropped = inp.get("dropped_by_reason", {}).get(NOT_IN_MIXTURE, 0)
        # The chat modes choose among encoded records: those dropped while encoding (too long, ...) or as
        # duplicates were never available. The text modes choose among tokenized documents, which only
        # deduplication (before the draw) and their rows (after it) drop.
        by_reason = inp.get("dropped_by_reason", {})
        duplicates = by_reason.get(reasons.DUPLICATE_EXACT, 0) + by_reason.get(reasons.DUPLICATE_NEAR, 0)
        before = inp.get("dropped", 0) - dropped if encoded else duplicates
        checks = (("good", sum(s["documents_available"] for s in sources.values()) + before),
                  ("repeats", sum(s["repeats"] for s in sources.values())))
        for key, want in checks:
            if inp.get(key, 0) != want:
                problems.append(f"input.{key} is {inp.get(key, 0)}, the mixture's sources make {want}"
                                + (f" (with the {before} records dropped before the draw)" if before else ""))
        want = sum(s["documents_available"] - s["documents_taken"] for s in sources.values())
        if dropped != want:
            problems.append(f"input.dropped_by_reason.{NOT_IN_MIXTURE} is {dropped}, the mixture left {want} "
                            "documents")
    except (KeyError, TypeError, ValueError) as e:
        problems.append(f"mixture section is malformed ({e!r})")
    return problems
