"""Tests for transforms.core.pack: LMData rows against a literal transcription of SPEC §1a."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.pack import (
    DROP_MIN_LEN,
    DROP_REMAINDER,
    DROP_SHORT_SEQ,
    DROP_SINGLE_TOKEN,
    PackConfig,
    pack_documents,
    rows_from_windows,
    window_to_row,
)

EOS = 0
KNOWN_REASONS = {DROP_MIN_LEN, DROP_REMAINDER, DROP_SHORT_SEQ, DROP_SINGLE_TOKEN}


# --------------------------------------------------------------------------------------------
# The reference, transcribed literally from SPEC §1a ("Packing and sequence formation").
# Besides the rows it returns, for every row, the stream span [start, start + len(w)) of the
# (possibly truncated) window it was built from, so document use can be computed independently.
# --------------------------------------------------------------------------------------------


def reference_rows(docs, msl, pad_id, pack_sequences, min_sequence_len, short_seq_prob, rng,
                   write_remainder=False):
    rows, spans = [], []

    def construct(w, start):
        # 1. min_sequence_len
        if len(w) < min_sequence_len:
            return
        # 2. short_seq_prob: a draw for every surviving window
        if rng.random() < short_seq_prob:
            w = w[:rng.randint(2, msl - 1)]
        # 3. input / labels / mask, padded to msl
        input_ids = list(w[:-1])
        labels = list(w[1:])
        pad_n = msl - (len(w) - 1)
        mask = [1] * len(input_ids) + [0] * pad_n
        input_ids += [pad_id] * pad_n
        labels += [pad_id] * pad_n
        rows.append(np.stack([np.array(input_ids), np.array(mask), np.array(labels)]))
        spans.append((start, start + len(w)))

    prefix = []
    pos = 0  # stream position just after the documents seen so far
    for ids in docs:
        ids = list(ids)
        if pack_sequences:
            S = prefix + ids
            s0 = pos - len(prefix)  # the prefix is always the tail of the stream so far
        else:
            S = ids
            s0 = pos
        windows = []
        j = 0
        while j * msl < len(S):
            windows.append((S[j * msl: j * msl + msl + 1], s0 + j * msl))
            j += 1
        prefix = []
        if pack_sequences:
            if windows and len(windows[-1][0]) < msl + 1:
                prefix = windows.pop()[0]
        else:
            if windows and len(windows[-1][0]) < 2:
                windows.pop()
        for w, start in windows:
            construct(w, start)
        pos += len(ids)

    if write_remainder and pack_sequences and len(prefix) >= 2:
        # Our extension: the final prefix as one more padded row, drawn after all other rows.
        construct(prefix, pos - len(prefix))

    if rows:
        out = np.stack(rows).astype(np.int32)
    else:
        out = np.zeros((0, 3, msl), np.int32)
    return out, spans


def used_documents(docs, spans) -> list[bool]:
    """Per document: does any of its stream positions lie in a written row?"""
    covered = set()
    for s, e in spans:
        covered.update(range(s, e))
    used, pos = [], 0
    for d in docs:
        used.append(any(p in covered for p in range(pos, pos + len(d))))
        pos += len(d)
    return used


def run_reference(docs, cfg: PackConfig, seed: int, write_remainder: bool):
    return reference_rows(docs, cfg.max_seq_length, cfg.pad_id, cfg.pack_sequences, cfg.min_sequence_len,
                          cfg.short_seq_prob, random.Random(seed), write_remainder=write_remainder)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

documents = st.lists(
    st.lists(st.integers(1, 30), max_size=14).map(lambda body: body + [EOS]),  # [] -> bare EOS
    max_size=8,
)


@st.composite
def pack_cases(draw):
    msl = draw(st.integers(2, 12))
    cfg = PackConfig(
        max_seq_length=msl,
        pad_id=draw(st.sampled_from([EOS, 99])),
        pack_sequences=draw(st.booleans()),
        min_sequence_len=draw(st.integers(0, msl + 1)),
        short_seq_prob=draw(st.sampled_from([0.0, 0.3, 1.0])),
        inverted_mask=False,
        write_remainder=draw(st.booleans()),
    )
    docs = draw(documents)
    seed = draw(st.integers(0, 2**32 - 1))
    return docs, cfg, seed


def _pack(docs, cfg, seed):
    return pack_documents([np.array(d, dtype=np.int32) for d in docs], cfg, random.Random(seed))


# --------------------------------------------------------------------------------------------
# Equality with the reference
# --------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(pack_cases())
def test_rows_equal_reference_transcription(case):
    docs, cfg, seed = case
    try:
        expected, _ = run_reference(docs, cfg, seed, cfg.write_remainder)
    except ValueError:
        # randint(2, msl - 1) has an empty range for msl = 2: the reference raises, so must we.
        assert cfg.max_seq_length == 2 and cfg.short_seq_prob > 0
        with pytest.raises(ValueError):
            _pack(docs, cfg, seed)
        return
    result = _pack(docs, cfg, seed)
    assert result.rows.dtype == np.int32
    assert result.rows.shape == (len(expected), 3, cfg.max_seq_length)
    np.testing.assert_array_equal(result.rows, expected)


@settings(max_examples=300, deadline=None)
@given(pack_cases(), st.data())
def test_any_range_of_rows_is_those_rows(case, data):
    """rows_between(lo, hi) is rows[lo:hi] for every range: ranges of whole windows of one stream (a view of
    it), of several documents' own streams (pack_sequences off: gathered), and with a group's last row."""
    docs, cfg, seed = case
    if cfg.max_seq_length == 2 and cfg.short_seq_prob > 0:
        return  # the reference's empty randint range (above)
    result = _pack(docs, cfg, seed)
    n = len(result)
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    np.testing.assert_array_equal(result.rows_between(lo, hi), result.rows[lo:hi])
    # And as the reference writes them, row by row.
    for i in range(lo, hi):
        np.testing.assert_array_equal(result.rows_between(i, i + 1)[0], result.rows[i])


def test_whole_rows_of_separate_documents_are_not_one_stream():
    """Without packing, each document is its own stream: its rows are consecutive windows, but the next
    document's first row does not follow on from the last one's."""
    msl = 4
    docs = [list(range(1, 2 * msl + 2)), list(range(100, 100 + 2 * msl + 1))]  # 2 whole windows each
    cfg = PackConfig(max_seq_length=msl, pad_id=0, pack_sequences=False, min_sequence_len=0, write_remainder=False)
    result = _pack(docs, cfg, 0)
    assert result.lengths.tolist() == [msl + 1] * 4 and np.diff(result.starts).tolist() == [msl, msl + 1, msl]
    rows = result.rows_between(0, 4)
    assert rows[:, 0].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [100, 101, 102, 103], [104, 105, 106, 107]]
    assert rows[:, 2].tolist() == [[2, 3, 4, 5], [6, 7, 8, 9], [101, 102, 103, 104], [105, 106, 107, 108]]
    assert (rows[:, 1] == 1).all()
    assert result.rows_between(1, 3)[:, 0].tolist() == [[5, 6, 7, 8], [100, 101, 102, 103]]


@settings(max_examples=300, deadline=None)
@given(pack_cases())
def test_write_remainder_adds_exactly_the_final_prefix_row(case):
    docs, cfg, seed = case
    if cfg.max_seq_length == 2 and cfg.short_seq_prob > 0:
        return  # covered above (both raise)
    without = _pack(docs, PackConfig(**{**cfg.__dict__, "write_remainder": False}), seed).rows
    with_ = _pack(docs, PackConfig(**{**cfg.__dict__, "write_remainder": True}), seed).rows
    ref_without, _ = run_reference(docs, cfg, seed, write_remainder=False)
    np.testing.assert_array_equal(without, ref_without)

    # The final prefix of the transcription (pack mode only): the stream's tail after its last full window.
    stream = [t for d in docs for t in d]
    msl = cfg.max_seq_length
    extra_expected = False
    if cfg.pack_sequences and stream:
        tail = stream[((len(stream) - 1) // msl) * msl:]
        extra_expected = len(tail) >= 2 and len(tail) >= cfg.min_sequence_len
    assert len(with_) == len(without) + (1 if extra_expected else 0)
    np.testing.assert_array_equal(with_[: len(without)], without)
    if extra_expected:
        last = with_[-1]
        assert last[1, -1] == 0 or len(tail) == msl + 1  # a padded row (the tail is never full)
        n = int(last[1].sum())
        assert n >= 1
        # input/labels are a prefix of the tail, shifted by one
        assert list(last[0, :n]) == tail[:n]
        assert list(last[2, :n]) == tail[1:n + 1]
        assert (last[0, n:] == cfg.pad_id).all() and (last[2, n:] == cfg.pad_id).all()


def test_remainder_row_draws_after_all_other_rows():
    # msl=4, short_seq_prob=1.0: every row, the remainder included, is cut at randint(2, 3).
    docs = [list(range(1, 10)) + [EOS], [5, EOS]]  # 12 tokens: full windows at 0 and 4, tail [8:12]
    cfg = PackConfig(max_seq_length=4, pad_id=99, min_sequence_len=0, short_seq_prob=1.0, write_remainder=True)
    expected, _ = reference_rows(docs, 4, 99, True, 0, 1.0, random.Random(7), write_remainder=True)
    assert len(expected) == 3
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(7))
    np.testing.assert_array_equal(result.rows, expected)


# --------------------------------------------------------------------------------------------
# inverted_mask
# --------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(pack_cases())
def test_inverted_mask_is_exactly_one_minus_the_mask(case):
    docs, cfg, seed = case
    if cfg.max_seq_length == 2 and cfg.short_seq_prob > 0:
        return
    normal = _pack(docs, cfg, seed).rows
    inverted = _pack(docs, PackConfig(**{**cfg.__dict__, "inverted_mask": True}), seed).rows
    assert inverted.shape == normal.shape
    np.testing.assert_array_equal(inverted[:, 0], normal[:, 0])
    np.testing.assert_array_equal(inverted[:, 2], normal[:, 2])
    np.testing.assert_array_equal(inverted[:, 1], 1 - normal[:, 1])


def test_window_to_row_inverted():
    row = window_to_row(np.array([1, 2, 3]), 4, 99, inverted_mask=True)
    np.testing.assert_array_equal(row, [[1, 2, 99, 99], [0, 0, 1, 1], [2, 3, 99, 99]])
    rows = rows_from_windows([np.array([1, 2, 3, 4, 5]), np.array([7, 8])], 4, 0)
    np.testing.assert_array_equal(rows[0], [[1, 2, 3, 4], [1, 1, 1, 1], [2, 3, 4, 5]])
    np.testing.assert_array_equal(rows[1], [[7, 0, 0, 0], [1, 0, 0, 0], [8, 0, 0, 0]])


# --------------------------------------------------------------------------------------------
# Accounting
# --------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(pack_cases())
def test_accounting_matches_independent_stream_positions(case):
    docs, cfg, seed = case
    if cfg.max_seq_length == 2 and cfg.short_seq_prob > 0:
        return
    _, spans = run_reference(docs, cfg, seed, cfg.write_remainder)
    used = used_documents(docs, spans)
    result = _pack(docs, cfg, seed)
    assert result.docs_used + sum(result.dropped.values()) == len(docs)
    assert result.docs_used == sum(used)
    assert set(result.dropped) <= KNOWN_REASONS
    assert all(v > 0 for v in result.dropped.values())
    if cfg.short_seq_prob == 0:
        assert DROP_SHORT_SEQ not in result.dropped
    if not cfg.pack_sequences or cfg.write_remainder:
        assert DROP_REMAINDER not in result.dropped


def test_doc_only_in_min_len_dropped_window():
    # No packing: each document is its own stream. msl=8, min_sequence_len=5.
    docs = [[1, 2, 3, 4, 5, 6, EOS], [7, 8, EOS], [9, 10, 11, 12, EOS]]
    cfg = PackConfig(max_seq_length=8, pad_id=99, pack_sequences=False, min_sequence_len=5)
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(0))
    assert len(result.rows) == 2
    assert result.docs_used == 2
    assert result.dropped == {DROP_MIN_LEN: 1}


def test_doc_only_in_min_len_dropped_remainder_when_writing_remainder():
    # Packing, msl=4: stream of 7 tokens = full window [0:5] + remainder [4:7] (3 tokens < min 4).
    docs = [[1, 2, 3, EOS], [5, 6, EOS]]
    cfg = PackConfig(max_seq_length=4, pad_id=99, min_sequence_len=4, write_remainder=True)
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(0))
    # doc 2 = positions 4..6; position 4 is the last label of row 0, so doc 2 is used.
    assert len(result.rows) == 1 and result.docs_used == 2
    docs = [[1, 2, 3, 4, EOS], [6, EOS]]  # doc 2 = positions 5..6, only in the remainder [4:7]
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(0))
    assert len(result.rows) == 1
    assert result.docs_used == 1
    assert result.dropped == {DROP_MIN_LEN: 1}


def test_single_token_document_without_packing():
    docs = [[1, 2, EOS], [EOS], [3, EOS], [EOS]]
    cfg = PackConfig(max_seq_length=4, pad_id=99, pack_sequences=False, min_sequence_len=0)
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(0))
    assert len(result.rows) == 2
    assert result.docs_used == 2
    assert result.dropped == {DROP_SINGLE_TOKEN: 2}


def test_remainder_not_written():
    # msl=4, stream of 8 tokens: full window [0:5], remainder [4:8]; doc 2 = positions 5..7.
    docs = [[1, 2, 3, 4, EOS], [6, 7, EOS]]
    cfg = PackConfig(max_seq_length=4, pad_id=99, min_sequence_len=0, write_remainder=False)
    result = pack_documents([np.array(d) for d in docs], cfg, random.Random(0))
    assert len(result.rows) == 1
    assert result.docs_used == 1
    assert result.dropped == {DROP_REMAINDER: 1}
    # the same documents with write_remainder: both used, one more (padded) row
    result = pack_documents([np.array(d) for d in docs], PackConfig(**{**cfg.__dict__, "write_remainder": True}),
                            random.Random(0))
    assert len(result.rows) == 2 and result.docs_used == 2 and not result.dropped


def test_cut_by_short_seq_prob():
    # msl=6, one 7-token document = one full window; short_seq_prob=1 cuts it to randint(2, 5) tokens,
    # so a second document in the cut-off tail is lost.
    docs = [[1, EOS], [3, 4, 5, 6, EOS]]
    cfg = PackConfig(max_seq_length=6, pad_id=99, min_sequence_len=0, short_seq_prob=1.0, write_remainder=False)
    for seed in range(20):
        rng = random.Random(seed)
        rng.random()
        cut = rng.randint(2, 5)
        result = pack_documents([np.array(d) for d in docs], cfg, random.Random(seed))
        assert len(result.rows) == 1
        assert int(result.rows[0, 1].sum()) == cut - 1
        if cut <= 2:
            assert result.docs_used == 1 and result.dropped == {DROP_SHORT_SEQ: 1}
        else:
            assert result.docs_used == 2 and not result.dropped


def test_empty_group():
    result = pack_documents([], PackConfig(max_seq_length=4, pad_id=0), random.Random(0))
    assert result.rows.shape == (0, 3, 4)
    assert result.docs_used == 0 and not result.dropped


# --------------------------------------------------------------------------------------------
# The module docstring's example (msl = 4)
# --------------------------------------------------------------------------------------------

a, b, c, d, e, f, g, h, i = range(1, 10)
P = 50


def test_docstring_example_nine_tokens():
    docs = [np.array([a, b, c, d, e]), np.array([f, g, h, i])]
    for write_remainder in (False, True):
        cfg = PackConfig(max_seq_length=4, pad_id=P, min_sequence_len=0, write_remainder=write_remainder)
        result = pack_documents(docs, cfg, random.Random(0))
        np.testing.assert_array_equal(result.rows, [
            [[a, b, c, d], [1, 1, 1, 1], [b, c, d, e]],
            [[e, f, g, h], [1, 1, 1, 1], [f, g, h, i]],
        ])
        assert result.docs_used == 2 and not result.dropped


def test_docstring_example_seven_tokens():
    docs = [np.array([a, b, c, d, e, f, g])]
    cfg = PackConfig(max_seq_length=4, pad_id=P, min_sequence_len=0, write_remainder=True)
    result = pack_documents(docs, cfg, random.Random(0))
    np.testing.assert_array_equal(result.rows, [
        [[a, b, c, d], [1, 1, 1, 1], [b, c, d, e]],
        [[e, f, P, P], [1, 1, 0, 0], [f, g, P, P]],
    ])
    cfg = PackConfig(max_seq_length=4, pad_id=P, min_sequence_len=0, write_remainder=False)
    result = pack_documents(docs, cfg, random.Random(0))
    np.testing.assert_array_equal(result.rows, [[[a, b, c, d], [1, 1, 1, 1], [b, c, d, e]]])


@settings(max_examples=200, deadline=None)
@given(pack_cases())
def test_flat_stream_gives_the_same_rows(case):
    # The tokenizer hands the packer its documents back to back; packing must not depend on it.
    docs, cfg, seed = case
    flat = np.concatenate(docs).astype(np.int32) if docs else np.zeros(0, np.int32)
    try:
        expected = _pack(docs, cfg, seed)
    except ValueError:
        return  # see test_rows_equal_reference_transcription
    result = pack_documents(docs, cfg, random.Random(seed), flat=flat)
    np.testing.assert_array_equal(result.rows, expected.rows)
    assert (result.docs_used, result.dropped) == (expected.docs_used, expected.dropped)


def test_flat_stream_must_match_the_documents():
    docs = [np.array([5, 6, EOS], np.int32), np.array([7, EOS], np.int32)]
    cfg = PackConfig(max_seq_length=4, pad_id=EOS, min_sequence_len=1)
    with pytest.raises(ValueError, match="back to back"):
        pack_documents(docs, cfg, flat=np.array([5, 6, EOS], np.int32))
