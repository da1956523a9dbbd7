"""VSL segments, packing and rows, checked against the rules written out by hand (MODES.md Part A).

Nothing here runs Beam: the rules of transforms.core.vsl are restated
independently (the reference's order of checks, its windows, best-fit
decreasing by a scan of every bin) and compared with the code.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.vsl import (DROP_MIN_LEN, DROP_NOT_FOLDED, DROP_SINGLE_TOKEN, DROP_TOO_LONG, DROP_TOO_SHORT,
                                 VslConfig, lm_segments, pack_bins, pack_segments, summarization_segments)

EOS, PAD, SEP = 50, 99, 77


def _docs(*lengths: int) -> list[np.ndarray]:
    """Documents of the given lengths (EOS included): tokens 1, 2, 3, ... numbered across documents."""
    out, nxt = [], 1
    for n in lengths:
        out.append(np.array(list(range(nxt, nxt + n - 1)) + [EOS], dtype=np.int32))
        nxt += n - 1
    return out


def _seg_tokens(segs) -> list[list[int]]:
    return [segs.tokens[s:s + n + 1].tolist() for s, n in zip(segs.starts, segs.positions)]


def _cfg(msl=8, **kw) -> VslConfig:
    kw.setdefault("min_sequence_len", 2)
    return VslConfig(max_seq_length=msl, pad_id=PAD, eos_id=EOS, **kw)


# ---------------------------------------------------------------- LMData_VSL segments


def test_the_fold_example_of_the_spec():
    # MODES.md §A1.6: 19 tokens + eos, msl 8 -> [1..9], [9..17], [17 18 19 eos].
    doc = np.array(list(range(1, 20)) + [EOS], dtype=np.int32)
    segs, used, dropped = lm_segments([doc], _cfg())
    assert _seg_tokens(segs) == [list(range(1, 10)), list(range(9, 18)), [17, 18, 19, EOS]]
    assert segs.positions.tolist() == [8, 8, 3] and (used, dropped) == (1, Counter())


@pytest.mark.parametrize("length, windows", [
    (9, [(0, 9)]),  # exactly msl + 1: not folded, one full segment
    (10, [(0, 9), (8, 10)]),
    (16, [(0, 9), (8, 16)]),
    (17, [(0, 9), (8, 17)]),  # 2 msl + 1: the rest is the single last token, already the last label
    (18, [(0, 9), (8, 17), (16, 18)]),
    (25, [(0, 9), (8, 17), (16, 25)]),
])
def test_windows_of_msl_plus_one_with_stride_msl(length, windows):
    # A second document follows: a window running one token past its own document's end would take the next
    # document's first token, which the tokens and the positions below would show.
    doc, after = _docs(length, 4)
    segs, used, _ = lm_segments([doc, after], _cfg())
    assert _seg_tokens(segs) == [doc[a:b].tolist() for a, b in windows] + [after.tolist()]
    assert segs.positions.tolist() == [b - a - 1 for a, b in windows] + [3]
    assert segs.starts.tolist()[-1] == length  # the second document's segment begins where it does
    assert used == 2
    segs, _, _ = lm_segments([doc], _cfg())
    # No prediction is lost: every (input, label) pair of the document is in exactly one segment.
    pairs = Counter((s[i], s[i + 1]) for s in _seg_tokens(segs) for i in range(len(s) - 1))
    assert pairs == Counter(zip(doc[:-1].tolist(), doc[1:].tolist()))


def test_checks_in_the_reference_order_and_drop_reasons():
    docs = _docs(5, 6, 9, 10, 1)
    segs, used, dropped = lm_segments(docs, _cfg(min_sequence_len=6, fold_long_doc=False))
    # 5 < min_sequence_len; 6 and 9 (= msl + 1) kept; 10 > msl + 1 without folding.
    assert _seg_tokens(segs) == [docs[1].tolist(), docs[2].tolist()]
    assert used == 2 and dropped == Counter({DROP_MIN_LEN: 2, DROP_NOT_FOLDED: 1})
    # A bare EOS that passes min_sequence_len has nothing to predict: dropped, and counted.
    segs, used, dropped = lm_segments(_docs(1, 3), _cfg(min_sequence_len=0))
    assert len(segs) == 1 and used == 1 and dropped == Counter({DROP_SINGLE_TOKEN: 1})


def _expected_short_seq(lengths, msl, min_len, prob, seed):
    """The reference's draws: one random() per document past min_sequence_len, randint(2, msl) on a hit."""
    rng = random.Random(seed)
    out = []
    for n in lengths:
        if n < min_len:
            out.append(None)
            continue
        if rng.random() < prob:
            out.append([min(n, rng.randint(2, msl))])
        elif n > msl + 1:
            full = (n - 1) // msl
            rest = n - full * msl
            out.append([msl + 1] * full + ([rest] if rest >= 2 else []))
        else:
            out.append([n])
    return out


@pytest.mark.parametrize("prob", [0.0, 0.3, 1.0])
def test_short_seq_prob_draws_as_the_reference(prob):
    lengths = [3, 40, 7, 2, 12, 30, 9, 4, 17, 25] * 5
    msl, min_len = 8, 4
    docs = _docs(*lengths)
    segs, _, _ = lm_segments(docs, _cfg(msl, min_sequence_len=min_len, short_seq_prob=prob),
                             random.Random(7))
    expected = []
    for doc, sizes in zip(docs, _expected_short_seq(lengths, msl, min_len, prob, 7)):
        start = 0
        for size in sizes or []:
            expected.append(doc[start:start + size].tolist())
            start += size - 1
    assert _seg_tokens(segs) == expected
    if prob == 1.0:
        assert max(segs.positions) < msl  # a cut document is never folded; randint(2, msl) tokens at most


def test_flat_is_used_without_a_copy():
    docs = _docs(4, 12, 3)
    flat = np.concatenate(docs)
    segs, _, _ = lm_segments([flat[0:4], flat[4:16], flat[16:19]], _cfg(), flat=flat)
    assert segs.tokens is flat
    with pytest.raises(ValueError):
        lm_segments(docs, _cfg(), flat=flat[:-1])


# ---------------------------------------------------------------- Summarization_VSL segments


def _pairs(*shapes):
    nxt, out = 1, []
    for p, c in shapes:
        out.append((np.arange(nxt, nxt + p, dtype=np.int32), np.arange(nxt + p, nxt + p + c, dtype=np.int32)))
        nxt += p + c
    return out


def test_summarization_limits_count_positions_not_the_eos():
    cfg = _cfg(8, min_sequence_len=3, sep_id=SEP)
    # positions = |P| + 1 + |C|: 8 fits msl exactly, 9 does not, 2 is under min_sequence_len.
    segs, used, dropped = summarization_segments(_pairs((3, 4), (3, 5), (1, 0), (0, 2)), cfg)
    assert segs.positions.tolist() == [8, 3] and used == 2
    assert dropped == Counter({DROP_TOO_LONG: 1, DROP_TOO_SHORT: 1})
    assert _seg_tokens(segs)[0] == [1, 2, 3, SEP, 4, 5, 6, 7, EOS]
    # The loss starts where the label is the first completion token: at sep, or at the last prompt token.
    assert segs.mask_from.tolist() == [3, 0]
    no_sep, _, _ = summarization_segments(_pairs((3, 4), (0, 3)), _cfg(8, min_sequence_len=1))
    assert no_sep.mask_from.tolist() == [2, 0]  # no prompt, no sep: every position is trained
    nothing, used, dropped = summarization_segments(_pairs((0, 0)), _cfg(8, min_sequence_len=0))
    assert len(nothing) == 0 and used == 0 and dropped == Counter({DROP_SINGLE_TOKEN: 1})


@pytest.mark.parametrize("mode", ["keep_start", "keep_end"])
def test_summarization_truncate_cuts_to_the_vsl_capacity_as_summarization_does(mode):
    """With truncate (2.10's truncate_to_msl) a pair over msl positions is cut, not dropped: the prompt first
    (down to one token, `mode` says which end stays), then the completion's tail (down to one token), to
    exactly msl positions; the EOS stays a label. What cannot be cut that far is still dropped."""
    from transforms.core.summarization import SummarizationConfig, summarization_row

    cfg = _cfg(8, min_sequence_len=2, sep_id=SEP, truncate=mode)
    # positions 5 + 1 + 4 = 10: two prompt tokens go; 2 + 1 + 9 = 12: the prompt goes to one token, then the
    # completion loses its last three; 1 + 1 + 12 = 14: only the completion's tail can go; 8 fits as it is.
    pairs = _pairs((5, 4), (2, 9), (1, 12), (3, 4))
    segs, used, dropped = summarization_segments(pairs, cfg)
    assert (used, dropped) == (4, Counter()) and segs.positions.tolist() == [8, 8, 8, 8]
    (p0, c0), (p1, c1), (p2, c2), (p3, c3) = [(p.tolist(), c.tolist()) for p, c in pairs]
    head = {"keep_start": lambda p, n: p[:n], "keep_end": lambda p, n: p[len(p) - n:]}[mode]
    assert _seg_tokens(segs) == [head(p0, 3) + [SEP] + c0 + [EOS], head(p1, 1) + [SEP] + c1[:6] + [EOS],
                                 p2 + [SEP] + c2[:6] + [EOS], p3 + [SEP] + c3 + [EOS]]
    assert segs.mask_from.tolist() == [3, 1, 1, 3]  # the loss still starts at sep
    # The same cut as Summarization's at the same msl: its row holds msl + 1 tokens (the EOS a label), as a
    # segment of msl positions does.
    summ = SummarizationConfig(max_seq_length=8, eos_id=EOS, pad_id=PAD, sep_id=SEP, min_sequence_len=2,
                               truncate=mode)
    for (prompt, completion), tokens in zip(pairs, _seg_tokens(segs)):
        row, _ = summarization_row(prompt, completion, summ)
        ids = row[0].tolist() + [row[2, -1]]
        assert [t for t in ids if t != PAD] == tokens
    # Without truncate, as before: dropped. With it, a pair with no room for one prompt and one completion token
    # is dropped too.
    assert summarization_segments(pairs, _cfg(8, min_sequence_len=2, sep_id=SEP))[2] == Counter({DROP_TOO_LONG: 3})
    tight = _cfg(2, min_sequence_len=1, sep_id=SEP, truncate=mode)
    assert summarization_segments(_pairs((3, 3)), tight)[1:] == (0, Counter({DROP_TOO_LONG: 1}))


# ---------------------------------------------------------------- rows


def test_rows_of_the_spec_examples():
    # MODES.md §A1.6 and §A2.3, row by row.
    segs, _, _ = lm_segments([np.array([1, 2, 3, EOS]), np.array([4, 5, EOS])], _cfg())
    assert pack_segments(segs, _cfg()).rows.tolist() == [[
        [1, 2, 3, 4, 5, PAD, PAD, PAD],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [2, 3, EOS, 5, EOS, PAD, PAD, PAD],
        [2, 1, 0, 1, 0, 0, 0, 0],
        [0, 1, 2, 0, 1, 0, 0, 0]]]
    pairs = [(np.array([1, 2]), np.array([3, 4])), (np.array([5]), np.array([6]))]
    cfg = _cfg(sep_id=SEP)
    assert pack_segments(summarization_segments(pairs, cfg)[0], cfg).rows.tolist() == [[
        [1, 2, SEP, 3, 4, 5, SEP, 6],
        [0, 0, 1, 1, 1, 0, 1, 1],
        [2, SEP, 3, 4, EOS, SEP, 6, EOS],
        [4, 3, 2, 1, 0, 2, 1, 0],
        [0, 1, 2, 3, 4, 0, 1, 2]]]
    cfg = _cfg(inverted_mask=True)
    rows = pack_segments(summarization_segments(pairs, cfg)[0], cfg).rows
    assert rows[0].tolist() == [
        [1, 2, 3, 4, 5, 6, PAD, PAD],
        [1, 0, 0, 0, 0, 0, 1, 1],  # inverted: padding too
        [2, 3, 4, EOS, 6, EOS, PAD, PAD],
        [3, 2, 1, 0, 1, 0, 0, 0],
        [0, 1, 2, 3, 0, 1, 0, 0]]


def _row_segments(row: np.ndarray, mask_one: int = 1) -> list[tuple]:
    """The segments of one row, read back: (inputs + last label, mask) from position id 0 to the next."""
    real = int(np.flatnonzero(row[1] == mask_one)[-1]) + 1 if (row[1] == mask_one).any() else 0
    starts = np.flatnonzero(row[4, :real] == 0).tolist() + [real]
    out = []
    for a, b in zip(starts[:-1], starts[1:]):
        n = b - a
        assert row[3, a:b].tolist() == list(range(n - 1, -1, -1))
        assert row[4, a:b].tolist() == list(range(n))
        assert row[2, a:b - 1].tolist() == row[0, a + 1:b].tolist()  # labels are the next inputs
        out.append((tuple(row[0, a:b].tolist() + [int(row[2, b - 1])]), tuple(row[1, a:b].tolist())))
    assert (row[0, real:] == PAD).all() and (row[2, real:] == PAD).all()
    assert (row[3, real:] == 0).all() and (row[4, real:] == 0).all() and (row[1, real:] == 1 - mask_one).all()
    return out


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), max_size=60), msl=st.integers(2, 16),
       pack=st.booleans(), batch=st.integers(1, 7))
def test_rows_hold_every_segment_once_within_capacity(lengths, msl, pack, batch):
    cfg = _cfg(msl, min_sequence_len=0, pack_sequences=pack)
    segs, _, _ = lm_segments(_docs(*lengths), cfg)
    packed = pack_segments(segs, cfg)
    rows = packed.rows
    assert rows.shape == (len(packed), 5, msl) and rows.dtype == np.int32
    # Built a batch at a time, the rows are the same.
    parts = [packed.rows_between(i, min(i + batch, len(packed))) for i in range(0, len(packed), batch)]
    assert np.array_equal(np.concatenate(parts) if parts else rows, rows)
    got = Counter(seg for row in rows for seg in _row_segments(row))
    want = Counter((tuple(t), (1,) * (len(t) - 1)) for t in _seg_tokens(segs))
    assert got == want
    if not pack:
        assert len(packed) == len(segs)


def _rows_by(packed, lo: int, hi: int, copies: bool) -> np.ndarray:
    """rows_between built one way: by block copies, or by gathers (whatever the segments' lengths)."""
    from transforms.core import vsl

    saved = vsl._COPY_MIN_POSITIONS
    vsl._COPY_MIN_POSITIONS = 0 if copies else 1 << 40
    try:
        return packed.rows_between(lo, hi)
    finally:
        vsl._COPY_MIN_POSITIONS = saved


@settings(max_examples=300, deadline=None)
@given(data=st.data(), msl=st.integers(1, 24), pack=st.booleans(), inverted=st.booleans(),
       summarization=st.booleans(), features=st.sampled_from([3, 5]), batch=st.integers(1, 7))
def test_rows_built_by_block_copies_equal_the_gathered_rows(data, msl, pack, inverted, summarization, features,
                                                            batch):
    # Long segments (LMData_VSL's) are copied block by block, short ones gathered: the same rows either way,
    # prompts (Summarization_VSL's untrained positions), padding and the inverted mask included.
    cfg = _cfg(msl, min_sequence_len=0, pack_sequences=pack, inverted_mask=inverted, sep_id=SEP)
    if summarization:
        sizes = data.draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=30))
        pairs = [(np.arange(1, p + 1, dtype=np.int32), np.arange(100, 100 + c, dtype=np.int32)) for p, c in sizes]
        segs = summarization_segments(pairs, cfg)[0]
    else:
        segs = lm_segments(_docs(*data.draw(st.lists(st.integers(1, 40), max_size=40))), cfg)[0]
    packed = pack_segments(segs, cfg, features=features)
    for lo in range(0, len(packed), batch):
        hi = min(lo + batch, len(packed))
        copied = _rows_by(packed, lo, hi, copies=True)
        assert copied.shape == (hi - lo, features, msl) and copied.dtype == np.int32
        assert np.array_equal(copied, _rows_by(packed, lo, hi, copies=False))


# ---------------------------------------------------------------- best-fit decreasing


def _bfd_by_scanning(costs: list[int], capacity: int) -> list[int]:
    """Best-fit decreasing written plainly: scan every bin; among equally full ones, the last to change."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])  # stable: ties in input order
    room, changed, bin_of = [], [], [0] * len(costs)
    for step, i in enumerate(order):
        fits = [b for b in range(len(room)) if room[b] >= costs[i]]
        if fits:
            b = min(fits, key=lambda b: (room[b], -changed[b]))
        else:
            b = len(room)
            room.append(capacity)
            changed.append(step)
        room[b] -= costs[i]
        changed[b] = step
        bin_of[i] = b
    return bin_of


@settings(max_examples=300, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 64))
def test_pack_bins_is_best_fit_decreasing(data, capacity):
    costs = data.draw(st.lists(st.integers(1, capacity), max_size=80))
    bin_of, n = pack_bins(costs, capacity)
    assert bin_of.tolist() == _bfd_by_scanning(costs, capacity)
    loads = np.bincount(bin_of, weights=costs, minlength=n) if costs else np.zeros(0)
    assert len(loads) == n and (loads <= capacity).all() and (loads > 0).all()
    # Any-fit: an item opened a bin only because it fitted no earlier one, so no two rows could be merged.
    if n > 1:
        smallest = np.sort(loads)[:2]
        assert smallest.sum() > capacity
    # Equal costs are interchangeable: any order of the same items gives bins of the same loads.
    shuffled = data.draw(st.permutations(costs))
    other, m = pack_bins(shuffled, capacity)
    assert m == n and sorted(np.bincount(other, weights=shuffled, minlength=m).tolist()) == sorted(loads.tolist())


def test_pack_bins_examples_and_bad_costs():
    assert pack_bins([5, 5, 2], 8)[0].tolist() == [0, 1, 1]
    bin_of, n = pack_bins([3, 8, 5, 2, 6], 8)
    # 8 -> bin 0 (full), 6 -> bin 1 (room 2), 5 -> bin 2 (room 3), 3 -> bin 2 (exact), 2 -> bin 1 (exact).
    assert bin_of.tolist() == [2, 0, 2, 1, 1] and n == 3
    assert pack_bins([], 8)[1] == 0
    with pytest.raises(ValueError):
        pack_bins([9], 8)
    with pytest.raises(ValueError):
        pack_bins([0], 8)


# ---------------------------------------------------------------- counts, types and edges (mutation testing)


class _Fixed(random.Random):
    """A generator whose random() returns the given values in turn; randint draws as usual."""

    def __init__(self, values):
        super().__init__(0)
        self._values = list(values)

    def random(self):
        return self._values.pop(0)

    def getrandbits(self, k):  # defined here too, so randint keeps drawing bits, not random()
        return super().getrandbits(k)


def test_short_seq_prob_is_a_strict_threshold_and_needs_a_generator():
    cfg = _cfg(8, min_sequence_len=2, short_seq_prob=0.5)
    docs = _docs(9, 9)
    segs, _, _ = lm_segments(docs, cfg, _Fixed([0.5, 0.4999]))
    assert segs.positions[0] == 8  # a draw equal to short_seq_prob is no hit (the reference: random() < p)
    cut = random.Random(0).randint(2, 8)  # the hit's randint: _Fixed draws its bits as Random(0) would
    assert cut < 9 and segs.positions[1] == cut - 1  # the hit keeps randint(2, msl) tokens
    segs, _, _ = lm_segments(docs, cfg, None)  # no generator: nothing is cut
    assert segs.positions.tolist() == [8, 8]


def test_counts_add_up_over_many_documents():
    segs, used, dropped = lm_segments(_docs(3, 12, 3, 30, 1, 1), _cfg(8, min_sequence_len=0, fold_long_doc=False))
    assert used == 2 and dropped == Counter({DROP_NOT_FOLDED: 2, DROP_SINGLE_TOKEN: 2})
    segs, used, dropped = lm_segments(_docs(12, 30, 2, 2), _cfg(8, min_sequence_len=3))
    assert used == 2 and dropped == Counter({DROP_MIN_LEN: 2}) and len(segs) == 2 + 4
    cfg = _cfg(4, min_sequence_len=3, sep_id=SEP)
    _, used, dropped = summarization_segments(_pairs((3, 3), (2, 3), (1, 0), (0, 1)), cfg)
    assert used == 0 and dropped == Counter({DROP_TOO_LONG: 2, DROP_TOO_SHORT: 2})
    one, used, dropped = summarization_segments(_pairs((0, 1), (1, 0), (0, 0), (0, 0)), _cfg(4, min_sequence_len=0))
    assert used == 2 and one.positions.tolist() == [1, 1]  # one position is enough
    assert dropped == Counter({DROP_SINGLE_TOKEN: 2})  # no position at all


def test_types_of_the_segments():
    segs, _, _ = lm_segments([d.astype(np.int64) for d in _docs(4, 20)], _cfg())
    assert segs.tokens.dtype == np.int32
    assert segs.starts.dtype == segs.positions.dtype == segs.mask_from.dtype == np.int64
    empty, _, _ = lm_segments([], _cfg())
    assert empty.tokens.dtype == np.int32 and len(empty.tokens) == 0 and len(empty) == 0
    summ, _, _ = summarization_segments(_pairs((2, 2)), _cfg())
    assert summ.tokens.dtype == np.int32 and summ.mask_from.dtype == np.int64
    with pytest.raises(ValueError, match="^flat must be the documents' int32 tokens back to back$"):
        lm_segments(_docs(3), _cfg(), flat=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="^Summarization_VSL needs eos_id$"):
        summarization_segments(_pairs((1, 1)), VslConfig(max_seq_length=8, pad_id=PAD))
    with pytest.raises(ValueError, match=r"every cost must be within \[1, 8\]"):
        pack_bins([9], 8)


def test_a_rows_segments_keep_their_input_order_and_rows_are_checked():
    from transforms.core.vsl import PackedRows

    # 60 one-position segments fill one row of 64: quicksort would not keep them in order.
    cfg = _cfg(64, min_sequence_len=0)
    segs, _, _ = lm_segments(_docs(*[2] * 60), cfg)
    packed = pack_segments(segs, cfg)
    assert len(packed) == 1
    row = packed.rows[0]
    assert row[0, :60].tolist() == list(range(1, 61))
    assert [len(x) for x in packed.segment_lengths(0, 1)] == [60]
    several = pack_segments(lm_segments(_docs(65, 40, 30, 9), cfg)[0], cfg)
    assert [x.tolist() for x in several.segment_lengths(1, 3)] == [[39, 8], [29]]
    nothing = pack_segments(lm_segments([], cfg)[0], cfg)
    assert len(nothing) == 0 and nothing.rows.shape == (0, 5, 64) and nothing.segment_lengths(0, 0) == []
    refused = "^every row holds one or more segments and at most max_seq_length positions$"
    with pytest.raises(AssertionError, match=refused):
        PackedRows(segs, np.zeros(len(segs), np.int64), 1, _cfg(32, min_sequence_len=0))
    with pytest.raises(AssertionError, match=refused):
        PackedRows(segs, np.zeros(len(segs), np.int64), 2, cfg)


def test_index_type():
    from transforms.core.vsl import index_dtype

    assert index_dtype(2**31 - 1, 1024 * 2048) is np.int32
    assert index_dtype(2**31, 10) is np.int64
    assert index_dtype(10, 2**31) is np.int64


def _batch(name: str, docs, summarization=False):
    from transforms.core.records import GroupId, TokenBatch

    group = GroupId(file_index=0, slice_index=0, source=f"/in/{name}", relpath=name)
    tokens = [tuple(d) for d in docs] if summarization else [(d,) for d in docs]
    flat = None if summarization else np.concatenate(docs)
    if flat is not None:
        ends = np.cumsum([len(d) for d in docs])
        tokens = [(flat[e - len(d):e],) for e, d in zip(ends, docs)]
    return TokenBatch(group, tokens, flat=flat)


def test_the_batch_functions_count_by_source_and_seed_by_group():
    from transforms.core.vsl import vsl_lm_batch, vsl_summarization_batch

    cfg = _cfg(8, min_sequence_len=4, short_seq_prob=0.5)
    docs = _docs(*([12] * 40 + [2, 3]))
    batch = _batch("a.jsonl", docs)
    block = vsl_lm_batch(batch, cfg, seed=1)
    assert block.group.name == "a.jsonl#0" and len(block) == block.windows.n_rows
    assert block.windows.segments.tokens is batch.flat  # the group's token stream, not a copy
    assert block.stats.sources["/in/a.jsonl"] == Counter({"docs_used": 40, f"dropped.{DROP_MIN_LEN}": 2})
    assert block.stats["docs_used"] == 40
    again = vsl_lm_batch(_batch("a.jsonl", docs), cfg, seed=1).windows.rows
    assert np.array_equal(again, block.windows.rows)  # the same group and seed: the same draws
    other_seed = vsl_lm_batch(_batch("a.jsonl", docs), cfg, seed=2).windows.rows
    other_group = vsl_lm_batch(_batch("b.jsonl", docs), cfg, seed=1).windows.rows
    assert not np.array_equal(other_seed, block.windows.rows)
    assert not np.array_equal(other_group, block.windows.rows)
    expected = _expected_short_seq([12] * 40 + [2, 3], 8, 4, 0.5,
                                   __import__("transforms.core.seeds", fromlist=["x"]).derive_seed(
                                       1, "short_seq_prob", "a.jsonl#0"))
    assert sorted(block.windows.segments.positions.tolist()) == sorted(
        size - 1 for sizes in expected if sizes for size in sizes)

    pairs = _pairs((2, 2), (9, 9), (1, 1))
    block = vsl_summarization_batch(_batch("p.jsonl", pairs, summarization=True), _cfg(8, min_sequence_len=3))
    assert block.stats.sources["/in/p.jsonl"] == Counter({"docs_used": 1, f"dropped.{DROP_TOO_LONG}": 1,
                                                          f"dropped.{DROP_TOO_SHORT}": 1})
    assert block.windows.rows[0, 0, :4].tolist() == [1, 2, 3, 4]


def test_segments_stay_in_input_order_within_rows_of_a_large_group():
    rng = np.random.default_rng(5)
    cfg = _cfg(64, min_sequence_len=0)
    segs, _, _ = lm_segments(_docs(*rng.integers(2, 40, 400).tolist()), cfg)
    packed = pack_segments(segs, cfg)
    seen = {}
    for r, row in enumerate(packed.rows):
        real = int(row[1].sum())
        starts = np.flatnonzero(row[4, :real] == 0)
        firsts = row[0, starts].tolist()  # token values number the documents in input order
        assert firsts == sorted(firsts), r
        seen[r] = firsts
    assert sum(len(v) for v in seen.values()) == len(segs)


def test_padding_longer_than_the_groups_tokens():
    # One 3-token document in a row of 64: the padding's 61 positions index nothing of the group's tokens.
    cfg = _cfg(64, min_sequence_len=0)
    rows = pack_segments(lm_segments(_docs(3), cfg)[0], cfg).rows
    assert rows[0, 0].tolist() == [1, 2] + [PAD] * 62 and rows[0, 2].tolist() == [2, EOS] + [PAD] * 62


def test_rows_of_three_features_and_trained_tokens():
    from transforms.core.vsl import PackedRows, Segments

    # Two conversations as segments with their own trained tokens (Chat): [1 2 3 E] trains 3 and E,
    # [4 5 E] trains E. A position is trained when its label's token is.
    tokens = np.array([1, 2, 3, EOS, 4, 5, EOS], dtype=np.int32)
    trained = np.array([0, 0, 1, 1, 0, 0, 1], dtype=bool)
    segs = Segments(tokens=tokens, starts=np.array([0, 4]), positions=np.array([3, 2]),
                    mask_from=np.zeros(2, np.int64), trained=trained)
    cfg = _cfg(16, min_sequence_len=0, pack_sequences=False)
    five = pack_segments(segs, cfg)
    three = pack_segments(segs, cfg, features=3)
    assert three.rows.tolist() == [
        [[1, 2, 3] + [PAD] * 13, [0, 1, 1] + [0] * 13, [2, 3, EOS] + [PAD] * 13],
        [[4, 5] + [PAD] * 14, [0, 1] + [0] * 14, [5, EOS] + [PAD] * 14]]
    assert np.array_equal(five.rows[:, :3], three.rows)
    assert five.rows[0, 3:, :3].tolist() == [[2, 1, 0], [0, 1, 2]]
    assert three.vsl_segments is None and five.vsl_segments(0, 2)[1].tolist() == [2]
    inverted = pack_segments(segs, _cfg(16, min_sequence_len=0, pack_sequences=False, inverted_mask=True),
                             features=3).rows
    assert inverted[0, 1].tolist() == [1, 0, 0] + [1] * 13
    with pytest.raises(ValueError, match=r"^rows of 3 or 5 features \(or 4, with attend flags\), not 4$"):
        PackedRows(segs, np.arange(2), 2, cfg, features=4)


@pytest.mark.parametrize("features,flags", [(3, "trained"), (4, "trained"), (4, "attend"), (5, "trained")])
def test_long_segments_keep_their_trained_and_attended_tokens(features, flags):
    from transforms.core.vsl import Segments

    # Conversations of hundreds of positions (Chat, Chat_VSL): rows of long segments are built by block
    # copies when they carry no per-token flags; these do, and every flag must reach the rows.
    rng = np.random.default_rng(11)
    positions = [1000, 700, 300]
    starts = np.concatenate([[0], np.cumsum(np.array(positions) + 1)[:-1]])
    tokens = rng.integers(0, 5000, sum(positions) + len(positions)).astype(np.int32)
    trained, attend = rng.random(len(tokens)) < 0.5, rng.random(len(tokens)) < 0.5
    if flags == "attend":  # attend flags alone: every position trained
        trained[:] = True
    segs = Segments(tokens=tokens, starts=starts, positions=np.array(positions), mask_from=np.zeros(3, np.int64),
                    trained=trained if flags == "trained" else None, attend=attend if features == 4 else None)
    cfg = _cfg(1024, min_sequence_len=0, pack_sequences=features == 5)
    rows = pack_segments(segs, cfg, features=features).rows
    at = {}  # where each segment sits: (row, first position), found by its inputs
    for r, row in enumerate(rows):
        for s, n in zip(starts.tolist(), positions):
            hits = np.flatnonzero(row[0, :1024 - n + 1] == tokens[s])
            for h in hits.tolist():
                if np.array_equal(row[0, h:h + n], tokens[s:s + n]):
                    at[s] = (r, h)
    assert len(at) == 3
    for s, n in zip(starts.tolist(), positions):
        r, h = at[s]
        assert rows[r, 2, h:h + n].tolist() == tokens[s + 1:s + n + 1].tolist()
        assert rows[r, 1, h:h + n].tolist() == trained[s + 1:s + n + 1].astype(int).tolist()
        if features == 4:
            assert rows[r, 3, h:h + n].tolist() == (~attend[s:s + n]).astype(int).tolist()
