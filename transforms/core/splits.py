"""Splits: which output dataset each document goes to, from its content alone.

One job writes several datasets: a (subset, split, max sequence length) each,
at `OUT/<subset>/<split>/msl_<M>/` with the levels that are not used left out.

- The **subset** of a document is the top-level directory of its file under
  the input directory (Cerebras' `top_level_as_subsets` / `subsets`).
- Within a subset, the (split, msl) **cell** is drawn from a keyed hash of the
  document's values (normalized text; for Summarization, Chat and DPO the
  whole record) under `split_seed`: a 64-bit BLAKE2b, compared with integer
  thresholds at the cells' cumulative fractions. Nothing else enters the draw,
  so a document's cell does not depend on its file, its position, the runner
  or the worker count, and identical documents always share a cell: an exact
  duplicate can never be in both train and validation.

    >>> plan = make_split_plan(data_splits=parse_data_splits("train=0.5,test=0.5"), max_seq_length=8)
    >>> [o.path for o in plan.outputs]
    ['train', 'test']
    >>> plan.route(0, ("same text",)) == plan.route(0, ("same text",))
    True

Splitting a packing group (`route_batch`) moves each document with exactly
the counters it contributed (read, good, its characters and bytes before and
after normalization), so every output's statistics add up on their own; what
belongs to no document (bad records, reading time) stays with the job.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
import re
from collections import Counter
from fractions import Fraction
from typing import Mapping, Optional, Sequence

from transforms.core.normalize import NormalizeConfig, normalized_document
from transforms.core.records import DocBatch
from transforms.core.seeds import hash_key
from transforms.core.stats import Stats
from transforms.core.units import shares

__all__ = ["Output", "SplitPlan", "make_split_plan", "parse_data_splits", "parse_context_splits", "parse_msl",
           "route_batch", "subset_of", "check_name", "fraction_bound", "RESERVED_NAMES"]

# Names the job itself writes at the top of the output directory: no subset or split may take them.
RESERVED_NAMES = ("dead_letter", ".tmp", "data_params.json")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HASH_BITS = 64
# Counters a document carries from the reader and the normalizer: they move with it to its output.
_PER_DOCUMENT = ("docs_read", "docs_good")


def check_name(kind: str, name: str) -> str:
    """`name` if it can be a directory of the output, else ValueError naming it."""
    if not _NAME.match(name) or name in RESERVED_NAMES or name.startswith("msl_"):
        raise ValueError(f"{kind} name {name!r} cannot be a directory of the output: use letters, digits, "
                         f"'.', '_' or '-', not starting with msl_ and none of {', '.join(RESERVED_NAMES)}")
    return name


def _fraction(value, what: str) -> float:
    """A fraction given as a number or as "a/b" text."""
    try:
        if isinstance(value, bool):
            raise ValueError
        f = float(Fraction(str(value).strip())) if isinstance(value, str) else float(value)
    except (ValueError, ZeroDivisionError, TypeError):
        raise ValueError(f"{what}: {value!r} is not a fraction (a number, or a/b)") from None
    if not math.isfinite(f) or f <= 0:
        # An output asked for none of the documents would be an empty dataset by design: leave it out.
        hint = " (leave out an output that should get nothing)" if f == 0 else ""
        raise ValueError(f"{what}: {value!r} must be a fraction > 0{hint}")
    return f


def parse_msl(value) -> int:
    """A max sequence length: an integer, or a number of K (x1024) with a k/K suffix.

    >>> parse_msl("2K"), parse_msl("0.5k"), parse_msl(300)
    (2048, 512, 300)
    """
    text = str(value).strip()
    try:
        if text[-1:] in ("k", "K"):
            tokens = float(text[:-1]) * 1024
        else:
            tokens = float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a sequence length (e.g. 2048 or 2K)") from None
    if isinstance(value, bool) or not tokens.is_integer() or tokens < 2:
        raise ValueError(f"{value!r} is not a sequence length of at least 2 whole tokens")
    return int(tokens)


def _pairs(text: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{what}: {item.strip()!r} is not name=fraction")
        pairs.append((name.strip(), value.strip()))
    if not pairs:
        raise ValueError(f"{what}: no entries")
    return pairs


def parse_context_splits(value, what: str = "context_splits") -> tuple[tuple[int, float], ...]:
    """(msl, fraction) pairs, fractions normalized to sum to 1 as Cerebras does.

    Accepts "2K=0.25,8K=0.75", or Cerebras' mapping {MSL_List: [...], split_fractions: [...]}.

    >>> parse_context_splits({"MSL_List": ["1K", 2048], "split_fractions": [1, 3]})
    ((1024, 0.25), (2048, 0.75))
    """
    if isinstance(value, Mapping):
        unknown = set(value) - {"MSL_List", "split_fractions"}
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                             "(expected MSL_List and split_fractions)")
        msls, fractions = value.get("MSL_List"), value.get("split_fractions")
        if not isinstance(msls, list) or not isinstance(fractions, list) or len(msls) != len(fractions):
            raise ValueError(f"{what}: MSL_List and split_fractions must be lists of the same length")
        pairs = list(zip(msls, fractions))
    elif isinstance(value, str):
        pairs = _pairs(value, what)
    else:
        raise ValueError(f"{what}: expected 2K=0.5,4K=0.5 or a mapping with MSL_List and split_fractions")
    if not pairs:
        raise ValueError(f"{what}: no sequence lengths")
    out = []
    for msl, fraction in pairs:
        try:
            length = parse_msl(msl)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        out.append((length, _fraction(fraction, f"{what} {msl}")))
    msls = [m for m, _ in out]
    if len(set(msls)) != len(msls):
        raise ValueError(f"{what}: a sequence length is given twice: {msls}")
    total = sum(f for _, f in out)  # > 0: every fraction is
    return tuple((m, f / total) for m, f in out)


def parse_data_splits(value, what: str = "data_splits") -> tuple[tuple[str, float, Optional[tuple]], ...]:
    """(name, fraction, context splits or None) per split; the fractions must add up to 1.

    Accepts "train=0.98,validation=0.01,test=0.01" (fractions may be a/b), a
    mapping {name: fraction}, or Cerebras' {name: {split_fraction: f, context_splits: {...}}}.

    >>> parse_data_splits("train=2/3,test=1/3")
    (('train', 0.6666666666666666, None), ('test', 0.3333333333333333, None))
    """
    if isinstance(value, str):
        items = [(name, fraction, None) for name, fraction in _pairs(value, what)]
    elif isinstance(value, Mapping):
        items = []
        for name, body in value.items():
            if isinstance(body, Mapping):
                unknown = set(body) - {"split_fraction", "context_splits"}
                if unknown or "split_fraction" not in body:
                    raise ValueError(f"{what}.{name}: expected split_fraction (and optionally context_splits)")
                context = body.get("context_splits")
                items.append((str(name), body["split_fraction"],
                              parse_context_splits(context, f"{what}.{name}.context_splits")
                              if context is not None else None))
            else:
                items.append((str(name), body, None))
    else:
        raise ValueError(f"{what}: expected train=0.98,validation=0.01,test=0.01 or a mapping")
    if not items:
        raise ValueError(f"{what}: no splits")
    out, seen = [], set()
    for name, fraction, context in items:
        check_name(f"{what}: split", name)
        if name in seen:
            raise ValueError(f"{what}: split {name!r} is given twice")
        seen.add(name)
        out.append((name, _fraction(fraction, f"{what}.{name}"), context))
    total = sum(f for _, f, _ in out)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"{what}: the fractions add up to {total:g}, not 1")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Output:
    """One dataset the job writes."""

    subset: Optional[str]
    split: Optional[str]
    max_seq_length: int
    fraction: float  # of its subset's documents, asked
    msl_level: bool  # the path has an msl_<M> level

    @property
    def path(self) -> str:
        """Where it goes under the output directory ('' for the whole of it)."""
        parts = [p for p in (self.subset, self.split) if p is not None]
        if self.msl_level:
            parts.append(f"msl_{self.max_seq_length}")
        return "/".join(parts)


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The outputs of a job, grouped by subset, and the rule that picks a document's output."""

    outputs: tuple  # Output, subset by subset, cells in the order asked
    subsets: tuple  # subset names (None: no subsets), in output order
    seed: int = 0

    def __post_init__(self):
        starts, thresholds = [], []
        for subset in self.subsets:
            cells = [o for o in self.outputs if o.subset == subset]
            starts.append(self.outputs.index(cells[0]))
            acc, cut = 0.0, []
            for o in cells[:-1]:
                acc += o.fraction
                cut.append(min(int(acc * (1 << _HASH_BITS)), 1 << _HASH_BITS))
            thresholds.append(tuple(cut))
        object.__setattr__(self, "_starts", tuple(starts))
        object.__setattr__(self, "_thresholds", tuple(thresholds))
        object.__setattr__(self, "_key", hash_key("split_seed\x1f", self.seed))

    @property
    def rest_part(self) -> int:
        """The `part` of a group's share that holds no document: the job's own counters (bad records, reading)."""
        return len(self.outputs)

    def parts_of(self, relpath: str) -> list[int]:
        """Every part a group of this file is cut into: its subset's outputs, and the rest."""
        return [*self.outputs_of(self.subset_index(relpath)), self.rest_part]

    def outputs_of(self, subset_index: int) -> range:
        """The indices of a subset's outputs."""
        start = self._starts[subset_index]
        return range(start, start + len(self._thresholds[subset_index]) + 1)

    def draw(self, values: Sequence[str]) -> int:
        """The document's 64-bit draw: a keyed hash of its values (each length-prefixed, so none can
        run into the next)."""
        h = hashlib.blake2b(digest_size=_HASH_BITS // 8, key=self._key)
        for v in values:
            data = v.encode("utf-8", errors="surrogatepass")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return int.from_bytes(h.digest(), "little")

    def route(self, subset_index: int, values: Sequence[str]) -> int:
        """The index (in `outputs`) of the output a document of this subset goes to."""
        thresholds = self._thresholds[subset_index]
        cell = bisect.bisect_right(thresholds, self.draw(values)) if thresholds else 0
        return self._starts[subset_index] + cell

    def subset_index(self, relpath: str) -> int:
        name = subset_of(relpath) if self.subsets != (None,) else None
        return self.subsets.index(name)


def subset_of(relpath: str) -> Optional[str]:
    """The top-level directory of a file's path under the input directory (None: a file at the top).

    >>> subset_of("wiki/part-0.jsonl"), subset_of("a.jsonl")
    ('wiki', None)
    """
    head, sep, _ = relpath.partition("/")
    return head if sep else None


def make_split_plan(*, data_splits: Optional[tuple] = None, context_splits: Optional[tuple] = None,
                    subsets: Sequence[Optional[str]] = (None,), max_seq_length: int, seed: int = 0) -> SplitPlan:
    """The outputs for these settings: every subset gets every (split, msl) cell.

    A cell's fraction is its split's times its msl's; a split without context
    splits (and no shared ones) uses `max_seq_length`, without an msl level.
    """
    if data_splits and context_splits and any(c is not None for _, _, c in data_splits):
        raise ValueError("context_splits: given both for the whole job and inside data_splits; choose one")
    splits = data_splits or ((None, 1.0, None),)
    cells = []
    for name, fraction, context in splits:
        context = context or context_splits
        for msl, share in context or ((max_seq_length, 1.0),):
            cells.append((name, msl, fraction * share, context is not None))
    outputs = tuple(Output(subset, name, msl, fraction, level)
                    for subset in subsets for name, msl, fraction, level in cells)
    return SplitPlan(outputs, tuple(subsets), seed)


def route_batch(batch: DocBatch, plan: SplitPlan, normalize: Optional[NormalizeConfig] = None
                ) -> tuple[list[DocBatch], Stats]:
    """One packing group -> its documents per output of its subset (every one, maybe empty), and the rest.

    `normalize`: normalize first (the draw sees the normalized text) and count
    sizes per document, as normalize_batch does for a whole group (None: the
    stage after does both, as for Chat and DPO). A part's group is the batch's
    with `part` set to the output's index, so its name, its seeds and its
    stored files are its own. The group's share of the progress bar is shared
    among its parts by characters; the rest stats hold what no document carries.
    """
    group, source = batch.group, batch.group.source
    subset = plan.subset_index(group.relpath)
    outputs = plan.outputs_of(subset)
    docs: dict[int, list] = {k: [] for k in outputs}
    counts: dict[int, Counter] = {k: Counter() for k in outputs}
    chars: dict[int, int] = {k: 0 for k in outputs}
    for doc in batch.docs:
        sizes = None
        if normalize is not None:
            doc, sizes = normalized_document(doc, normalize)
        k = plan.route(subset, doc.values) if len(outputs) > 1 else outputs.start
        docs[k].append(doc)
        chars[k] += sum(len(v) for v in doc.values)
        c = counts[k]
        c["docs_read"] += 1
        c["docs_good"] += 1
        if sizes is not None:
            c.update(sizes)
    rest = Stats(Counter(batch.stats.totals), {s: Counter(c) for s, c in batch.stats.sources.items()})
    rest.sources.setdefault(source, Counter())  # every input file is listed, even one without any record
    parts = []
    for k, share in zip(outputs, shares(batch.progress_bytes, [chars[k] for k in outputs])):
        stats = Stats()
        for name, value in sorted(counts[k].items()):
            stats.add(name, value, source)
            if name in _PER_DOCUMENT:
                _subtract(rest, name, value, source)
        parts.append(DocBatch(dataclasses.replace(group, part=k), docs[k], stats, share))
    return parts, rest


def _subtract(stats: Stats, name: str, value: int, source: str) -> None:
    for counter in (stats.totals, stats.sources[source]):
        counter[name] -= value
        if not counter[name]:
            del counter[name]


def fraction_bound(n: int, p: float, false_alarm: float = 1e-6) -> float:
    """How far an obtained fraction of n independent draws may stray from p with probability < false_alarm.

    Bernstein's inequality for a sum of n Bernoulli(p) draws:
    P(|X/n - p| >= t) <= 2 exp(-n t^2 / (2 p (1 - p) + 2 t / 3)); solved for t at
    the false-alarm rate. Tight for small fractions too (where Hoeffding's
    bound is wider than the fraction itself).

    >>> round(fraction_bound(10_000, 0.01, 1e-6), 4)
    0.0059
    """
    if n <= 0:
        return 1.0
    log = math.log(2 / false_alarm)
    return (2 * log / 3 + math.sqrt(4 * log * log / 9 + 8 * n * p * (1 - p) * log)) / (2 * n)
