"""The vectorized paths of transforms/core/decontam.py against their definitions: a batch's units and hashes
are `units` and `unit_hashes` of each text (ASCII and other texts, mixed in any order); an index built a slice
at a time is the index of each item's `item_ngrams`; evidence found a slice at a time is the same at any slice
size."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tests.helpers import SHARED, require_shared
from transforms.core import decontam as D

EDGES = ["", "   ", "!!!", "a", "日本語のテキスト", "don't stop", "x\u0301y", "ﬁne ß straße İstanbul ΣΑΣ ς",
         "\x00a\x00b", "tab\there\r\nnew\u2028line", "emoji 👍🏽 and keycap 1\ufe0f\u20e3 ok", "ไทย ภาษา", "-- a--b --",
         "Ǆ ǅ ǆ", "\ud800 lone"]


@pytest.fixture(scope="module")
def texts():
    found = []
    for name in ("multilingual_dev.jsonl", "en_small_pd.jsonl"):
        path = require_shared(SHARED / "corpora" / name)
        found += [json.loads(x)["text"] for x in path.read_text().split("\n") if x][:300]
    rng = random.Random(47)
    mixed = found + EDGES
    rng.shuffle(mixed)
    return mixed


def _reference(texts):
    per_text = [D.units(t) for t in texts]
    return D.unit_hashes([w for ws in per_text for w in ws]), [len(ws) for ws in per_text]


def test_a_batchs_units_are_each_texts_units_in_order(texts):
    assert any(t.isascii() for t in texts) and not all(t.isascii() for t in texts)
    for lo in range(0, len(texts), 41):
        chunk = texts[lo:lo + 41]
        hashes, counts = D._batch_units(chunk)
        want, want_counts = _reference(chunk)
        assert counts.tolist() == want_counts
        assert hashes.dtype == np.uint64 and np.array_equal(hashes, want)


@pytest.mark.parametrize("chunk", [[], ["!!"], ["plain ascii only"], ["ünï"], ["a b", "ü", "c d e"]])
def test_small_batches_of_either_kind(chunk):
    hashes, counts = D._batch_units(chunk)
    want, want_counts = _reference(chunk)
    assert counts.tolist() == want_counts and np.array_equal(hashes, want)
    assert counts.dtype == np.int64 and len(counts) == len(chunk)


def test_unit_hashes_tell_units_apart_and_repeat_themselves():
    words = ["a", "b", "ab", "ba", "aa", "日", "日本", "ß", "ss", "x\u0301"]
    hashes = D.unit_hashes(words)
    assert len(set(hashes.tolist())) == len(words)
    assert np.array_equal(D.unit_hashes(words + words)[len(words):], hashes)
    assert D.unit_hashes([]).dtype == np.uint64 and len(D.unit_hashes([])) == 0


def _index_by_items(items, config):
    found = {}
    short = 0
    for ordinal, text in enumerate(items):
        length, hashes = D.item_ngrams(text, config)
        if not length:
            short += 1
            continue
        found.setdefault(length, []).append((hashes, np.full(len(hashes), ordinal, dtype=np.int64)))
    return D._tables(found), short


@pytest.mark.parametrize("slice_chars", [1, 500, 1 << 20])
def test_an_index_built_a_slice_at_a_time_is_each_items_ngrams(texts, monkeypatch, slice_chars):
    monkeypatch.setattr(D, "SLICE_CHARS", slice_chars)
    rng = random.Random(1)
    items = []
    for t in texts[:120]:
        words = t.split()
        items.append(" ".join(words[:rng.choice([3, 8, 10, 12, 13, 20, 40])]))
    items += ["one two three four five six seven eight"] * 2  # the same item twice: the first owns it
    config = D.DecontamConfig()
    index = D.build_index(items, config)
    (tables, owners), short = _index_by_items(items, config)
    assert index.items == len(items) and index.short == short
    assert sorted(index.hashes) == sorted(tables)
    for length in tables:
        assert np.array_equal(index.hashes[length], tables[length])
        assert np.array_equal(index.owners[length], owners[length])
    assert set(index.lengths) >= {8, 10, 12, 13}


@pytest.mark.parametrize("slice_chars", [1, 300, 1 << 20])
def test_evidence_is_the_same_at_any_slice_size(texts, slice_chars):
    items = [" ".join(t.split()[5:25]) for t in texts[:60] if len(t.split()) > 30]
    index = D.build_index(items, D.DecontamConfig())
    records = [[t] for t in texts[:80]] + [[], ["a", texts[3]], [texts[4], texts[4]]]
    whole = D.record_evidence(records, index, slice_chars=1 << 30)
    assert sum(map(len, whole)) > 0
    assert D.record_evidence(records, index, slice_chars=slice_chars) == whole


def test_the_code_points_the_table_skips_are_unassigned_or_private():
    """_table looks at _ASSIGNED only: every other code point is Cn or Co, which it would keep as a letter."""
    import unicodedata

    looked = {cp for r in D._ASSIGNED for cp in r}
    others = {unicodedata.category(chr(cp)) for cp in range(0x110000) if cp not in looked}
    assert others <= {"Cn", "Co"}
    assert D._classes()[0x10FFFD] == D._WORD and D._classes()[0xE0001] == D._GONE  # private use; a tag
