"""Tests for transforms.core.detok: the table path counts exactly what decoding counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.core.detok import DetokCounter
from transforms.core.tokenizer import GPT2, NEOX, TokenizerFiles, build_tokenizer
from transforms.core.tokenizer.exact import byte_stand_ins
from transforms.io.tokenizer_files import read_tokenizer_files

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"
NEOX_JSON = ROOT.parent / "shared" / "tokenizers" / "gpt-neox-20b" / "20B_tokenizer.json"
TOKS = ROOT.parent / "shared" / "tokenizers"


def _decoded(tok, rows) -> tuple[int, int]:
    """What the rows decode to, by the tokenizer itself: (characters, UTF-8 bytes)."""
    texts = tok.decode_batch([np.asarray(r).tolist() for r in rows])
    return sum(len(t) for t in texts), sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts)


def _padded(rows, width, pad):
    ids = np.full((len(rows), width), pad, dtype=np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    return ids, np.array([len(r) for r in rows], dtype=np.int64)


@pytest.fixture
def gpt2_counter() -> DetokCounter:
    # A new tokenizer per test: its table is built in the test that uses it (one table per tokenizer object).
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_rows_match_the_decoder(gpt2_counter, data):
    split = _split_ids(gpt2_counter)
    size = len(gpt2_counter._table.pieces)
    # Mostly tokens that split characters, so runs, row ends and neighbours all occur.
    token = st.one_of(st.sampled_from(split.tolist()), st.integers(0, size - 1))
    rows = data.draw(st.lists(st.lists(token, max_size=40), max_size=8))
    arrays = [np.asarray(r, dtype=np.int32) for r in rows]
    assert gpt2_counter._fast(arrays) == gpt2_counter._slow(arrays)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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


def test_count_takes_either_path(gpt2_counter):
    rows = [gpt2_counter._tok.encode(t) for t in ("naïve 🙂 café", "", "plain")]
    assert gpt2_counter.count(rows) == gpt2_counter._fast(rows) == _decoded(gpt2_counter._tok, rows)


@pytest.mark.skipif(not (TOKS / "gpt2").is_dir(), reason="../shared is absent")
def test_a_decoder_that_cleans_up_spaces_is_decoded_for_real():
    """GPT-2 from a Hugging Face directory cleans up spaces after decoding (" ," -> ","): no table, and every
    count, padded or whole rows, is the decoder's own."""
    from transforms.core.tokenizer import HF

    tok = build_tokenizer(read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "gpt2")))
    counter = DetokCounter(tok)
    assert counter._table is None
    rows = [tok.encode(t).tolist() for t in ("Hello , world ! It 's here , is n't it ?", "a , b", "no space")]
    assert _decoded(tok, rows)[0] < sum(len(t) for t in ("Hello , world ! It 's here , is n't it ?", "a , b",
                                                           "no space"))  # the clean-up did remove spaces
    assert counter.count(rows) == _decoded(tok, rows)
    width = max(map(len, rows))
    assert counter.count_rows(*_padded(rows, width, tok.pad_id)) == _decoded(tok, rows)
    whole = [r[:3] for r in rows]
    assert counter.count_rows(*_padded(whole, 3, tok.pad_id)) == _decoded(tok, whole)


@pytest.mark.skipif(not (TOKS / "mistral-7b").is_dir(), reason="../shared is absent")
def test_a_decoder_other_than_byte_level_is_decoded_for_real():
    from transforms.core.tokenizer import HF

    tok = build_tokenizer(read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "mistral-7b")))
    counter = DetokCounter(tok)
    assert counter._table is None
    rows = [tok.encode(t).tolist() for t in ("naïve café 🙂", "two  spaces", "x")]
    width = max(map(len, rows))
    assert counter.count_rows(*_padded(rows, width, 0)) == _decoded(tok, rows)
    assert counter.count(rows) == _decoded(tok, rows)


def test_added_tokens_decode_as_the_byte_level_decoder_has_them():
    """tokenizers' ByteLevel decoder applies to added tokens too: one whose every character stands for a byte
    ("Ā" stands for 0x00) decodes to those bytes; one with any other character ("a b", "x中y") to its text."""
    tok = build_tokenizer(read_tokenizer_files(GPT2, encoder_file=str(BUNDLED / "encoder.json"),
                                               vocab_file=str(BUNDLED / "vocab.bpe"), sep_token="ĀĀ",
                                               extra_special_tokens=("a b", "x中y", "Āz é")))
    counter = DetokCounter(tok)
    pieces = counter._table.pieces
    ids = {t: tok.token_to_id(t) for t in ("a b", "x中y", "Āz é")}
    assert pieces[tok.sep_id] == b"\0\0"
    assert [pieces[i] for i in ids.values()] == [t.encode("utf-8") for t in ids]
    rows = [tok.encode("a b").tolist() + [tok.sep_id] + tok.encode("c").tolist(), list(ids.values())]
    assert _decoded(tok, rows[:1]) == (6, 6)
    width = max(map(len, rows))
    assert counter.count_rows(*_padded(rows, width, tok.pad_id)) == _decoded(tok, rows)
    assert counter.count_rows(*_padded(rows[:1], len(rows[0]), tok.pad_id)) == (6, 6)  # a whole row


def test_a_vocabulary_with_an_id_beyond_its_size_has_no_table():
    """Ids that are not 0..size-1 (a gap) leave no table to index: the decoder counts."""
    import json

    chars = list(byte_stand_ins())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab[chars[-1]] = len(chars)  # the last byte's id jumps past the gap it leaves
    tok = build_tokenizer(TokenizerFiles(GPT2, encoder_json=json.dumps(vocab), merges="#version: 0.2\n", eos_id=0,
                                         name="gap"))
    counter = DetokCounter(tok)
    assert counter._table is None
    rows = [tok.encode("ab").tolist()]
    assert counter.count_rows(*_padded(rows, 2, 0)) == _decoded(tok, rows)


def test_whole_rows_whose_fields_would_need_65_bits_are_counted_without_codes(gpt2_counter):
    """At 131,071 ids a row's bytes and characters need 24 bits each and its count of split pieces 17: 65 bits,
    one too many for the packed codes. A row with exactly 2**16 split pieces would lose that count's top bit
    there (and its runs with it); it is counted exactly."""
    width = (1 << 17) - 1
    table = gpt2_counter._table
    assert table.codes(width) is None and table.codes(width - (1 << 16)) is not None
    split = int(np.flatnonzero(~table.whole)[0])
    plain = gpt2_counter._tok.encode(" the").tolist()[0]
    row = np.full(width, plain, dtype=np.int32)
    row[::2][:1 << 16] = split
    assert int((~table.whole[row]).sum()) == 1 << 16
    assert gpt2_counter.count_rows(row[None, :], np.array([width])) == _decoded(gpt2_counter._tok, [row])


def test_whole_rows_of_text_in_many_scripts(gpt2_counter):
    """Rows of real text in 50 languages, where GPT-2 splits nearly every non-Latin character into byte
    pieces: runs in nearly every row, decoded together, count what decoding each row counts."""
    import json

    corpus = ROOT.parent / "shared" / "corpora" / "multilingual_dev.jsonl"
    if not corpus.exists():
        pytest.skip("../shared/corpora is not here")
    texts = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    stream = np.concatenate([gpt2_counter._tok.encode(t) for t in texts]).astype(np.int32)
    rows = stream[: len(stream) // 512 * 512].reshape(-1, 512)
    assert (~gpt2_counter._table.whole[rows]).any(axis=1).mean() > 0.5
    lengths = np.full(len(rows), 512, dtype=np.int64)
    assert gpt2_counter.count_rows(rows, lengths) == gpt2_counter._slow(list(rows))
    cut = np.random.default_rng(1).integers(1, 512, len(rows))  # and cut anywhere, inside characters too
    assert gpt2_counter.count_rows(rows, cut) == gpt2_counter._slow([r[:k] for r, k in zip(rows, cut)])
