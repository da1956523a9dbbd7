"""Tests for transforms.core.detok: the table path counts exactly what decoding counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.detok import DetokCounter
from transforms.core.tokenizer import GPT2, NEOX, build_tokenizer
from transforms.io.tokenizer_files import read_tokenizer_files

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"
NEOX_JSON = ROOT.parent / "shared" / "tokenizers" / "gpt-neox-20b" / "20B_tokenizer.json"


@pytest.fixture(scope="module")
def gpt2_counter() -> DetokCounter:
    tok = build_tokenizer(read_tokenizer_files(GPT2, encoder_file=str(BUNDLED / "encoder.json"),
                                               vocab_file=str(BUNDLED / "vocab.bpe")))
    counter = DetokCounter(tok)
    assert counter._table is not None, "GPT-2's ByteLevel decoder must take the table path"
    return counter


def _split_ids(counter: DetokCounter) -> np.ndarray:
    return np.flatnonzero(~counter._table.whole)


def test_real_text_with_split_characters(gpt2_counter):
    # Emoji and CJK come out of byte-level BPE as several tokens that are not UTF-8 on their own.
    tok = gpt2_counter._tok
    texts = ["naïve café 🙂🙂 日本語のテキスト", "plain ascii", "", "Ω≈ç√∫ — “quotes” 𝄞"]
    ids = [tok.encode(t) for t in texts]
    assert any(not gpt2_counter._table.whole[r].all() for r in ids if len(r))
    assert gpt2_counter._fast(ids) == gpt2_counter._slow(ids) == (
        sum(len(t) for t in texts), sum(len(t.encode("utf-8")) for t in texts))


def test_rows_cut_inside_a_character(gpt2_counter):
    # A row that ends (or starts) in the middle of a character decodes with U+FFFD.
    ids = gpt2_counter._tok.encode("🙂🙂🙂 日本").tolist()
    rows = [np.asarray(ids[:k], np.int32) for k in range(len(ids) + 1)]
    rows += [np.asarray(ids[k:], np.int32) for k in range(len(ids) + 1)]
    assert gpt2_counter._fast(rows) == gpt2_counter._slow(rows)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_rows_match_the_decoder(gpt2_counter, data):
    split = _split_ids(gpt2_counter)
    size = len(gpt2_counter._table.pieces)
    # Mostly tokens that split characters, so runs, row ends and neighbours all occur.
    token = st.one_of(st.sampled_from(split.tolist()), st.integers(0, size - 1))
    rows = data.draw(st.lists(st.lists(token, max_size=40), max_size=8))
    arrays = [np.asarray(r, dtype=np.int32) for r in rows]
    assert gpt2_counter._fast(arrays) == gpt2_counter._slow(arrays)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_count_rows_of_a_padded_array_matches_the_decoder(gpt2_counter, data):
    """count_rows(ids [n, L], lengths): each row's first lengths[i] ids, decoded; what lies beyond is padding
    that must not count (here a split-character id, which would change the count if it leaked in)."""
    split = _split_ids(gpt2_counter)
    size = len(gpt2_counter._table.pieces)
    token = st.one_of(st.sampled_from(split.tolist()), st.integers(0, size - 1))
    width = data.draw(st.integers(1, 12))
    rows = data.draw(st.lists(st.lists(token, max_size=width), max_size=6))
    whole = data.draw(st.booleans())
    if whole:  # every row full: the path that takes the array as it is
        rows = [r + [int(split[0])] * (width - len(r)) for r in rows]
    ids = np.full((len(rows), width), split[0], dtype=np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    expected = gpt2_counter._slow([np.asarray(r, dtype=np.int32) for r in rows])
    assert gpt2_counter.count_rows(ids, lengths) == expected
    assert gpt2_counter.count_rows(np.ascontiguousarray(ids.T).T, lengths) == expected  # a strided view too


def test_whole_rows_across_gathers_and_beyond_the_packed_codes(gpt2_counter):
    """Whole rows are summed from packed per-id codes, 64 rows a gather: split characters in the rows at the
    gathers' edges count as decoded; rows too wide for the codes' fields are counted without them."""
    tok = gpt2_counter._tok
    split_text = tok.encode("🙂 日本").tolist()  # pieces that split characters
    plain = tok.encode("plain words here").tolist()
    width = len(split_text) + len(plain)
    rows = [(plain * width)[:width] for _ in range(130)]
    for i in (0, 63, 64, 127, 129):
        rows[i] = split_text + plain
    rows[100] = plain + split_text  # a run that ends with its row
    ids = np.asarray(rows, dtype=np.int32)
    expected = gpt2_counter._slow([np.asarray(r, dtype=np.int32) for r in rows])
    assert gpt2_counter.count_rows(ids, np.full(len(rows), width)) == expected
    wide = 1 << 22  # 128 bytes x 2^22 ids needs 29 bits for bytes alone, and as many for characters
    assert gpt2_counter._table.codes(wide) is None and gpt2_counter._table.codes(width) is not None
    row = np.resize(np.asarray(split_text + plain, dtype=np.int32), wide)[None, :]
    assert gpt2_counter.count_rows(row, np.array([wide])) == gpt2_counter._slow([row[0]])


@pytest.mark.skipif(not NEOX_JSON.is_file(), reason=f"{NEOX_JSON} not found (../shared is absent)")
def test_neox_table_matches_decoder():
    tok = build_tokenizer(read_tokenizer_files(NEOX, encoder_file=str(NEOX_JSON)))
    counter = DetokCounter(tok)
    assert counter._table is not None
    rng = np.random.default_rng(0)
    split = _split_ids(counter)
    rows = [np.where(rng.random(300) < 0.3, rng.choice(split, 300), rng.integers(0, len(counter._table.pieces), 300))
            for _ in range(50)]
    assert counter._fast(rows) == counter._slow(rows)
