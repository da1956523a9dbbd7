"""FIM rules at their edges: configuration, sentinel look-up, seeded draws, exact fits, and fim_block.

Unit level only, on a one-token-per-character fake tokenizer and a fake
vocabulary, so these run wherever the tests run (no ../shared material).
Expected rows are written out by hand from the module docstring; the one pinned
value (the draws of row_draws) is a stability check, like the shuffle keys' one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import BOS, EOS, MID, PAD, PRE, SUF, chars
from tests.helpers import char_cfg as cfg_of
from tests.helpers import char_decode as decode
from tests.helpers import char_encode as encode
from transforms.core.fim import (
    AR,
    PSM,
    SPM,
    FimConfig,
    Segment,
    assemble,
    fim_block,
    fim_row,
    make_fim_config,
    plan_row,
    plan_segment,
    removal_counts,
    resolve_sentinels,
    row_draws,
    row_tokens,
)
from transforms.core.records import GroupId, RowBlock


class Script:
    """FimDraws replaying fixed outcomes: 0/1 for bernoulli, (a, b) for boundaries."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)

    def bernoulli(self, p):
        return self.outcomes.pop(0)

    def boundaries(self, n_chars):
        return self.outcomes.pop(0)


def x_of(row):
    """The msl + 1 laid-out tokens a row was cut from."""
    return row[0].tolist() + row[2, -1:].tolist()


# ------------------------------------------------------------ configuration


def test_max_seq_length_one_is_the_smallest_row():
    with pytest.raises(ValueError) as err:
        cfg_of(0)
    assert str(err.value) == "max_seq_length must be at least 1, got 0"
    # msl 1: x holds 2 tokens, enough for a one-token AR document and its EOS.
    row = fim_row(chars("a"), cfg_of(1), encode, decode, Script(0))
    assert row.tolist() == [[ord("a")], [1], [EOS]]
    # A FIM segment needs 4 tokens of sentinels and EOS: it does not fit, the row is all padding.
    row = fim_row(chars("a"), cfg_of(1), encode, decode, Script(1, (0, 1), 0))
    assert row.tolist() == [[PAD], [0], [PAD]]


@pytest.mark.parametrize("name", ["fim_rate", "spm_rate"])
def test_rates_zero_and_one_are_probabilities(name):
    for value in (0.0, 1.0):
        assert getattr(cfg_of(8, **{name: value}), name) == value
    for value in (-0.01, 1.01):
        with pytest.raises(ValueError) as err:
            cfg_of(8, **{name: value})
        assert str(err.value) == f"{name} must be a probability in [0, 1], got {value}"


def test_rates_zero_and_one_decide_every_segment():
    tokens = chars("|".join(["hello", "fim", "world", "x"] * 10))
    counts = {}
    for fim_rate, spm_rate in ((0.0, 0.5), (1.0, 0.0), (1.0, 1.0)):
        cfg = cfg_of(512, fim_rate=fim_rate, spm_rate=spm_rate)
        fmts = [s.fmt for i in range(5) for s in plan_row(tokens, cfg, encode, decode, row_draws(i, "rates"))]
        counts[fim_rate, spm_rate] = {f: fmts.count(f) for f in set(fmts)}
    assert counts == {(0.0, 0.5): {AR: 200}, (1.0, 0.0): {PSM: 200}, (1.0, 1.0): {SPM: 200}}


def test_sentinel_errors_name_the_flag():
    with pytest.raises(ValueError) as err:
        FimConfig(8, 0.5, 0.5, PRE, MID, PRE, EOS, PAD)
    assert str(err.value) == ("the FIM sentinel tokens must be three different tokens, got ids "
                              "{'fim_prefix_tok': 1, 'fim_middle_tok': 2, 'fim_suffix_tok': 1}")
    for fields, name in (((EOS, MID, SUF), "fim_prefix_tok"), ((PRE, EOS, SUF), "fim_middle_tok"),
                         ((PRE, MID, EOS), "fim_suffix_tok")):
        with pytest.raises(ValueError) as err:
            FimConfig(8, 0.5, 0.5, *fields, EOS, PAD)
        assert str(err.value) == f"{name} (id 0) is the EOS token; FIM splits documents at EOS"


# ------------------------------------------------------------ sentinels from a vocabulary


class FakeTokenizer:
    """What make_fim_config and resolve_sentinels read of a pipeline Tokenizer."""

    def __init__(self, *, name="fake.json", adds_bos=False, bos_id=9):
        self.vocab = {"<pre>": 0, "<mid>": 41, "<suf>": 42, "<eos>": 7, "<pad>": 8, "<s>": 9}
        if name is not None:
            self.name = name
        self.eos_id, self.pad_id, self.bos_id, self.adds_bos = 7, 8, bos_id, adds_bos
        self.looked_up = []

    def token_to_id(self, token):
        self.looked_up.append(token)
        return self.vocab.get(token)


def test_resolve_sentinels_exact_ids_in_order():
    tok = FakeTokenizer()
    ids = resolve_sentinels(tok, "<pre>", "<mid>", "<suf>")
    # Id 0 is a token like any other.
    assert ids == (0, 41, 42) and all(type(i) is int for i in ids)
    assert tok.looked_up == ["<pre>", "<mid>", "<suf>"]
    assert resolve_sentinels(tok, "<suf>", "<pre>", "<mid>") == (42, 0, 41)


def test_resolve_sentinels_reports_every_problem_at_once():
    with pytest.raises(ValueError) as err:
        resolve_sentinels(FakeTokenizer(), "", "<mid>", "<nope>")
    assert str(err.value) == ("FIM sentinel tokens missing from 'fake.json': --fim_prefix_tok is required; "
                              "--fim_suffix_tok '<nope>' is not a token of the vocabulary")
    with pytest.raises(ValueError) as err:
        resolve_sentinels(FakeTokenizer(), "<p>", None, "<suf>")
    assert str(err.value) == ("FIM sentinel tokens missing from 'fake.json': --fim_prefix_tok '<p>' is not a "
                              "token of the vocabulary; --fim_middle_tok is required")
    with pytest.raises(ValueError) as err:
        resolve_sentinels(FakeTokenizer(), "<pre>", "<m>", "")
    assert str(err.value) == ("FIM sentinel tokens missing from 'fake.json': --fim_middle_tok '<m>' is not a "
                              "token of the vocabulary; --fim_suffix_tok is required")


@pytest.mark.parametrize("name", [None, ""])
def test_resolve_sentinels_unnamed_tokenizer(name):
    with pytest.raises(ValueError) as err:
        resolve_sentinels(FakeTokenizer(name=name), "<pre>", "<mid>", "<x>")
    assert str(err.value) == ("FIM sentinel tokens missing from 'the tokenizer': "
                              "--fim_suffix_tok '<x>' is not a token of the vocabulary")


def test_make_fim_config_takes_ids_from_the_tokenizer():
    cfg = make_fim_config(FakeTokenizer(), max_seq_length=16, fim_rate=0.25, spm_rate=0.75,
                          prefix_tok="<pre>", middle_tok="<mid>", suffix_tok="<suf>")
    # A tokenizer that names a BOS without adding one gets none in FIM either; the mask is not inverted unless asked.
    assert cfg == FimConfig(max_seq_length=16, fim_rate=0.25, spm_rate=0.75, prefix_id=0, middle_id=41,
                            suffix_id=42, eos_id=7, pad_id=8, bos_id=None, inverted_mask=False)
    cfg = make_fim_config(FakeTokenizer(adds_bos=True), max_seq_length=32, fim_rate=1.0, spm_rate=0.0,
                          prefix_tok="<suf>", middle_tok="<pre>", suffix_tok="<mid>", inverted_mask=True)
    assert cfg == FimConfig(max_seq_length=32, fim_rate=1.0, spm_rate=0.0, prefix_id=42, middle_id=0,
                            suffix_id=41, eos_id=7, pad_id=8, bos_id=9, inverted_mask=True)
    with pytest.raises(ValueError, match="--fim_middle_tok is required"):
        make_fim_config(FakeTokenizer(), max_seq_length=16, fim_rate=0.5, spm_rate=0.5, prefix_tok="<pre>",
                        middle_tok="", suffix_tok="<suf>")


# ------------------------------------------------------------ draws


def test_row_draws_are_stable_across_versions():
    """The FIM form of a row is part of what a dataset is: the same seed, the same draws, in any version.

    These are the draws this code has always given (per segment, in the
    reference's order: FIM?, boundaries, SPM?); a change of the seeding
    changes every FIM dataset, and must be a deliberate one.
    """
    def first_segments(seed, identity):
        d = row_draws(seed, identity)
        return [(d.bernoulli(0.9), d.boundaries(1000), d.bernoulli(0.5)) for _ in range(3)]

    draws = first_segments(0, "corpus/part-000.jsonl#0/0")
    assert draws == [(1, (665, 994), 1), (1, (488, 510), 1), (1, (603, 643), 0)]
    assert first_segments(0, "corpus/part-000.jsonl#0/0") == draws
    assert first_segments(1, "corpus/part-000.jsonl#0/0") != draws
    assert first_segments(0, "corpus/part-000.jsonl#0/1") != draws


def test_decode_gets_python_ints_for_an_array_or_a_list():
    seen = []

    def strict_decode(ids):
        seen.append(ids)
        assert isinstance(ids, list) and all(type(i) is int for i in ids), ids
        return decode(ids)

    for seg in (chars("abc"), [97, 98, 99], (97, 98, 99)):
        planned = plan_segment(seg, cfg_of(16), encode, strict_decode, Script(1, (1, 2), 0))
        assert (planned.fmt, planned.prefix.tolist(), planned.middle.tolist(), planned.suffix.tolist()) == (
            PSM, [97], [98], [99])
    assert seen == [[97, 98, 99]] * 3


def test_planned_parts_are_int32_token_arrays_whatever_encode_returns():
    for enc in (encode, lambda t: tuple(encode(t)), lambda t: np.array(encode(t), dtype=np.int64)):
        # Boundaries (0, 3): the prefix is empty, the middle is everything.
        seg = plan_segment(chars("abc"), cfg_of(16), enc, decode, Script(1, (0, 3), 1))
        assert seg.fmt == SPM
        for part, expected in ((seg.prefix, []), (seg.middle, [97, 98, 99]), (seg.suffix, [])):
            assert part.dtype == np.int32 and part.ndim == 1 and part.tolist() == expected


# ------------------------------------------------------------ truncation and exact fits


def test_removing_more_than_there_is_is_an_error():
    assert removal_counts([(1, 1, 1)], 3) == [(1, 1, 1)]
    with pytest.raises(ValueError) as err:
        removal_counts([(1, 1, 1), (2, 0, 0)], 6)
    assert str(err.value) == "cannot remove 6 tokens from segments holding 5"


def test_sentinels_and_eos_exactly_filling_the_row_keep_every_segment():
    # msl 7: x holds 8 tokens, exactly the overhead of two FIM segments. Both stay, emptied of content;
    # a third segment (even AR, 1 token) would not fit and is left out.
    segments = [Segment(PSM, chars("ab"), chars("c"), chars("d")), Segment(SPM, chars("e"), chars("f"), chars("g")),
                Segment(AR, suffix=chars("h"))]
    row = assemble(segments, cfg_of(7))
    assert x_of(row) == [PRE, SUF, MID, EOS, PRE, SUF, MID, EOS]
    assert row[1].tolist() == [1] * 7
    # With BOS, an AR segment takes 2: three of them fill msl 5 exactly.
    row = assemble([Segment(AR, suffix=chars("ab"))] * 3 + [Segment(AR, suffix=chars("c"))], cfg_of(5, bos=True))
    assert x_of(row) == [BOS, EOS, BOS, EOS, BOS, EOS]


# ------------------------------------------------------------ packed rows in, FIM rows out


def test_row_tokens_are_the_real_inputs():
    a, b, c = map(ord, "abc")
    padded = np.array([[a, b, c, PAD, PAD], [1, 1, 1, 0, 0], [b, c, EOS, PAD, PAD]], dtype=np.int32)
    assert row_tokens(padded).tolist() == [a, b, c]
    inverted = padded.copy()
    inverted[1] = [0, 0, 0, 1, 1]
    assert row_tokens(inverted, inverted_mask=True).tolist() == [a, b, c]
    full = np.array([[a, EOS, b, c], [1, 1, 1, 1], [EOS, b, c, EOS]], dtype=np.int32)
    assert row_tokens(full).tolist() == [a, EOS, b, c]


GROUP = GroupId(3, 1, "gs://bucket/corpus/a.jsonl", "corpus/a.jsonl")
MSL = 8


def _lm_row(text):
    """A packed LMData row (mask all 1) whose inputs are `text` ('|' = EOS)."""
    ids = chars(text)
    assert len(ids) == MSL + 1
    return np.stack([ids[:-1], np.ones(MSL, dtype=np.int32), ids[1:]])


@pytest.mark.parametrize("inverted", [False, True])
@pytest.mark.parametrize("pad", [PAD, EOS])
def test_fim_block_keeps_rows_with_loss_and_counts_the_others(inverted, pad):
    # fim_rate 0: every segment AR, whatever the draws, so the rows are known exactly.
    cfg = cfg_of(MSL, fim_rate=0.0, inverted=inverted, pad=pad)
    rows = np.stack([_lm_row("|||||||||"), _lm_row("abc|def|g"), _lm_row("|||||||||"), _lm_row("|||||||||")])
    out = fim_block(RowBlock(GROUP, rows), cfg, encode, decode, seed=5)
    a, b, c, d, e, f = map(ord, "abcdef")
    # The row's inputs "abc|def|" are two AR segments: a b c E d e f E, then one pad.
    mask = [1] * 7 + [0]
    expected = [[a, b, c, EOS, d, e, f, EOS], [1 - m for m in mask] if inverted else mask,
                [b, c, EOS, d, e, f, EOS, pad]]
    assert out.group == GROUP
    assert out.rows.dtype == np.int32 and out.rows.tolist() == [expected]
    assert out.stats["rows_dropped.fim_without_loss"] == 3
    assert out.stats.sources == {GROUP.source: {"rows_dropped.fim_without_loss": 3}}


@pytest.mark.parametrize("inverted", [False, True])
def test_fim_block_without_any_row_left(inverted):
    rows = np.stack([_lm_row("|||||||||")] * 2)
    out = fim_block(RowBlock(GROUP, rows), cfg_of(MSL, inverted=inverted), encode, decode, seed=0)
    assert out.group == GROUP and len(out) == 0
    assert out.rows.shape == (0, 3, MSL) and out.rows.dtype == np.int32
    assert out.stats.sources == {GROUP.source: {"rows_dropped.fim_without_loss": 2}}


def test_fim_block_draws_per_seed_group_and_row_index():
    rows = np.stack([_lm_row("abcdefgh|")] * 12)
    cfg = cfg_of(MSL, fim_rate=0.5)

    def run(seed, group=GROUP):
        return fim_block(RowBlock(group, rows.copy()), cfg, encode, decode, seed=seed).rows

    first = run(7)
    assert np.array_equal(run(7), first)
    # Identical rows at different indices draw differently ...
    assert len({r.tobytes() for r in first}) > 1
    # ... and the seed and the group's identity (not its source path) both matter.
    assert not np.array_equal(run(8), first)
    assert not np.array_equal(run(7, GroupId(3, 2, GROUP.source, GROUP.relpath)), first)
    assert np.array_equal(run(7, GroupId(0, 1, "/elsewhere/corpus/a.jsonl", GROUP.relpath)), first)
    # Any one row can be recomputed alone from (seed, group name, index in the group).
    for i in (0, 5, 11):
        alone = fim_row(row_tokens(rows[i]), cfg, encode, decode, row_draws(7, f"{GROUP.name}/{i}"))
        assert np.array_equal(first[i], alone)
