"""Splits without Beam: the settings' forms, the draw, and how a packing group is cut among the outputs."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.normalize import NormalizeConfig, normalize_batch, normalize_text
from transforms.core.records import DocBatch, Document, GroupId
from transforms.core.splits import (Output, fraction_bound, make_split_plan, parse_context_splits,
                                    parse_data_splits, parse_msl, route_batch, subset_of)
from transforms.core.stats import Stats, merge


# ---------------------------------------------------------------- settings


def test_data_splits_in_every_form_give_the_same_splits():
    text = parse_data_splits("train=0.98, validation=0.01,test=1/100")
    assert text == (("train", 0.98, None), ("validation", 0.01, None), ("test", 0.01, None))
    assert parse_data_splits({"train": 0.98, "validation": "1/100", "test": 0.01}) == text
    cerebras = {"train": {"split_fraction": 0.98}, "validation": {"split_fraction": 0.01},
                "test": {"split_fraction": 0.01}}
    assert parse_data_splits(cerebras) == text


def test_per_split_context_splits_are_read_and_normalized():
    splits = parse_data_splits({"train": {"split_fraction": 0.9, "context_splits": {
        "MSL_List": ["2K", "0.5K"], "split_fractions": [3, 1]}}, "test": {"split_fraction": 0.1}})
    assert splits == (("train", 0.9, ((2048, 0.75), (512, 0.25))), ("test", 0.1, None))


@pytest.mark.parametrize("value, message", [
    ("train=0.9,test=0.2", "add up to 1.1, not 1"),
    ("train=0.5,train=0.5", "'train' is given twice"),
    ("train=0.5,test", "'test' is not name=fraction"),
    ("train=1.1,test=-0.1", "must be a fraction > 0"),
    ("tr/ain=1", "cannot be a directory"),
    ("dead_letter=1", "cannot be a directory"),
    ("msl_2048=1", "cannot be a directory"),
    ("train=x", "is not a fraction"),
    ("train=1/0", "is not a fraction"),
    ({"train": {"fraction": 1}}, "expected split_fraction"),
    ("", "no entries"),
])
def test_bad_data_splits_are_refused_naming_the_problem(value, message):
    with pytest.raises(ValueError, match=message):
        parse_data_splits(value)


@pytest.mark.parametrize("parse, value, message", [
    (parse_data_splits, "train=0.9,test=0.2", "data_splits: the fractions add up to 1.1, not 1"),
    (parse_data_splits, "train=0.5,train=0.5", "data_splits: split 'train' is given twice"),
    (parse_data_splits, "x", "data_splits: 'x' is not name=fraction"),
    (parse_data_splits, {"a": {"fraction": 1}}, "data_splits.a: expected split_fraction (and optionally "
                                                "context_splits)"),
    (parse_data_splits, 3, "data_splits: expected train=0.98,validation=0.01,test=0.01 or a mapping"),
    (parse_data_splits, {}, "data_splits: no splits"),
    (parse_data_splits, "a=-1,b=2", "data_splits.a: '-1' must be a fraction > 0"),
    (parse_data_splits, "a=nan", "data_splits.a: 'nan' is not a fraction (a number, or a/b)"),
    (parse_data_splits, {"a": float("inf")}, "data_splits.a: inf must be a fraction > 0"),
    (parse_data_splits, {"a": True}, "data_splits.a: True is not a fraction (a number, or a/b)"),
    (parse_context_splits, "1K=0", "context_splits 1K: '0' must be a fraction > 0 (leave out an output that should get nothing)"),
    (parse_data_splits, "train=1,validation=0", "data_splits.validation: '0' must be a fraction > 0 (leave out an output that should get nothing)"),
    (parse_context_splits, "1K=1,2K=0", "context_splits 2K: '0' must be a fraction > 0 (leave out an output that should get nothing)"),
    (parse_context_splits, "1K=1,1024=1", "context_splits: a sequence length is given twice: [1024, 1024]"),
    (parse_context_splits, {"MSL_List": [1024]}, "context_splits: MSL_List and split_fractions must be lists of "
                                                 "the same length"),
    (parse_context_splits, {"MSL": [1]}, "context_splits: unknown key(s) MSL (expected MSL_List and "
                                         "split_fractions)"),
    (parse_context_splits, 5, "context_splits: expected 2K=0.5,4K=0.5 or a mapping with MSL_List and "
                              "split_fractions"),
    (parse_context_splits, {"MSL_List": [], "split_fractions": []}, "context_splits: no sequence lengths"),
    (parse_context_splits, "1K=x", "context_splits 1K: 'x' is not a fraction (a number, or a/b)"),
    (parse_context_splits, "zz=1", "context_splits: 'zz' is not a sequence length (e.g. 2048 or 2K)"),
    (parse_context_splits, "1=1", "context_splits: '1' is not a sequence length of at least 2 whole tokens"),
    # A split name that cannot be a directory: the message lists every reserved name.
    (parse_data_splits, "dead_letter=1", "data_splits: split name 'dead_letter' cannot be a directory of the "
                                         "output: use letters, digits, '.', '_' or '-', not starting with msl_ and "
                                         "none of dead_letter, .tmp, data_params.json"),
    # The name ends at the first '=': the rest is the fraction, whatever it holds.
    (parse_data_splits, "a=1=1", "data_splits.a: '1=1' is not a fraction (a number, or a/b)"),
    (parse_context_splits, "1K=1=1", "context_splits 1K: '1=1' is not a fraction (a number, or a/b)"),
    (parse_context_splits, "2K", "context_splits: '2K' is not name=fraction"),
    (parse_context_splits, {"MSL": [1], "x": 2}, "context_splits: unknown key(s) MSL, x (expected MSL_List and "
                                                 "split_fractions)"),
    # A split's body may hold split_fraction and context_splits, nothing else.
    (parse_data_splits, {"a": {"split_fraction": 1, "extra": 2}}, "data_splits.a: expected split_fraction (and "
                                                                  "optionally context_splits)"),
    # A split's own context splits are named by their place in the setting.
    (parse_data_splits, {"a": {"split_fraction": 1, "context_splits": "1K=0"}},
     "data_splits.a.context_splits 1K: '0' must be a fraction > 0 (leave out an output that should get nothing)"),
    (parse_data_splits, "train=0.99999", "data_splits: the fractions add up to 0.99999, not 1"),
])
def test_messages_name_the_setting_and_the_problem(parse, value, message):
    with pytest.raises(ValueError) as err:
        parse(value)
    assert str(err.value) == message


def test_empty_entries_are_skipped_and_rounded_fractions_accepted():
    # A doubled, leading or trailing comma leaves an empty entry, which is no split.
    assert parse_data_splits(",train=0.5,,test=0.5,") == parse_data_splits("train=0.5,test=0.5")
    assert parse_context_splits("1K=1,,2K=1") == parse_context_splits("1K=1,2K=1")
    # Fractions written to 7 decimals (thirds) add up to 1 within 1e-6, which is enough.
    thirds = parse_data_splits("a=0.3333333,b=0.3333333,c=0.3333333")
    assert [name for name, _, _ in thirds] == ["a", "b", "c"]


def test_context_splits_take_k_suffixes_and_are_normalized():
    assert parse_context_splits("1K=1,2k=1,4096=2") == ((1024, 0.25), (2048, 0.25), (4096, 0.5))
    assert parse_msl("0.5K") == 512 and parse_msl(" 8k ") == 8192 and parse_msl("300") == 300
    for bad in ("0.3K", "1", "x", "2.5", True):
        with pytest.raises(ValueError):
            parse_msl(bad)
    for bad, message in (("1K=0", "must be a fraction > 0"), ("1K=1,1024=1", "given twice"),
                         ({"MSL_List": [1024]}, "same length"), ({"MSL": [1]}, "unknown key")):
        with pytest.raises(ValueError, match=message):
            parse_context_splits(bad)


def test_outputs_leave_out_the_levels_not_used():
    def paths(**kw):
        return [o.path for o in make_split_plan(max_seq_length=128, **kw).outputs]

    assert paths(data_splits=parse_data_splits("a=0.5,b=0.5")) == ["a", "b"]
    assert paths(context_splits=parse_context_splits("1K=1,2K=1")) == ["msl_1024", "msl_2048"]
    assert paths(subsets=("x", "y")) == ["x", "y"]
    assert paths(subsets=("x", "y"), data_splits=parse_data_splits("a=0.5,b=0.5"),
                 context_splits=parse_context_splits("1K=1")) == ["x/a/msl_1024", "x/b/msl_1024",
                                                                  "y/a/msl_1024", "y/b/msl_1024"]
    mixed = make_split_plan(max_seq_length=128, data_splits=parse_data_splits(
        {"a": {"split_fraction": 0.5, "context_splits": {"MSL_List": [64, 256], "split_fractions": [1, 1]}},
         "b": 0.5})).outputs
    assert [(o.path, o.max_seq_length, o.fraction) for o in mixed] == [
        ("a/msl_64", 64, 0.25), ("a/msl_256", 256, 0.25), ("b", 128, 0.5)]
    with pytest.raises(ValueError) as err:
        make_split_plan(max_seq_length=128, context_splits=parse_context_splits("1K=1"), data_splits=(
            ("a", 1.0, ((512, 1.0),)),))
    assert str(err.value) == "context_splits: given both for the whole job and inside data_splits; choose one"


def test_subset_of_a_path_is_its_top_level_directory():
    assert subset_of("wiki/en/part-0.jsonl") == "wiki" and subset_of("top.jsonl") is None


# ---------------------------------------------------------------- the draw


PLAN = make_split_plan(data_splits=parse_data_splits("train=0.98,validation=0.01,test=0.01"), max_seq_length=64)


def test_the_draw_depends_on_the_values_and_the_seed_only():
    values = ("a document", "")
    k = PLAN.route(0, values)
    assert all(PLAN.route(0, values) == k for _ in range(3))
    again = make_split_plan(data_splits=parse_data_splits("train=0.98,validation=0.01,test=0.01"),
                            max_seq_length=64)
    assert again.route(0, values) == k
    # Other seeds draw independently: over many documents, they disagree about as often as chance says.
    other = make_split_plan(data_splits=parse_data_splits("train=0.5,test=0.5"), max_seq_length=64, seed=1)
    same = make_split_plan(data_splits=parse_data_splits("train=0.5,test=0.5"), max_seq_length=64, seed=0)
    docs = [(f"doc {i}",) for i in range(4000)]
    agree = sum(other.route(0, d) == same.route(0, d) for d in docs) / len(docs)
    assert abs(agree - 0.5) < fraction_bound(len(docs), 0.5)


def test_the_draw_is_pinned():
    """A stability vector: the same documents go to the same split in every version (a change of the hash,
    its key or the thresholds moves documents between train and validation of a dataset already in use)."""
    assert PLAN.draw(("a document",)) == 3414465527635353982
    assert PLAN.draw(("",)) == 1611551738705390284
    assert PLAN.draw(("ab", "c")) == 4663304784036923080
    assert PLAN.draw(()) == 4178976939398046081
    plan = make_split_plan(data_splits=parse_data_splits("a=0.5,b=0.25,c=0.25"), max_seq_length=64, seed=11)
    assert plan._thresholds == ((1 << 63, 3 << 62),)
    assert [plan.route(0, (f"doc {i}",)) for i in range(24)] == [
        2, 2, 1, 0, 0, 0, 2, 2, 1, 2, 0, 2, 0, 2, 0, 1, 0, 0, 2, 0, 0, 0, 0, 1]
    assert make_split_plan(max_seq_length=8).seed == 0 and PLAN.seed == 0
    assert make_split_plan(max_seq_length=8).outputs == (Output(None, None, 8, 1.0, False),)
    assert fraction_bound(10_000, 0.01) == fraction_bound(10_000, 0.01, 1e-6)


def test_a_value_with_a_lone_surrogate_is_drawn():
    """The draw is defined for every str, a lone surrogate too (the readers dead-letter such records, but the draw
    does not rely on it): hashed as its surrogatepass bytes, not refused, and two such values are two records."""
    assert PLAN.draw(("\ud800",)) == PLAN.draw(("\ud800",)) != PLAN.draw(("\ud801",))
    assert PLAN.draw(("\ud800",)) == 5302728204850966571
    assert PLAN.route(0, ("x\udfff",)) in (0, 1, 2)


def test_values_cannot_run_into_each_other():
    # ("ab", "c") and ("a", "bc") are different records: their draws are independent.
    assert PLAN.draw(("ab", "c")) != PLAN.draw(("a", "bc"))
    assert PLAN.draw(("ab",)) != PLAN.draw(("ab", ""))


@pytest.mark.parametrize("fractions", ["train=0.98,validation=0.01,test=0.01", "a=0.5,b=0.3,c=0.2", "a=1"])
def test_obtained_fractions_stay_within_the_bound(fractions):
    """Each output's share of 20,000 random documents lies within Bernstein's bound at a false-alarm rate of
    1e-6 per output: this test fails by chance less than once in 300,000 runs (3 outputs, 1e-6 each)."""
    plan = make_split_plan(data_splits=parse_data_splits(fractions), max_seq_length=64)
    rng = random.Random(5)
    n = 20_000
    counts = Counter(plan.route(0, ("".join(rng.choices("abcdefgh ", k=30)),)) for _ in range(n))
    for k, out in enumerate(plan.outputs):
        assert abs(counts[k] / n - out.fraction) <= fraction_bound(n, out.fraction, 1e-6), (out, counts)


def test_the_bound_is_bernsteins():
    # Solving 2 exp(-n t^2 / (2 p q + 2 t / 3)) = alpha for t gives back alpha.
    import math

    # One draw at a false-alarm rate of 0.9: a bound below 1 (0.95), still Bernstein's.
    for n, p, alpha in ((100, 0.5, 0.01), (10_000, 0.01, 1e-6), (50, 0.0, 0.1), (1, 0.5, 0.9)):
        t = fraction_bound(n, p, alpha)
        assert math.isclose(2 * math.exp(-n * t * t / (2 * p * (1 - p) + 2 * t / 3)), alpha, rel_tol=1e-9)
    assert fraction_bound(0, 0.5) == 1.0


def test_subsets_route_only_among_their_own_outputs():
    plan = make_split_plan(subsets=("x", "y"), data_splits=parse_data_splits("a=0.5,b=0.5"), max_seq_length=64)
    assert list(plan.outputs_of(plan.subset_index("y/f.jsonl"))) == [2, 3]
    assert {plan.route(1, (f"{i}",)) for i in range(200)} == {2, 3}
    assert plan.parts_of("x/f.jsonl") == [0, 1, 4] and plan.rest_part == 4


# ---------------------------------------------------------------- cutting a group


def _batch(texts, reads_bad: int = 0, progress: int = 1000) -> DocBatch:
    group = GroupId(2, 1, "/in/sub/f.jsonl", "sub/f.jsonl")
    stats = Stats()
    for _ in texts:
        stats.add("docs_read", 1, group.source)
        stats.add("docs_good", 1, group.source)
    for _ in range(reads_bad):
        stats.add("docs_read", 1, group.source)
        stats.add("bad.json_decode", 1, group.source)
    stats.add("time_ms.read", 7)
    return DocBatch(group, [Document(i, (t,)) for i, t in enumerate(texts)], stats, progress)


texts = st.lists(st.text(alphabet=st.sampled_from("ab \u00e9\u0301x\ufb01"), max_size=12), max_size=30)


@settings(max_examples=60, deadline=None)
@given(texts, st.integers(0, 3), st.integers(0, 10_000), st.booleans())
def test_a_groups_counts_are_shared_exactly_among_its_outputs(texts, bad, progress, ftfy):
    config = NormalizeConfig(use_ftfy=ftfy)
    batch = _batch(texts, bad, progress)
    whole = normalize_batch(_batch(texts, bad, progress), config)
    parts, rest = route_batch(batch, PLAN, config)
    assert [p.group.part for p in parts] == [0, 1, 2]
    assert all(p.group.name == f"sub/f.jsonl#1@{p.group.part}" for p in parts)
    # Every document is in exactly one part, normalized as the unsplit job normalizes it, in input order.
    assert sorted((d.index, d.values) for p in parts for d in p.docs) == [(d.index, d.values) for d in whole.docs]
    for p in parts:
        assert [d.index for d in p.docs] == sorted(d.index for d in p.docs)
        assert all(PLAN.route(0, d.values) == p.group.part for d in p.docs)
        assert p.stats["docs_read"] == p.stats["docs_good"] == len(p.docs) and not p.stats.with_prefix("bad.")
    # The parts and the rest add up to what the unsplit job counts.
    total = merge([rest, *(p.stats for p in parts)])
    assert +total.totals == +whole.stats.totals
    assert {s: +c for s, c in total.sources.items()} == {s: +c for s, c in whole.stats.sources.items()}
    assert rest["docs_read"] == bad and rest["bad.json_decode"] == bad and rest["time_ms.read"] == 7
    assert sum(p.progress_bytes for p in parts) == progress


def test_without_normalizing_only_the_documents_move():
    batch = _batch(["one", "two", "three"], 1)
    parts, rest = route_batch(batch, PLAN, None)
    assert sum(p.stats["docs_read"] for p in parts) == 3 and rest["docs_read"] == 1
    assert not any(p.stats["raw_chars"] for p in parts)
    assert "/in/sub/f.jsonl" in rest.sources


def test_an_empty_group_still_reaches_every_output_and_keeps_its_file_listed():
    parts, rest = route_batch(_batch([], progress=9), PLAN, NormalizeConfig())
    assert [len(p.docs) for p in parts] == [0, 0, 0] and sum(p.progress_bytes for p in parts) == 9
    assert rest.sources == {"/in/sub/f.jsonl": Counter()}


TWO = make_split_plan(subsets=("other", "sub"), data_splits=parse_data_splits("a=0.5,b=0.5"), max_seq_length=64)


def _docs(plan, subset, n, want=None):
    """n texts of various lengths (those the plan routes to output `want` only, if given)."""
    out, i = [], 0
    while len(out) < n:
        text = f"document {i} " + "x" * (i % 13)
        if want is None or plan.route(subset, (text,)) == want:
            out.append(text)
        i += 1
    return out


def test_a_group_goes_only_to_its_subsets_outputs():
    # The batch's file is sub/f.jsonl: subset 1 of ("other", "sub"), whose outputs are 2 and 3.
    texts = _docs(TWO, 1, 40)
    parts, rest = route_batch(_batch(texts), TWO, None)
    assert [p.group.part for p in parts] == [2, 3]
    assert {d.values[0] for p in parts for d in p.docs} == set(texts)
    for p in parts:
        assert p.docs and all(TWO.route(1, d.values) == p.group.part for d in p.docs)
        assert p.stats["docs_read"] == len(p.docs)


def test_a_groups_progress_is_shared_by_characters():
    """Each part's share of the group's progress is its documents' characters' share, to within one unit, and the
    shares add up to the group's; a part without characters gets none."""
    progress = 10_000
    lone = _docs(TWO, 1, 5, want=2)
    parts, _ = route_batch(_batch(lone, progress=progress), TWO, None)
    assert [p.progress_bytes for p in parts] == [progress, 0]

    texts = _docs(TWO, 1, 30)
    parts, _ = route_batch(_batch(texts, progress=progress), TWO, None)
    chars = [sum(len(d.values[0]) for d in p.docs) for p in parts]
    assert all(c > 0 for c in chars) and sum(chars) == sum(map(len, texts))
    assert sum(p.progress_bytes for p in parts) == progress
    for p, c in zip(parts, chars):
        assert abs(p.progress_bytes - progress * c / sum(chars)) < 1


# ---------------------------------------------------------------- twins after normalization

# Fifty NFC / NFD pairs: the same text once normalization has composed it.
TWINS = [(f"caf\u00e9 n\u00b0{i} \u00fcber na\u00efve", f"cafe\u0301 n\u00b0{i} u\u0308ber nai\u0308ve") for i in range(50)]
# ftfy's mojibake repairs: UTF-8 read as Windows-1252.
MOJIBAKE = [(f"caf\u00e9 {i} \u2014 r\u00e9sum\u00e9", f"caf\u00e9 {i} \u2014 r\u00e9sum\u00e9".encode("utf-8").decode("cp1252"))
            for i in range(20)]
EVEN = make_split_plan(data_splits=parse_data_splits("train=0.5,test=0.5"), max_seq_length=64)


@pytest.mark.parametrize("pairs", [TWINS, MOJIBAKE], ids=["nfc_nfd", "mojibake"])
def test_documents_equal_after_normalization_always_share_a_split(pairs):
    """The draw is of the normalized text: twins can never leak across train and test. Drawn from the raw text
    they would (the second assertion shows the raw draws split some pairs, so the first one has teeth). Twins
    are the same text only when normalizing (ftfy with its NFC normalizer); without it they are two texts."""
    config = NormalizeConfig(use_ftfy=True)
    assert all(normalize_text(a, config) == normalize_text(b, config) for a, b in pairs)
    texts = [t for pair in pairs for t in pair]
    parts, _ = route_batch(_batch(texts), EVEN, config)
    part_of = {d.index: p.group.part for p in parts for d in p.docs}
    assert all(part_of[2 * k] == part_of[2 * k + 1] for k in range(len(pairs)))
    raw_split = sum(EVEN.route(0, (a,)) != EVEN.route(0, (b,)) for a, b in pairs)
    assert raw_split >= len(pairs) // 4, raw_split
