"""Mixtures by token budget (transforms.core.mixture): settings, targets, and exact, order-free thresholds."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
from collections import Counter

import numpy as np
import pytest

from transforms.core.mixture import (MIXTURE_KEY, Histogram, MixturePlan, MixtureSource, MixtureSpec, SourcePlan,
                                     _default_name, batch_hashes, bucket_of, check_mixture, coarse_plan,
                                     document_hash, mixture_section, parse_mixture, parse_token_count, refine_plan,
                                     select_batch, targets)
from transforms.core.records import GroupId, TokenBatch
from transforms.core.seeds import hash_key
from transforms.core.stats import Stats, merge


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


# --- Exact values at the edges (issue #51: what mutation testing showed no test pinned) ---

def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
    return str(e.value)


def test_token_count_errors_name_the_setting_and_the_value():
    assert _error(parse_token_count, True) == "tokens: True is not a number of tokens"
    assert _error(parse_token_count, "ten") == ("tokens: 'ten' is not a number of tokens "
                                                "(e.g. 2000000, 500M, 1.5B, 2T)")
    assert _error(parse_token_count, "1.0001k", "budget") == "budget: '1.0001k' is not a whole number of tokens"
    assert _error(parse_token_count, 0) == "tokens: 0 must be at least 1 token"


def test_a_token_count_is_whole_to_a_millionth_of_itself():
    # 2.01 * 10**6 is 2009999.9999999998 in floating point: within a millionth of 2010000 (2 tokens), so
    # rounded to it; a tolerance of a millionth of one token would refuse it.
    assert parse_token_count("2.01M") == 2_010_000
    # Below 2 tokens the tolerance is a millionth of one token: 1.0000015 is 1.5e-6 off 1, too far.
    assert _error(parse_token_count, "1.0000015") == "tokens: '1.0000015' is not a whole number of tokens"
    # 0.000001 is exactly 1e-6 off 0, the tolerance itself: whole (0), and refused as no token at all.
    assert _error(parse_token_count, "0.000001") == "tokens: '0.000001' must be at least 1 token"


def test_mixture_errors_name_the_entry_and_what_is_wrong():
    counts = "(e.g. 2000000, 500M, 1.5B, 2T)"
    cases = [
        ([], "mixture: a list of sources, each {source: PATH, weight: W | tokens: N[, max_repeats: R]}"),
        (["/d/web"], "mixture[0]: '/d/web' is not a mapping"),
        ([{"source": "/d/a", "weight": 1}, {"source": "/d/b", "weight": 1, "size": 1, "colour": 2}],
         "mixture[1]: unknown key(s) colour, size (known: max_repeats, name, path, source, tokens, weight)"),
        ([{"source": " ", "weight": 1}], "mixture[0]: needs source: a directory, a glob or a metadata file"),
        ([{"source": "/d/a", "name": "a b", "weight": 1}],
         "mixture[0]: name 'a b': use letters, digits, '.', '_' or '-'"),
        ([{"source": "/x/a", "weight": 1}, {"source": "/y/a", "tokens": 5}],
         "mixture[1]: two sources are named 'a'; give one a name:"),
        ([{"source": "/d/a", "weight": 1, "tokens": 5}],
         "mixture[0] (a): give exactly one of weight (a share of the output's tokens) or tokens (a budget)"),
        ([{"source": "/d/a", "weight": "heavy"}], "mixture[0] (a) weight: 'heavy' is not a number"),
        ([{"source": "/d/a", "weight": 0}], "mixture[0] (a) weight: 0 must be > 0"),
        ([{"source": "/d/a", "tokens": "lots"}], f"mixture[0] (a) tokens: 'lots' is not a number of tokens {counts}"),
        ([{"source": "/d/a", "weight": 1, "max_repeats": "x"}], "mixture[0] (a) max_repeats: 'x' is not a number"),
        ([{"source": "/d/a", "weight": 1, "max_repeats": 0.5}],
         "mixture[0] (a) max_repeats: 0.5 must be at least 1 (1: no repetition)"),
    ]
    for entries, message in cases:
        assert _error(parse_mixture, entries) == message
    assert _error(parse_mixture, [{"source": "/d/a", "weight": 1}], total_tokens="lots") == (
        f"total_tokens: 'lots' is not a number of tokens {counts}")
    assert _error(parse_mixture, [{"source": "/d/a", "tokens": 5}, {"source": "/d/b", "tokens": "1k"}],
                  total_tokens=1006) == ("total_tokens 1006 but every source has a budget, adding up to 1005: "
                                         "give one of them a weight, or leave total_tokens out")


def test_a_mixture_s_sources_as_given():
    spec = parse_mixture([{"path": " /d/web/ ", "weight": 2},  # `path` for `source`; spaces around it ignored
                          {"source": "/d/code/*.jsonl", "name": "Code2", "tokens": "1k"}])
    # The name of the first is its directory's (not that of the blank after the last slash).
    assert spec == MixtureSpec((MixtureSource("web", "/d/web/", 2.0, None, 1.0),
                                MixtureSource("Code2", "/d/code/*.jsonl", None, 1000, 1.0)), None, 0)
    # Budgets alone may come with a total that they add up to; an empty total is no total.
    assert parse_mixture([{"source": "/d/a", "tokens": 5}], total_tokens=5).total_tokens == 5
    assert parse_mixture([{"source": "/d/a", "weight": 1}], total_tokens="").total_tokens is None
    # A mapping: each key names its source; a bare value is its weight, and the source is still missing.
    assert parse_mixture({"main": {"source": "/d/web", "weight": 2}}).sources == (
        MixtureSource("main", "/d/web", 2.0, None, 1.0),)
    assert _error(parse_mixture, {"web": 3}) == "mixture[0]: needs source: a directory, a glob or a metadata file"


@pytest.mark.parametrize("path, name", [
    ("/d/web/", "web"), ("C:\\data\\web\\", "web"), ("/d/code/*.jsonl", "code"),  # the last part without a glob
    ("/d/lists/web.jsonl", "web"), ("/d/files.txt", "files"),  # a listing's extension dropped
    ("/d/BOX/", "BOX"), ("/d/XML", "XML"),  # capitals kept
    ("/d/my data", "my_data"), ("/d/.cache", "cache"),  # other characters made "_"; no leading "._-"
    ("/d/___", "source"), ("*.jsonl", "source"), ("/", "source"),  # nothing left: "source"
    # A trailing space is a character like any other (parse_mixture strips those around the path first), not a
    # separator to strip: the name keeps it, as "_".
    ("/d/web ", "web_"),
])
def test_a_source_s_default_name(path, name):
    assert _default_name(path) == name


def test_a_document_s_hash_is_blake2b_of_its_lengths_and_little_endian_ids():
    """The draw's format, written out: changing it changes which documents every mixture takes."""
    key = hashlib.sha256(b"mixture:0").digest()
    assert hash_key(MIXTURE_KEY, 0) == key
    # Per key: its id count as 8 little-endian bytes, then its ids as little-endian int32. The hash: the 8-byte
    # keyed BLAKE2b digest, read big-endian.
    data = ((2).to_bytes(8, "little") + b"\x07\x00\x00\x00\xff\xff\xff\xff"  # [7, -1]
            + (1).to_bytes(8, "little") + b"\x00\x01\x00\x00")  # [256]
    want = int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "big")
    doc = (np.array([7, -1], np.int32), np.array([256], np.int32))
    assert document_hash(doc, key) == want
    hashes, counts = batch_hashes([doc, doc], 0)
    assert hashes.tolist() == [want, want] and counts.tolist() == [3, 3]
    # A batch that counts its own tokens (a DPO pair, its prompt twice) keeps its counts.
    assert batch_hashes([doc], 0, counts=np.array([5]))[1].tolist() == [5]


def test_without_a_total_a_fractional_max_repeats_allows_its_whole_tokens():
    """max_repeats 1.5 of a's 3 tokens allows 4 whole tokens, not 4.5: at weights 1:1 the total is 8, split
    4 + 4. Capped at 4.5, the total was 9, split 4.5 + 4.5 with the spare token to a (5 > 4.5), and the largest
    mixture that fits was refused as not fitting (issue #51)."""
    spec = parse_mixture([{"source": "/d/a", "weight": 1, "max_repeats": 1.5}, {"source": "/d/b", "weight": 1}])
    assert targets(spec, [3, 100]) == ([4, 4], 8, "a")
    # A cap that is whole already (max_repeats 2 of 3 tokens: 6) is as it was: 12, split 6 + 6.
    spec = parse_mixture([{"source": "/d/a", "weight": 1, "max_repeats": 2}, {"source": "/d/b", "weight": 1}])
    assert targets(spec, [3, 100]) == ([6, 6], 12, "a")


def test_targets_at_their_limits():
    def spec(*entries, total=None):
        return parse_mixture(list(entries), total_tokens=total)

    # A budget of exactly max_repeats times a source's tokens fits.
    assert targets(spec({"source": "/d/a", "tokens": 100}), [100]) == ([100], 100, None)
    # Budgets alone, without a total: the total is their sum.
    assert targets(spec({"source": "/d/a", "tokens": 10}, {"source": "/d/b", "tokens": 20}), [100, 100]) == (
        [10, 20], 30, None)
    # Without a total, weights 1:3: a's 300 tokens allow 300 * 4 / 1 = 1200 weighted tokens, b's 50 allow
    # 50 * 4 / 3 = 66.7, so 66: b sets the total. 66 split 1:3 is 16.5 + 49.5, the spare token to the tie's
    # first (a); the budget c adds its 10.
    assert targets(spec({"source": "/d/a", "weight": 1}, {"source": "/d/b", "weight": 3},
                        {"source": "/d/c", "tokens": 10}), [300, 50, 100]) == ([17, 49, 10], 76, "b")
    assert _error(targets, spec({"source": "/d/a", "weight": 1}), [0]) == "mixture source a: no tokens found in /d/a"
    assert _error(targets, spec({"source": "/d/a", "tokens": 16, "max_repeats": 1.5}), [10]) == (
        "mixture source a: a budget of 16 tokens, but it has 10 (max_repeats 1.5 allows 15)")
    # Budgets that take all of the total, with a weighted source: nothing left for it.
    assert _error(targets, spec({"source": "/d/a", "tokens": 10}, {"source": "/d/b", "weight": 1}, total=10),
                  [100, 100]) == "total_tokens 10 leaves nothing for the weighted sources after the budgets (10 tokens)"


_B = 1 << 48  # the width of one hash bucket (BUCKET_BITS = 16)
# Five documents in buckets 0, 1, 1, 1 and 65535 (the last); the two of hash _B + 2 are one document given twice.
_HASHES = np.array([5, _B + 1, _B + 2, _B + 2, 0xFFFF * _B + 7], np.uint64)
_COUNTS = np.array([10, 20, 30, 30, 40], np.int64)  # 130 tokens


def test_a_plan_by_hand_from_the_first_bucket_to_the_last():
    spec = parse_mixture([{"source": "/d/a", "tokens": 5}, {"source": "/d/b", "tokens": 45},
                          {"source": "/d/c", "tokens": 130}, {"source": "/d/d", "tokens": 125}])
    hist = Histogram.empty(4)
    assert hist.docs.shape == hist.tokens.shape == (4, 65536)
    for k in range(4):
        hist.add(Histogram.of(4, k, _HASHES, _COUNTS))
    coarse = coarse_plan(spec, hist)
    assert coarse == MixturePlan((
        SourcePlan("a", 5, 130, 5, 0, 5, 0, 0),  # bucket 0's 10 tokens reach 5, nothing below them
        SourcePlan("b", 5, 130, 45, 0, 45, 1, 10),  # bucket 1's 80 reach 45, above bucket 0's 10
        SourcePlan("c", 5, 130, 130, 1, 0, -1, 0),  # one whole copy: no remainder, no boundary bucket
        SourcePlan("d", 5, 130, 125, 0, 125, 0xFFFF, 90)), 305, None)  # the last bucket, above 90
    boundary = [(k, int(h), int(n)) for k in range(4) for h, n in zip(_HASHES, _COUNTS)
                if int(h) >> 48 == coarse.sources[k].bucket]
    plan = refine_plan(coarse, boundary)
    # a needs 5 of bucket 0's document of 10: 5 over or 5 short, a tie, so it is taken: the threshold is the
    # bucket's end. b needs 35 of bucket 1: its document of 20, then 60 tokens for the one given twice, 45 over
    # where stopping is 15 short: the threshold is that hash. c: 0, every document once. d needs 35 of the last
    # bucket's 40: 5 over beats 35 short, so all of it: the threshold is the end of the hash space, 2**64.
    assert [s.threshold for s in plan.sources] == [_B, _B + 2, 0, 1 << 64]
    assert [plan.times(k, _HASHES).tolist() for k in range(4)] == [
        [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    # Copies are counts, int64 whichever way they are found (a threshold, or all of the hash space), so that
    # times * counts are exact token counts.
    assert [plan.times(k, _HASHES).dtype for k in range(4)] == [np.dtype(np.int64)] * 4
    # No boundary document given for a source: its whole boundary bucket is taken.
    assert [s.threshold for s in refine_plan(coarse, []).sources] == [_B, 2 * _B, 0, 1 << 64]
    # The plan as stored between the passes (with the 2**64 threshold) reads back the same.
    limited = dataclasses.replace(plan, limited_by="d")
    assert MixturePlan.from_json(limited.to_json()) == limited


def _plan(*sources, limited_by=None) -> MixturePlan:
    """A plan of 4-document, 24-token sources, each (name, target, copies, threshold)."""
    return MixturePlan(tuple(SourcePlan(name, 4, 24, target, copies, 0, -1, 0, threshold)
                             for name, target, copies, threshold in sources),
                       sum(target for _, target, _, _ in sources), limited_by)


def test_a_histogram_counts_in_exact_integers():
    # int64, not float64: a bucket's tokens past 2**53 are still exact (2**53 + 1 is no float).
    hist = Histogram.of(2, 1, np.array([0, 1], np.uint64), np.array([2**53, 1], np.int64))
    assert hist.docs.dtype == hist.tokens.dtype == np.dtype(np.int64)
    assert (int(hist.docs[1, 0]), int(hist.tokens[1, 0])) == (2, 2**53 + 1)
    assert int(hist.docs.sum()) == 2 and int(hist.tokens.sum()) == 2**53 + 1  # nothing for source 0


def test_a_plan_is_stored_as_json_with_its_keys_sorted():
    """The plan a resumable job keeps (transforms.io.intermediate): this text, field for field."""
    plan = MixturePlan((SourcePlan("a", 2, 30, 45, 1, 15, 3, 10, 7),), 45, "a")
    assert plan.to_json() == (
        '{"limited_by": "a", "sources": [{"bucket": 3, "copies": 1, "docs_available": 2, "name": "a", '
        '"remainder": 15, "target_tokens": 45, "threshold": 7, "tokens_available": 30, "tokens_below": 10}], '
        '"total_tokens": 45}')
    assert MixturePlan.from_json(plan.to_json()) == plan


def test_groups_a_source_becomes():
    # One per whole copy, one more when a threshold takes some documents once more; at least one (the group
    # itself, empty or not).
    plan = _plan(("none", 0, 0, 0), ("part", 1, 0, 5), ("once", 1, 1, 0), ("more", 1, 1, 5), ("twice", 1, 2, 0))
    assert [plan.groups_of(k) for k in range(5)] == [1, 1, 1, 2, 2]


_HALF = 1 << 63
_SELECT = _plan(("a", 10, 0, _HALF), ("b", 30, 1, _HALF), ("c", 0, 0, 0), limited_by="b")
_SECTION = {  # what select_batch's counts make of _SELECT's summary, by hand (below)
    "total_tokens_target": 40, "limited_by": "b", "tokens_taken": 40, "sources": {
        "a": {"documents_available": 4, "tokens_available": 24, "target_tokens": 10, "target_share": 0.25,
              "whole_copies": 0, "threshold": _HALF, "documents_taken": 2, "tokens_taken": 8, "repeats": 0,
              "realized_share": 0.2},
        "b": {"documents_available": 4, "tokens_available": 24, "target_tokens": 30, "target_share": 0.75,
              "whole_copies": 1, "threshold": _HALF, "documents_taken": 4, "tokens_taken": 32, "repeats": 2,
              "realized_share": 0.8},
        "c": {"documents_available": 4, "tokens_available": 24, "target_tokens": 0, "target_share": 0.0,
              "whole_copies": 0, "threshold": 0, "documents_taken": 0, "tokens_taken": 0, "repeats": 0,
              "realized_share": 0.0}}}
_INPUT = {"good": 12, "repeats": 2, "dropped": 6, "dropped_by_reason": {"not_in_mixture": 6}}


def test_the_selection_of_each_source_its_copies_and_counts():
    """Documents of 3, 5, 7 and 9 tokens, hashed on either side of the threshold 2**63: a takes the first two
    once (no whole copy), b all once and the first two twice (a whole copy), c none (threshold 0)."""
    hashes = np.array([1, _HALF - 1, _HALF, 2**64 - 1], np.uint64)
    counts = np.array([3, 5, 7, 9], np.int64)
    group = GroupId(1, 0, "/in/f.jsonl", "f.jsonl")
    where = "/in/f.jsonl"
    out = {}
    for k, name in enumerate("abc"):
        stats = Stats()
        stats.add("docs", 4, where)
        batch = TokenBatch(group, [(np.arange(n, dtype=np.int32),) for n in counts.tolist()], stats)
        out[name] = select_batch(batch, _SELECT, k, 3, hashes, counts)
    got = {name: [(b.group, [len(d[0]) for d in b.tokens], b.stats.totals, b.stats.sources) for b in batches]
           for name, batches in out.items()}
    m = "mixture."
    assert got["a"] == [(group, [3, 5], Counter({
        "docs": 4, f"{m}docs_available.a": 4, f"{m}tokens_available.a": 24, f"{m}docs_taken.a": 2,
        f"{m}tokens_taken.a": 8, f"{m}copies.a": 2, "dropped.not_in_mixture": 2}),
        {where: Counter({"docs": 4, "dropped.not_in_mixture": 2})})]
    # b: 2 * (3 + 5) + 7 + 9 = 32 tokens in 6 copies; its second copy is a group of its own, its file index
    # past the 3 files' (1 + 1 * 3), counting its documents as repeats.
    assert got["b"] == [
        (group, [3, 5, 7, 9], Counter({
            "docs": 4, f"{m}docs_available.b": 4, f"{m}tokens_available.b": 24, f"{m}docs_taken.b": 4,
            f"{m}tokens_taken.b": 32, f"{m}copies.b": 6}), {where: Counter({"docs": 4})}),
        (GroupId(4, 0, "/in/f.jsonl", "f.jsonl", copy=1), [3, 5], Counter({"docs_repeated": 2}),
         {where: Counter({"docs_repeated": 2})})]
    # c takes nothing, and is still one (empty) group: a resume finds it stored.
    assert got["c"] == [(group, [], Counter({
        "docs": 4, f"{m}docs_available.c": 4, f"{m}tokens_available.c": 24, "dropped.not_in_mixture": 4}),
        {where: Counter({"docs": 4, "dropped.not_in_mixture": 4})})]
    stats = merge(b.stats for batches in out.values() for b in batches)
    assert mixture_section(_SELECT.summary(), stats) == _SECTION
    assert check_mixture(_SECTION, _INPUT) == []


def test_the_plan_s_summary_names_what_limited_it_only_when_something_did():
    assert "limited_by" not in _plan(("a", 10, 0, _HALF)).summary()
    assert _plan(("a", 10, 0, _HALF), limited_by="a").summary()["limited_by"] == "a"


def test_a_section_whose_selection_did_not_see_what_the_plan_counted_is_refused():
    summary = _SELECT.summary()
    stats = Stats()
    for name, docs, tokens in (("a", 4, 24), ("b", 4, 24)):
        stats.add(f"mixture.docs_available.{name}", docs)
        stats.add(f"mixture.tokens_available.{name}", tokens)
    with pytest.raises(RuntimeError) as e:
        mixture_section(summary, stats)
    assert str(e.value) == ("mixture source c: the plan counted 4 documents and 24 tokens, the selection saw "
                            "0 and 0")
    stats = Stats()
    stats.add("mixture.docs_available.a", 3)
    stats.add("mixture.tokens_available.a", 20)
    with pytest.raises(RuntimeError) as e:
        mixture_section(summary, stats)
    assert str(e.value) == ("mixture source a: the plan counted 4 documents and 24 tokens, the selection saw "
                            "3 and 20")


def _changed(**sources) -> dict:
    section = copy.deepcopy(_SECTION)
    for name, fields in sources.items():
        section["sources"][name].update(fields)
    return section


def test_check_mixture_on_good_sections():
    assert check_mixture(_SECTION, _INPUT) == []
    # A text mode: documents its rows dropped for other reasons were available to the mixture all the same.
    assert check_mixture(_SECTION, {**_INPUT, "dropped": 9, "dropped_by_reason": {"not_in_mixture": 6,
                                                                                    "too_short": 3}}) == []
    # A chat mode: the 3 records dropped while encoding were never available.
    assert check_mixture(_SECTION, {**_INPUT, "good": 15, "dropped": 9, "dropped_by_reason": {
        "not_in_mixture": 6, "too_long": 3}}, encoded=True) == []
    # A realized share off by exactly the tolerance (1e-9) passes.
    assert check_mixture(_changed(c={"realized_share": 1e-9}), _INPUT) == []
    # One source taken whole, once: nothing dropped, no repeats (counters that are 0 are left out).
    whole = {"tokens_taken": 24, "sources": {"s": {"documents_available": 4, "target_share": 1.0, "documents_taken": 4,
                                                   "tokens_taken": 24, "repeats": 0, "realized_share": 1.0}}}
    assert check_mixture(whole, {"good": 4}) == []
    assert check_mixture(whole, {"good": 4}, encoded=True) == []
    # Nothing taken at all: every share 0.
    none = {"tokens_taken": 0, "sources": {"s": {"documents_available": 4, "target_share": 1.0, "documents_taken": 0,
                                                 "tokens_taken": 0, "repeats": 0, "realized_share": 0.0}}}
    assert check_mixture(none, {"good": 4, "dropped": 4, "dropped_by_reason": {"not_in_mixture": 4}}) == []


def test_check_mixture_names_each_problem():
    for section in ({}, {"sources": {}}, {"sources": ["a"]}):
        assert check_mixture(section, _INPUT) == ["mixture.sources is missing"]
    assert check_mixture({**_SECTION, "tokens_taken": 41}, _INPUT) == [
        "mixture.tokens_taken is 41, its sources add up to 40"]
    assert check_mixture(_changed(b={"target_share": 0.25}), _INPUT) == [
        "mixture: the target shares add up to 0.5, not 1"]
    # 5 documents taken of 4 (and so 3 left, not 6).
    assert check_mixture(_changed(a={"documents_taken": 5}), _INPUT) == [
        "mixture.a: 5 documents taken of 4",
        "input.dropped_by_reason.not_in_mixture is 6, the mixture left 3 documents"]
    assert check_mixture(_changed(a={"repeats": -1}), _INPUT) == [
        "mixture.a: -1 repeats of 2 documents", "input.repeats is 2, the mixture's sources make 1"]
    assert check_mixture(_changed(c={"repeats": 3}), _INPUT) == [
        "mixture.c: 3 repeats of 0 documents", "input.repeats is 2, the mixture's sources make 5"]
    assert check_mixture(_changed(a={"realized_share": 0.3}), _INPUT) == [
        "mixture.a.realized_share is 0.3, its tokens make 0.2"]
    # One token taken from no document (the shares made consistent with it: 8, 32 and 1 of 41).
    section = _changed(a={"realized_share": 8 / 41}, b={"realized_share": 32 / 41},
                       c={"tokens_taken": 1, "realized_share": 1 / 41})
    assert check_mixture({**section, "tokens_taken": 41}, _INPUT) == ["mixture.c: 1 tokens taken from no document"]
    # The input's accounting against the mixture's, with the records a chat mode dropped while encoding.
    assert check_mixture(_SECTION, {"good": 11, "dropped": 5, "dropped_by_reason": {"not_in_mixture": 5}}) == [
        "input.good is 11, the mixture's sources make 12", "input.repeats is 0, the mixture's sources make 2",
        "input.dropped_by_reason.not_in_mixture is 5, the mixture left 6 documents"]
    assert check_mixture(_SECTION, {**_INPUT, "good": 14, "dropped": 9}, encoded=True) == [
        "input.good is 14, the mixture's sources make 15 (with the 3 records dropped before the draw)"]
    # A text mode's duplicates are removed before the draw, and so never available either.
    duplicates = {**_INPUT, "good": 16, "dropped": 10,
                  "dropped_by_reason": {**_INPUT["dropped_by_reason"], "duplicate_exact": 3, "duplicate_near": 1}}
    assert check_mixture(_SECTION, duplicates) == []
    assert check_mixture(_SECTION, {**duplicates, "good": 15}) == [
        "input.good is 15, the mixture's sources make 16 (with the 4 records dropped before the draw)"]
    assert check_mixture({"sources": {"a": {}}}, _INPUT) == ["mixture section is malformed (KeyError('tokens_taken'))"]
