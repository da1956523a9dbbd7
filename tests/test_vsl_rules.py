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
    (doc,) = _docs(length)
    segs, used, _ = lm_segments([doc], _cfg())
    assert _seg_tokens(segs) == [doc[a:b].tolist() for a, b in windows]
    assert used == 1
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
