"""Summarization rows at their edges, and a batch's rows and drop counts (unit level, no pipeline run)."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.core.records import GroupId, TokenBatch
from transforms.core.summarization import (
    DROP_TOO_SHORT,
    SummarizationConfig,
    summarization_batch,
    summarization_row,
)

EOS, PAD, SEP = 9, 0, 5
GROUP = GroupId(2, 0, "gs://bucket/s.jsonl", "s.jsonl")


def ids(*values):
    return np.array(values, dtype=np.int32)


def test_a_record_of_exactly_min_sequence_len_is_kept():
    cfg = SummarizationConfig(max_seq_length=8, eos_id=EOS, pad_id=PAD, sep_id=SEP, min_sequence_len=5)
    # total = 2 + 1 (sep) + 1 + 1 (eos) = 5
    row, reason = summarization_row(ids(11, 12), ids(21), cfg)
    assert reason is None
    assert row.tolist() == [[11, 12, SEP, 21, EOS, PAD, PAD, PAD],
                            [0, 0, 1, 1, 0, 0, 0, 0],
                            [12, SEP, 21, EOS, PAD, PAD, PAD, PAD]]
    assert summarization_row(ids(11), ids(21), cfg) == (None, DROP_TOO_SHORT)  # total 4


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_rows_are_int32_whatever_the_token_arrays(dtype):
    cfg = SummarizationConfig(max_seq_length=6, eos_id=EOS, pad_id=PAD, min_sequence_len=0)
    row, _ = summarization_row(np.array([11, 12], dtype=dtype), np.array([21], dtype=dtype), cfg)
    assert row.dtype == np.int32 and row.shape == (3, 6)
    row, _ = summarization_row(np.array([], dtype=dtype), np.array([21], dtype=dtype), cfg)
    assert row.dtype == np.int32 and row.tolist() == [[21, EOS, PAD, PAD, PAD, PAD], [1, 0, 0, 0, 0, 0],
                                                      [EOS, PAD, PAD, PAD, PAD, PAD]]


def test_batch_rows_in_record_order_and_drops_counted_by_reason():
    cfg = SummarizationConfig(max_seq_length=4, eos_id=EOS, pad_id=PAD, min_sequence_len=3)
    records = [
        (ids(11), ids(21, 22, 23, 24)),  # total 6 > 5: too long
        (ids(11, 12), ids(21)),          # total 4: kept
        (ids(11), ids()),                # total 2 < 3: too short
        (ids(11, 12, 13), ids(21, 22)),  # total 6: too long
        (ids(), ids(31, 32, 33)),        # total 4: kept
    ]
    out = summarization_batch(TokenBatch(GROUP, records), cfg)
    assert out.group == GROUP
    assert out.rows.dtype == np.int32
    assert out.rows.tolist() == [
        [[11, 12, 21, EOS], [0, 1, 1, 0], [12, 21, EOS, PAD]],
        [[31, 32, 33, EOS], [1, 1, 1, 0], [32, 33, EOS, PAD]],
    ]
    counts = {"docs_used": 2, "dropped.too_long": 2, "dropped.shorter_than_min_sequence_len": 1}
    assert dict(out.stats.totals) == counts
    assert out.stats.sources == {GROUP.source: counts}


def test_batch_with_every_record_dropped():
    cfg = SummarizationConfig(max_seq_length=4, eos_id=EOS, pad_id=PAD, min_sequence_len=3)
    out = summarization_batch(TokenBatch(GROUP, [(ids(1, 2, 3), ids(4, 5))] * 3), cfg)
    assert out.group == GROUP and len(out) == 0
    assert out.rows.shape == (0, 3, 4) and out.rows.dtype == np.int32
    assert dict(out.stats.totals) == {"dropped.too_long": 3}
    assert out.stats.sources == {GROUP.source: {"dropped.too_long": 3}}
    assert len(summarization_batch(TokenBatch(GROUP, []), cfg)) == 0


# ---------------------------------------------------------------- truncate (Cerebras 2.10's truncate_to_msl)


def test_truncate_cuts_the_prompt_first_keeping_the_side_asked():
    from transforms.core.summarization import SummarizationConfig, summarization_row

    p, c = np.array([1, 2, 3, 4, 5]), np.array([6, 7, 8])
    for mode, kept in (("keep_start", [1, 2, 3]), ("keep_end", [3, 4, 5])):
        cfg = SummarizationConfig(max_seq_length=6, eos_id=0, pad_id=9, min_sequence_len=2, truncate=mode)
        row, reason = summarization_row(p, c, cfg)
        assert reason is None
        assert row[0].tolist() == kept + [6, 7, 8]  # 9 tokens with EOS, 2 too many: off the prompt
        assert row[2].tolist() == kept[1:] + [6, 7, 8, 0]
        assert row[1].tolist() == [0, 0, 1, 1, 1, 1]
    cfg = SummarizationConfig(max_seq_length=6, eos_id=0, pad_id=9, min_sequence_len=2)
    assert summarization_row(p, c, cfg) == (None, "too_long")  # without truncate: dropped


def test_truncate_then_cuts_the_completion_tail_and_drops_what_cannot_fit():
    from transforms.core.summarization import SummarizationConfig, summarization_row

    cfg = SummarizationConfig(max_seq_length=4, eos_id=0, pad_id=9, min_sequence_len=2, truncate="keep_end")
    row, _ = summarization_row(np.array([1, 2, 3]), np.array([6, 7, 8, 5]), cfg)
    assert row[0].tolist() == [3, 6, 7, 8] and row[2].tolist() == [6, 7, 8, 0]  # prompt to 1 token, C to 3
    cfg = SummarizationConfig(max_seq_length=2, eos_id=0, pad_id=9, min_sequence_len=2, truncate="keep_end",
                              sep_id=4)
    assert summarization_row(np.array([1, 2]), np.array([6, 7]), cfg) == (None, "too_long")  # 1 + sep + 1 + EOS
