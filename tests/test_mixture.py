"""Mixtures by token budget (transforms.core.mixture): settings, targets, and exact, order-free thresholds."""

from __future__ import annotations

import random

import numpy as np
import pytest

from transforms.core.mixture import (MIXTURE_KEY, Histogram, MixtureSpec, batch_hashes, bucket_of, coarse_plan,
                                     document_hash, parse_mixture, parse_token_count, refine_plan, targets)
from transforms.core.seeds import hash_key


def test_token_counts_take_suffixes():
    assert parse_token_count("2T") == 2 * 10**12
    assert parse_token_count(" 500M ") == 500_000_000
    assert parse_token_count("1.25k") == 1250
    assert parse_token_count("3G") == 3 * 10**9
    for bad in ("", "1.5", "-3", "0", "1e9", "ten", True, "1.0001k"):
        with pytest.raises(ValueError):
            parse_token_count(bad)


def test_a_mixture_is_checked_entry_by_entry():
    spec = parse_mixture([{"source": "/d/web/", "weight": 3}, {"source": "/d/code/*.jsonl", "name": "code",
                                                                "tokens": "2M", "max_repeats": 2}],
                         total_tokens="10M", seed=7)
    assert [(s.name, s.weight, s.tokens, s.max_repeats) for s in spec.sources] == [
        ("web", 3.0, None, 1.0), ("code", None, 2_000_000, 2.0)]
    assert spec.total_tokens == 10_000_000 and spec.seed == 7
    cases = [([], "a list"), ([{"weight": 1}], "needs source"), ([{"source": "a", "weight": 1, "tokens": 5}],
             "exactly one"), ([{"source": "a"}], "exactly one"), ([{"source": "a", "weight": 0}], "> 0"),
             ([{"source": "a", "weight": 1, "max_repeats": 0.5}], "at least 1"),
             ([{"source": "x/a", "weight": 1}, {"source": "y/a", "weight": 1}], "two sources are named"),
             ([{"source": "a", "weight": 1, "colour": 2}], "unknown key")]
    for entries, message in cases:
        with pytest.raises(ValueError, match=message):
            parse_mixture(entries)
    with pytest.raises(ValueError, match="adding up to"):
        parse_mixture([{"source": "a", "tokens": 5}], total_tokens=6)


def _corpus(rng: random.Random, n_docs: int, mean: int) -> list[tuple[np.ndarray]]:
    return [(np.array([rng.randrange(50000) for _ in range(max(1, int(rng.expovariate(1 / mean))))],
                      dtype=np.int32),) for _ in range(n_docs)]


def _realize(spec: MixtureSpec, sources: list[list], batch_docs: int = 37, shuffle_seed=None):
    """The plan from batches of documents in any order, and each source's realized tokens."""
    batches = []
    for k, docs in enumerate(sources):
        for lo in range(0, len(docs), batch_docs):
            batches.append((k, docs[lo:lo + batch_docs]))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(batches)
    hashed = [(k, *batch_hashes(docs, spec.seed)) for k, docs in batches]
    hist = Histogram.empty(len(sources))
    for k, hashes, counts in hashed:
        hist.add(Histogram.of(len(sources), k, hashes, counts))
    coarse = coarse_plan(spec, hist)
    boundary = [(k, int(h), int(n)) for k, hashes, counts in hashed
                for h, n, b in zip(hashes, counts, bucket_of(hashes)) if b == coarse.sources[k].bucket]
    plan = refine_plan(coarse, boundary)
    taken = [0] * len(sources)
    for k, hashes, counts in hashed:
        taken[k] += int((plan.times(k, hashes) * counts).sum())
    return plan, taken


@pytest.fixture(params=[16, 3], ids=["65536 buckets", "8 buckets"])
def bits(request, monkeypatch):
    """The real bucket count, and one so small that every boundary bucket holds hundreds of documents: the
    refinement, not the buckets, must then make the bound."""
    from transforms.core import mixture

    monkeypatch.setattr(mixture, "BUCKET_BITS", request.param)
    monkeypatch.setattr(mixture, "_SHIFT", 64 - request.param)
    return request.param


def test_shares_of_three_sources_of_very_different_sizes_meet_the_bound(bits):
    rng = random.Random(0)
    sources = [_corpus(rng, 3000, 300), _corpus(rng, 200, 500), _corpus(rng, 40, 2000)]  # big, small, tiny
    spec = parse_mixture([{"source": "big", "weight": 0.5}, {"source": "small", "weight": 0.3, "max_repeats": 5},
                          {"source": "tiny", "weight": 0.2, "max_repeats": 10}], total_tokens=400_000)
    plan, taken = _realize(spec, sources)
    total = sum(taken)
    available = [sum(len(d[0]) for d in docs) for docs in sources]
    assert available[0] > 0.5 * 400_000 > 0  # the big source is cut ...
    assert available[1] < 0.3 * 400_000 and available[2] < 0.2 * 400_000  # ... the others repeated
    largest = [max(len(d[0]) for d in docs) for docs in sources]
    for k, want in enumerate((0.5, 0.3, 0.2)):
        # Each source within half a document of its target tokens, so its share within the bound.
        assert abs(taken[k] - plan.sources[k].target_tokens) <= largest[k] / 2
        assert abs(taken[k] / total - want) <= max(0.001, largest[k] / total)
    assert plan.sources[1].copies >= 1 and plan.sources[2].copies >= 1 and plan.sources[0].copies == 0


def test_the_plan_does_not_depend_on_order_or_batching(bits):
    rng = random.Random(1)
    sources = [_corpus(rng, 500, 200), _corpus(rng, 120, 300)]
    spec = parse_mixture([{"source": "a", "weight": 2}, {"source": "b", "weight": 1, "max_repeats": 3}],
                         total_tokens=90_000, seed=3)
    first = _realize(spec, sources)
    assert _realize(spec, sources, batch_docs=5, shuffle_seed=9) == first
    assert _realize(spec, [list(reversed(s)) for s in sources], batch_docs=101) == first
    # Another seed: another draw of the same size.
    other, taken = _realize(parse_mixture([{"source": "a", "weight": 2}, {"source": "b", "weight": 1,
                                                                          "max_repeats": 3}],
                                          total_tokens=90_000, seed=4), sources)
    assert other.sources[0].threshold != first[0].sources[0].threshold
    assert abs(sum(taken) - sum(first[1])) <= 2 * max(len(d[0]) for s in sources for d in s)


def test_without_a_total_the_largest_mixture_that_fits():
    rng = random.Random(2)
    sources = [_corpus(rng, 400, 100), _corpus(rng, 100, 100)]
    available = [sum(len(d[0]) for d in docs) for docs in sources]
    spec = parse_mixture([{"source": "a", "weight": 1}, {"source": "b", "weight": 1, "max_repeats": 2}])
    plan, taken = _realize(spec, sources)
    # b allows 2x its tokens for half the mixture; a allows all of its own: the smaller of the two totals.
    assert plan.total_tokens == min(2 * available[0], 2 * 2 * available[1])
    assert plan.limited_by == ("a" if 2 * available[0] < 4 * available[1] else "b")
    assert all(t <= 2 * a for t, a in zip(taken, available))


def test_spare_tokens_go_to_the_largest_remainders_then_the_first_source():
    """A total cut by weight in whole tokens: floors, then one spare token each to the largest fractional parts,
    ties to the source given first. "Within one token of the share" would pass a wrong hand-out too."""

    def split(weights, total, budgets=()):
        entries = [{"source": f"w{i}", "weight": w} for i, w in enumerate(weights)]
        entries += [{"source": f"b{i}", "tokens": n} for i, n in enumerate(budgets)]
        wanted, got_total, limited_by = targets(parse_mixture(entries, total_tokens=total), [10**6] * len(entries))
        assert got_total == total and limited_by is None
        return wanted

    assert split([0.6, 0.3, 0.1], 7) == [4, 2, 1]  # 4.2, 2.1, 0.7: the spare token to 0.7, not to 2.1
    assert split([0.5, 0.3, 0.2], 6) == [3, 2, 1]  # 3, 1.8, 1.2
    assert split([5, 3, 2], 9) == [4, 3, 2]  # 4.5, 2.7, 1.8: two spares, to .8 and .7
    # Ties (equal fractional parts): the earlier source first.
    assert split([1, 1, 1], 4) == [2, 1, 1]
    assert split([1, 1, 1], 5) == [2, 2, 1]
    assert split([1, 1, 1], 2) == [1, 1, 0]
    assert split([1, 2, 2], 4) == [1, 2, 1]  # 0.8, 1.6, 1.6: the largest remainder, then the earlier tie
    assert split([1, 1], 1) == [1, 0]
    # A budget takes its tokens off the top; the weighted rest (7) is split as above, in the sources' order.
    assert split([0.6, 0.3, 0.1], 10, budgets=[3]) == [4, 2, 1, 3]


def test_budgets_and_caps_are_enforced():
    rng = random.Random(3)
    sources = [_corpus(rng, 50, 100), _corpus(rng, 50, 100)]
    available = [sum(len(d[0]) for d in docs) for docs in sources]
    with pytest.raises(ValueError, match="max_repeats"):
        _realize(parse_mixture([{"source": "a", "tokens": available[0] + 1}, {"source": "b", "weight": 1}]),
                 sources)
    with pytest.raises(ValueError, match="its share"):
        _realize(parse_mixture([{"source": "a", "weight": 1}, {"source": "b", "weight": 1}],
                               total_tokens=available[0] * 3), sources)
    # A budget alone (2.10's token_limit as a one-source mixture): exactly that many tokens, to half a document.
    plan, taken = _realize(parse_mixture([{"source": "a", "tokens": available[0] // 3}]), sources[:1])
    assert abs(taken[0] - available[0] // 3) <= max(len(d[0]) for d in sources[0]) / 2
    assert plan.sources[0].copies == 0


def test_identical_documents_share_their_draw():
    key = hash_key(MIXTURE_KEY, 0)
    doc = (np.arange(10, dtype=np.int32),)
    assert document_hash(doc, key) == document_hash((np.arange(10, dtype=np.int64),), key)
    assert document_hash(doc, key) != document_hash(doc, hash_key(MIXTURE_KEY, 1))
    # The split between keys is part of the content.
    assert document_hash((np.arange(4), np.arange(4, 10)), key) != document_hash((np.arange(6), np.arange(6, 10)),
                                                                                   key)
