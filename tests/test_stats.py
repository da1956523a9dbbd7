"""Tests for transforms.core.stats: per-row counters, input accounting, associative merging."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.stats import (Stats, check_accounting, input_section, merge, post_process_section, real_lengths,
                                   row_stats)

EOS, PAD = 0, 99


def row(input_ids, mask, labels):
    return np.array([input_ids, mask, labels], dtype=np.int32)


def summarization_row(prompt, completion, msl):
    """SPEC §1b row: ids = P + C + [eos] padded to msl+1; input = ids[:-1], labels = ids[1:];
    mask 0 on the prompt, 1 on its last position and on the completion, 0 at the EOS position, 0 padding."""
    ids = list(prompt) + list(completion) + [EOS]
    mask = [0] * (len(prompt) - 1) + [1] + [1] * len(completion) + [0]
    ids += [PAD] * (msl + 1 - len(ids))
    mask += [0] * (msl - len(mask))
    return row(ids[:-1], mask[:msl], ids[1:])


# ---------------------------------------------------------------- row_stats


def test_lm_rows_with_padding():
    msl = 6
    rows = np.stack([
        row([1, 2, 3, 4, 5, 6], [1] * 6, [2, 3, 4, 5, 6, 7]),  # full packed row
        row([5, 6, 7, PAD, PAD, PAD], [1, 1, 1, 0, 0, 0], [6, 7, EOS, PAD, PAD, PAD]),  # padded remainder
        row([8, EOS, PAD, PAD, PAD, PAD], [1, 1, 0, 0, 0, 0], [EOS, 9, PAD, PAD, PAD, PAD]),
    ])
    s = row_stats(rows, inverted_mask=False)
    assert s == {
        "num_sequences": 3,
        "num_tokens": 3 * msl,
        "loss_valid_tokens": 6 + 3 + 2,
        "num_masked_tokens": 3 * msl - 11,
        "non_pad_tokens": 11,
        "num_pad_tokens": 3 * msl - 11,
    }
    assert list(real_lengths(rows, inverted_mask=False)) == [6, 3, 2]


def test_lm_row_with_pad_equal_to_eos():
    # pad == eos: an EOS inside the real part is not padding.
    rows = np.stack([row([1, EOS, 2, EOS], [1, 1, 1, 0], [EOS, 2, 3, EOS])])
    s = row_stats(rows, inverted_mask=False)
    assert s["non_pad_tokens"] == 3 and s["num_pad_tokens"] == 1 and s["loss_valid_tokens"] == 3


def test_inverted_mask_row():
    rows = np.stack([
        row([5, 6, 7, PAD, PAD], [0, 0, 0, 1, 1], [6, 7, 8, PAD, PAD]),
        row([1, 2, 3, 4, 5], [0, 0, 0, 0, 0], [2, 3, 4, 5, 6]),
    ])
    s = row_stats(rows, inverted_mask=True)
    assert s["num_sequences"] == 2 and s["num_tokens"] == 10
    assert s["loss_valid_tokens"] == 8
    assert s["num_masked_tokens"] == 2
    assert s["non_pad_tokens"] == 8
    assert s["num_pad_tokens"] == 2
    assert list(real_lengths(rows, inverted_mask=True)) == [3, 5]
    # the same rows with the mask flipped, read without inversion, give the same counters
    flipped = rows.copy()
    flipped[:, 1] ^= 1
    assert row_stats(flipped, inverted_mask=False) == s


def test_summarization_like_row_non_pad_is_the_real_input_length():
    msl = 10
    prompt, completion = [11, 12, 13], [21, 22]
    r = summarization_row(prompt, completion, msl)
    np.testing.assert_array_equal(r[0], [11, 12, 13, 21, 22, EOS, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(r[1], [0, 0, 1, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(r[2], [12, 13, 21, 22, EOS, PAD, PAD, PAD, PAD, PAD])
    rows = np.stack([r])
    s = row_stats(rows, inverted_mask=False, trailing_eos_input=True)
    inverted = rows.copy()
    inverted[:, 1] ^= 1
    # inverted_mask (which works in Summarization)
    assert row_stats(inverted, inverted_mask=True, trailing_eos_input=True) == s
    real_input = len(prompt) + len(completion) + 1  # P + C + the EOS input position
    assert s["loss_valid_tokens"] == len(completion) + 1
    assert s["num_masked_tokens"] == msl - len(completion) - 1
    assert s["non_pad_tokens"] == real_input
    assert s["num_pad_tokens"] == msl - real_input
    assert list(real_lengths(rows, inverted_mask=False, trailing_eos_input=True)) == [real_input]


def test_summarization_row_of_full_length_has_no_trailing_eos_input():
    """A record of exactly msl + 1 tokens: its EOS is only a label, so every input is real and none is padding."""
    msl = 5
    prompt, completion = [11, 12], [21, 22, 23]  # 2 + 3 + EOS = 6 = msl + 1
    r = summarization_row(prompt, completion, msl)
    np.testing.assert_array_equal(r[0], [11, 12, 21, 22, 23])
    np.testing.assert_array_equal(r[2], [12, 21, 22, 23, EOS])
    for inverted in (False, True):
        rows = np.stack([r]).copy()
        if inverted:
            rows[:, 1] ^= 1
        s = row_stats(rows, inverted_mask=inverted, trailing_eos_input=True)
        assert list(real_lengths(rows, inverted_mask=inverted, trailing_eos_input=True)) == [msl]
        assert s["non_pad_tokens"] == msl and s["num_pad_tokens"] == 0
        assert s["loss_valid_tokens"] == len(completion) + 1 and s["num_masked_tokens"] == msl - len(completion) - 1


def test_lm_and_summarization_lengths_differ_by_the_trailing_eos():
    msl = 8
    lm = row([5, 6, 7, EOS, PAD, PAD, PAD, PAD], [1, 1, 1, 0, 0, 0, 0, 0], [6, 7, EOS, PAD, PAD, PAD, PAD, PAD])
    assert list(real_lengths(np.stack([lm]), inverted_mask=False)) == [3]
    assert list(real_lengths(np.stack([lm]), inverted_mask=False, trailing_eos_input=True)) == [4]
    blank = row([PAD] * msl, [0] * msl, [PAD] * msl)  # no loss at all: nothing real
    assert list(real_lengths(np.stack([blank]), inverted_mask=False, trailing_eos_input=True)) == [0]


def test_post_process_section_by_hand():
    """The reference's keys (SPEC 1e) from hand-made counts, each stated from its definition."""
    stats = Stats()
    for name, value in (("docs_good", 10), ("dropped.too_long", 2), ("dropped.shorter_than_min_sequence_len", 1),
                        ("raw_chars", 1001), ("raw_bytes", 1201), ("normalized_chars", 990),
                        ("normalized_bytes", 1190)):
        stats.add(name, value, "a.jsonl")
    written = {"num_sequences": 4, "num_tokens": 4 * 8, "loss_valid_tokens": 25, "num_masked_tokens": 7,
               "num_pad_tokens": 3}
    section = post_process_section(stats, written, eos_id=0, pad_id=99, vocab_size=50257)
    assert section == {
        "average_bytes_per_sequence": 301,  # ceil(1201 / 4)
        "average_chars_per_sequence": 251,  # ceil(1001 / 4)
        "discarded_files": 3,  # documents dropped, whatever the reason
        "eos_id": 0,
        "loss_valid_tokens": 25,
        "n_examples": 4,
        "normalized_bytes_count": 1190,
        "normalized_chars_count": 990,
        "num_masked_tokens": 7,
        "num_pad_tokens": 3,
        "num_tokens": 32,
        "pad_id": 99,
        "processed_files": 10,  # good documents
        "raw_bytes_count": 1201,
        "raw_chars_count": 1001,
        "successful_files": 7,  # good and not dropped
        "vocab_size": 50257,
    }
    empty = post_process_section(Stats(), {}, eos_id=0, pad_id=0, vocab_size=1)
    assert empty["n_examples"] == 0 and empty["average_bytes_per_sequence"] == 0


def test_no_rows():
    s = row_stats(np.zeros((0, 3, 7), np.int32), inverted_mask=False)
    assert s["num_sequences"] == 0 and s["num_tokens"] == 0
    assert s["non_pad_tokens"] == 0 and s["loss_valid_tokens"] == 0


# ---------------------------------------------------------------- input_section / check_accounting


def consistent_stats() -> Stats:
    s = Stats()
    s.add("docs_read", 5, "a.jsonl")
    s.add("docs_good", 4, "a.jsonl")
    s.add("bad.malformed_json", 1, "a.jsonl")
    s.add("docs_used", 3, "a.jsonl")
    s.add("dropped.shorter_than_min_sequence_len", 1, "a.jsonl")
    s.add("docs_read", 3, "b.txt")
    s.add("docs_good", 3, "b.txt")
    s.add("docs_used", 1, "b.txt")
    s.add("dropped.remainder_not_written", 1, "b.txt")
    s.add("dropped.shorter_than_min_sequence_len", 1, "b.txt")
    s.add("raw_chars", 1000, "b.txt")
    return s


def test_input_section_of_consistent_stats():
    section = input_section(consistent_stats())
    assert section["documents_read"] == 8
    assert section["good"] == 7 and section["bad"] == 1
    assert section["used"] == 4 and section["dropped"] == 3
    assert section["bad_by_reason"] == {"malformed_json": 1}
    assert section["dropped_by_reason"] == {"remainder_not_written": 1, "shorter_than_min_sequence_len": 2}
    assert section["files"] == 2
    assert set(section["per_source"]) == {"a.jsonl", "b.txt"}
    assert section["per_source"]["b.txt"]["dropped_by_reason"] == {
        "remainder_not_written": 1, "shorter_than_min_sequence_len": 1}
    assert check_accounting(section) == []


def test_check_accounting_names_the_problem():
    s = consistent_stats()
    s.add("docs_used", 1, "a.jsonl")  # a.jsonl: good 4 != used 4 + dropped 1
    problems = check_accounting(input_section(s))
    assert problems
    assert any("a.jsonl" in p and "used" in p for p in problems)
    assert any(p.startswith("total") and "used" in p for p in problems)
    assert not any("b.txt" in p for p in problems)

    s = consistent_stats()
    s.add("docs_read", 2, "b.txt")  # read 5 != good 3 + bad 0
    problems = check_accounting(input_section(s))
    assert any("b.txt" in p and "read" in p for p in problems)


def test_check_accounting_sees_per_source_errors_that_cancel_in_the_totals():
    s = Stats()
    s.add("docs_read", 5, "a")
    s.add("docs_good", 4, "a")  # a: read 5 != good 4 + bad 0
    s.add("docs_used", 4, "a")
    s.add("docs_read", 3, "b")
    s.add("docs_good", 3, "b")
    s.add("bad.x", 1, "b")  # b: read 3 != good 3 + bad 1
    s.add("docs_used", 3, "b")
    section = input_section(s)
    problems = check_accounting(section)
    assert not any(p.startswith("total") for p in problems)
    assert any(p.startswith("a:") for p in problems)
    assert any(p.startswith("b:") for p in problems)


# ---------------------------------------------------------------- Stats.merge_from

ops = st.lists(
    st.tuples(st.sampled_from(["docs_read", "docs_good", "rows", "dropped.x", "bad.y"]),
              st.integers(-5, 50),
              st.sampled_from([None, "a", "b", "c"])),
    max_size=12,
)


def build(operations) -> Stats:
    s = Stats()
    for name, value, source in operations:
        s.add(name, value, source)
    return s


def normalised(s: Stats):
    totals = {k: v for k, v in s.totals.items() if v}
    sources = {src: {k: v for k, v in c.items() if v} for src, c in s.sources.items()}
    return totals, {src: c for src, c in sources.items() if c}


@settings(max_examples=200, deadline=None)
@given(ops, ops, ops)
def test_merge_from_is_associative(x, y, z):
    left = build(x).merge_from(build(y)).merge_from(build(z))
    right = build(x).merge_from(build(y).merge_from(build(z)))
    assert normalised(left) == normalised(right)
    assert normalised(merge([build(x), build(y), build(z)])) == normalised(left)
    # and it is the same as adding everything to one value
    assert normalised(left) == normalised(build(x + y + z))


@settings(max_examples=100, deadline=None)
@given(ops, ops)
def test_merge_from_does_not_alias_or_change_its_argument(x, y):
    a, b = build(x), build(y)
    b_before = copy.deepcopy(b)
    a.merge_from(b)
    assert normalised(b) == normalised(b_before)
    a.add("rows", 7, "a")
    a.add("rows", 7, "b")
    assert normalised(b) == normalised(b_before)


def test_merge_example():
    a, b = Stats(), Stats()
    a.add("docs_read", 2, "f1")
    b.add("docs_read", 3, "f1")
    b.add("docs_read", 1, "f2")
    b.add("rows", 0, "f2")  # zero is not recorded
    m = merge([a, b])
    assert m["docs_read"] == 6 and m["rows"] == 0
    assert m.sources == {"f1": {"docs_read": 5}, "f2": {"docs_read": 1}}
    assert m.with_prefix("docs_") == {"read": 6}
