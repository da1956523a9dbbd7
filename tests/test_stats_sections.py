"""transforms.core.stats: counters and data_params.json sections when counters are missing, zero or mixed;
every expected value is stated from the section's definition, by hand."""

from __future__ import annotations

import numpy as np

from transforms.core.stats import Stats, check_accounting, h5_stats_section, input_section, post_process_section, \
    real_lengths, row_stats

EOS, PAD = 0, 99


def test_add_without_a_value_counts_one():
    s = Stats()
    s.add("docs_read")
    s.add("docs_read", source="a.jsonl")
    assert s["docs_read"] == 2
    assert s.sources == {"a.jsonl": {"docs_read": 1}}


def test_real_lengths_are_per_row_in_a_mixed_batch():
    # a row with loss on 3 positions beside a row with no loss at all: 3 real inputs and none
    lm = [[5, 6, 7, PAD, PAD], [1, 1, 1, 0, 0], [6, 7, EOS, PAD, PAD]]
    blank = [[PAD] * 5, [0] * 5, [PAD] * 5]
    rows = np.array([lm, blank, lm], dtype=np.int32)
    assert real_lengths(rows, inverted_mask=False).tolist() == [3, 0, 3]
    assert real_lengths(rows, inverted_mask=False, trailing_eos_input=True).tolist() == [4, 0, 4]
    inverted = rows.copy()
    inverted[:, 1] ^= 1
    assert real_lengths(inverted, inverted_mask=True).tolist() == [3, 0, 3]
    s = row_stats(rows, inverted_mask=False)
    assert s["non_pad_tokens"] == 6 and s["num_pad_tokens"] == 15 - 6 and s["loss_valid_tokens"] == 6


def test_post_process_section_when_no_row_was_written():
    # documents were read (raw text counted) but every one was dropped: no rows, so no averages either
    stats = Stats()
    for name, value in (("docs_good", 2), ("dropped.shorter_than_min_sequence_len", 2), ("raw_chars", 50),
                        ("raw_bytes", 60), ("normalized_chars", 48), ("normalized_bytes", 58)):
        stats.add(name, value, "a.jsonl")
    assert post_process_section(stats, {}, eos_id=0, pad_id=1, vocab_size=8) == {
        "average_bytes_per_sequence": 0,
        "average_chars_per_sequence": 0,
        "discarded_files": 2,
        "eos_id": 0,
        "loss_valid_tokens": 0,
        "n_examples": 0,
        "normalized_bytes_count": 58,
        "normalized_chars_count": 48,
        "num_masked_tokens": 0,
        "num_pad_tokens": 0,
        "num_tokens": 0,
        "pad_id": 1,
        "processed_files": 2,
        "raw_bytes_count": 60,
        "raw_chars_count": 50,
        "successful_files": 0,
        "vocab_size": 8,
    }


def test_h5_stats_section_has_the_documented_keys():
    # The Cerebras docs' h5_dataset_stats: exactly these six counters of the written rows, as plain ints.
    written = {"detokenized_bytes": np.int64(900), "detokenized_chars": 870, "loss_valid_tokens": 250,
               "non_pad_tokens": 260, "num_sequences": 3, "num_tokens": 384,
               "num_pad_tokens": 124, "num_masked_tokens": 134}  # not part of this section
    section = h5_stats_section(written)
    assert section == {"detokenized_bytes": 900, "detokenized_chars": 870, "loss_valid_tokens": 250,
                       "non_pad_tokens": 260, "num_sequences": 3, "num_tokens": 384}
    assert all(type(v) is int for v in section.values())
    # nothing written: every counter is zero, none is left out
    assert h5_stats_section({}) == dict.fromkeys(section, 0)


def test_input_section_of_no_input_is_all_zero():
    section = input_section(Stats())
    assert section == {"documents_read": 0, "good": 0, "empty_documents": 0, "bad": 0, "bad_by_reason": {},
                       "used": 0, "dropped": 0, "dropped_by_reason": {}, "files": 0, "per_source": {}}
    assert check_accounting(section) == []


def test_input_section_counts_empty_documents_among_the_good():
    s = Stats()
    s.add("docs_read", 4, "a.jsonl")
    s.add("docs_good", 3, "a.jsonl")
    s.add("docs_empty", 2, "a.jsonl")  # two of the good documents were empty after normalization
    s.add("bad.malformed_json", 1, "a.jsonl")
    s.add("docs_used", 2, "a.jsonl")
    s.add("dropped.no_token_to_predict", 1, "a.jsonl")
    s.add("docs_read", 1, "b.jsonl")  # b: its only document was bad
    s.add("bad.missing_key", 1, "b.jsonl")
    section = input_section(s)
    assert section["empty_documents"] == 2 and section["good"] == 3
    assert section["per_source"]["a.jsonl"]["empty_documents"] == 2
    assert section["per_source"]["b.jsonl"] == {
        "documents_read": 1, "good": 0, "empty_documents": 0, "bad": 1, "bad_by_reason": {"missing_key": 1},
        "used": 0, "dropped": 0, "dropped_by_reason": {}}
    assert check_accounting(section) == []


def test_check_accounting_of_a_section_without_sources():
    ok = {"documents_read": 3, "good": 2, "bad": 1, "used": 1, "dropped": 1}
    assert check_accounting(ok) == []
    wrong = {**ok, "documents_read": 4, "used": 2}
    assert check_accounting(wrong) == ["total: read 4 != good 2 + bad 1", "total: good 2 != used 2 + dropped 1"]


def test_vsl_rows_count_their_document_segments():
    # MODES.md §A1.6: two documents (3 and 2 positions) and 3 pads; a row of one 1-position document and
    # 7 pads (its position id 0 is a document, the pads' are not); a full row of 2 documents.
    example = [[1, 2, 3, 4, 5, PAD, PAD, PAD], [1, 1, 1, 1, 1, 0, 0, 0], [2, 3, EOS, 5, EOS, PAD, PAD, PAD],
               [2, 1, 0, 1, 0, 0, 0, 0], [0, 1, 2, 0, 1, 0, 0, 0]]
    single = [[7] + [PAD] * 7, [1] + [0] * 7, [EOS] + [PAD] * 7, [0] * 8, [0] * 8]
    full = [[1, 2, 3, 4, 5, 6, 7, 8], [1] * 8, [2, 3, 4, EOS, 6, 7, 8, EOS], [3, 2, 1, 0, 3, 2, 1, 0],
            [0, 1, 2, 3, 0, 1, 2, 3]]
    s = row_stats(np.array([example, single, full], dtype=np.int32), inverted_mask=False)
    assert s["num_segments"] == 2 + 1 + 2 and s["non_pad_tokens"] == 5 + 1 + 8
    assert "num_segments" not in row_stats(np.array([example], dtype=np.int32)[:, :3], inverted_mask=False)


def test_post_process_section_of_vsl_rows():
    stats = Stats()
    stats.add("docs_good", 7, "a.jsonl")
    written = {"num_sequences": 3, "num_tokens": 24, "loss_valid_tokens": 20, "num_masked_tokens": 4,
               "num_pad_tokens": 4, "num_segments": 7}
    section = post_process_section(stats, written, eos_id=0, pad_id=1, vocab_size=8, vsl=True)
    assert section["num_sequences_before_packing"] == 7
    assert section["vsl_packing_factor"] == 2.3333  # 7 / 3, to 4 decimals
    plain = post_process_section(stats, written, eos_id=0, pad_id=1, vocab_size=8)
    assert set(section) - set(plain) == {"num_sequences_before_packing", "vsl_packing_factor"}
    empty = post_process_section(stats, {}, eos_id=0, pad_id=1, vocab_size=8, vsl=True)
    assert empty["num_sequences_before_packing"] == 0 and empty["vsl_packing_factor"] == 0.0
    assert isinstance(empty["vsl_packing_factor"], float)
