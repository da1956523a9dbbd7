"""Decontamination's pure core (issue #47): the units text is compared in, the n-grams of an evaluation set, the
matches in training text, and NeMo Curator's cut."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import SHARED
from transforms.core.decontam import (CUT, DecontamConfig, EvalIndex, build_index, cut, find_matches, item_ngrams,
                                      ngram_hashes, unit_spans, units)

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How "
            "many clips did Natalia sell altogether in April and May?")  # GSM8K's first training question


def test_units_fold_case_delete_punctuation_and_split_on_any_space():
    assert units("Hello, World!\tDon't re-wrap\nthis…  ") == ["hello", "world", "dont", "rewrap", "this"]
    assert units("Straße ΣΊΣΥΦΟΣ") == ["strasse", "σίσυφοσ"]  # case folded, not lower-cased
    assert units("x\u00ady a\u200bb 3.14 $5 50% ❤️ e=mc²") == ["xy", "ab", "314", "5", "50", "emc²"]
    assert units("a\x00b\x1fc\u2028d\u3000e") == ["a", "b", "c", "d", "e"]  # controls and separators are spaces
    assert units("") == [] and units(" ,.;\n") == []


def test_units_of_scripts_without_spaces_are_their_characters():
    assert units("日本語のテキスト、です。") == ["日", "本", "語", "の", "テ", "キ", "ス", "ト", "で", "す"]
    assert units("ที่นี่") == ["ท", "น"]  # Thai: each consonant a unit, its vowel and tone marks deleted
    assert units("abc中文def") == ["abc", "中", "文", "def"]
    assert units("한국어 텍스트") == ["한국어", "텍스트"]  # Korean is written with spaces: words


def _texts() -> list[str]:
    texts = [QUESTION, "Hello, World! Don't re-wrap\nthis.  日本語 ที่นี่ x\u00ady —dash— ‘quoted’ …", "", "   ",
             "a", "中", "e\u0301te\u0301 café", "¿Qué? ¡Sí!"]
    path = SHARED / "corpora" / "multilingual_dev.jsonl"
    if path.exists():
        with open(path, encoding="utf-8") as f:
            texts += [json.loads(line)["text"][:3000] for _, line in zip(range(60), f)]
    return texts


def test_unit_spans_are_where_each_unit_is():
    """Each span of the original text holds exactly its unit, and the spans in order are the units."""
    for text in _texts():
        spans = unit_spans(text)
        assert [u for a, b in spans for u in units(text[a:b])] == units(text), text[:80]
        assert all(units(text[a:b]) == [u] for (a, b), u in zip(spans, units(text)))
        assert all(0 <= a < b <= len(text) for a, b in spans)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    assert unit_spans("  Don't, re-wrap!") == [(2, 7), (9, 16)]


def test_an_items_rewrappings_have_its_ngrams():
    base = ngram_hashes([QUESTION], 13)[0]
    assert len(base) == len(units(QUESTION)) - 12 == 19
    for variant in (QUESTION.upper(), QUESTION.replace(" ", "\n"), QUESTION.replace(",", "").replace("?", "!"),
                    "  " + QUESTION.replace(". ", ".\n\n") + "\n", QUESTION.replace("48", " 48 ")):
        assert np.array_equal(ngram_hashes([variant], 13)[0], base), variant
    assert not set(ngram_hashes([QUESTION.replace("clips", "pins")], 13)[0].tolist()) & {int(base[0])}
    swapped = "Sold Natalia" + QUESTION[len("Natalia sold"):]
    assert ngram_hashes([swapped], 13)[0][0] != base[0]  # the order of units counts
    assert not set(ngram_hashes([QUESTION], 12)[0].tolist()) & set(base.tolist())  # so does the length


def test_ngrams_of_a_batch_are_each_texts_own():
    """Hashing texts in one batch gives what hashing each alone gives: no n-gram crosses from a text to the
    next, and the index and first unit of each say where it is."""
    texts = ["one two three", "four five six seven", "", QUESTION, "eight nine"]
    h, text_of, first = ngram_hashes(texts, 3)
    assert text_of.tolist() == [0] + [1, 1] + [3] * 29
    assert first.tolist() == [0] + [0, 1] + list(range(29))
    for t, text in enumerate(texts):
        alone = ngram_hashes([text], 3)[0]
        assert np.array_equal(h[text_of == t], alone)
    none = ngram_hashes(["a b c d"], 5)
    assert [len(x) for x in none] == [0, 0, 0] and [x.dtype for x in none] == [np.uint64, np.int64, np.int64]
    assert ngram_hashes([], 13)[0].dtype == np.uint64
    assert [len(x) for x in ngram_hashes(["", " ,.", ""], 1)] == [0, 0, 0]  # texts without units: no n-gram
    one, text_of, _ = ngram_hashes(["", "word", ""], 1)
    assert len(one) == 1 and text_of.tolist() == [1]


def test_distinct_units_hash_apart():
    """Every distinct unit of 60 multilingual documents has its own hash (a unit's length and each byte's place
    count), and an n-gram's hash depends on each unit and its place."""
    words = sorted({w for t in _texts() for w in units(t)})
    assert len(words) > 1000
    hashes = [int(ngram_hashes([w], 1)[0][0]) for w in words]
    assert len(set(hashes)) == len(words)
    pairs = ["ab ba", "ab abab", "a aa", "x\u00e9 xe"]
    for pair in pairs:
        a, b = pair.split()
        assert ngram_hashes([a], 1)[0][0] != ngram_hashes([b], 1)[0][0], pair


def test_items_of_13_units_or_more_give_their_ngrams_shorter_ones_themselves_and_under_8_none():
    config = DecontamConfig()
    length, hashes = item_ngrams(QUESTION, config)
    assert length == 13 and np.array_equal(hashes, ngram_hashes([QUESTION], 13)[0])
    ten = "one two three four five six seven eight nine ten"
    length, hashes = item_ngrams(ten, config)
    assert length == 10 and np.array_equal(hashes, ngram_hashes([ten], 10)[0]) and len(hashes) == 1
    assert item_ngrams("one two three four five six seven eight", config)[0] == 8
    length, hashes = item_ngrams("one two three four five six seven", config)
    assert (length, len(hashes), hashes.dtype) == (0, 0, np.uint64)
    index = build_index([QUESTION, ten, "too short", QUESTION.upper(), "also short"], config)
    assert (index.items, index.short, index.lengths, len(index)) == (5, 2, (10, 13), 20)
    assert DecontamConfig(min_ngram=1).min_ngram == 1 and DecontamConfig(min_ngram=13).min_ngram == 13


def test_planted_items_are_found_and_near_misses_are_not():
    config = DecontamConfig()
    ten = "the quick brown fox jumps over the lazy sleeping dog"
    index = build_index([QUESTION, ten], config)
    words = QUESTION.split()
    texts = [
        "Before it. " + QUESTION + " After it.",  # verbatim inside a longer document
        "\n".join(words).lower(),  # re-wrapped, re-cased
        QUESTION.replace(",", ";").replace("?", "."),  # punctuation changed
        " ".join(words[:12]) + " X " + " ".join(words[12:24]) + " Y",  # no 13 words in a row
        "The quick, brown fox jumps over the lazy sleeping dog!",  # the short item, whole
        "the quick brown fox jumps over the lazy dog",  # 9 of its 10 units
        "",
    ]
    found = find_matches(texts, index)
    assert [len(f) for f in found] == [19, 19, 19, 0, 1, 0, 0]
    assert found[0][0][:2] == (2, 13) and found[4] == [(0, 10, found[4][0][2], 1)]
    assert {m[3] for m in found[0] + found[1] + found[2]} == {0}  # the question's n-grams are item 0's
    assert find_matches(texts, EvalIndex({})) == [[]] * len(texts)


def test_an_ngram_is_owned_by_the_first_item_that_holds_it():
    """Two items sharing n-grams (a question copied into another's context): the shared ones name the first, the
    second's own name it; the tables are sorted and distinct."""
    config = DecontamConfig()
    other = "Context: " + QUESTION + " Answer carefully and show every step of the work please."
    index = build_index(["too short", QUESTION, other], config)
    table, owners = index.hashes[13], index.owners[13]
    assert (np.diff(table.astype(object)) > 0).all() and len(owners) == len(table)
    mine, theirs = set(ngram_hashes([QUESTION], 13)[0].tolist()), set(ngram_hashes([other], 13)[0].tolist())
    assert dict(zip(table.tolist(), owners.tolist())) == {h: 1 if h in mine else 2 for h in mine | theirs}
    with pytest.raises(KeyError, match="2 of the hashes are not in the index"):
        index.owners_of(13, np.array([table[0], table[0] ^ np.uint64(1), table[1] ^ np.uint64(1)], dtype=np.uint64))


def test_the_index_holds_exactly_its_hashes():
    """The filter before the search never loses a hash, and a hash with another's top bits is not taken for it."""
    rng = np.random.default_rng(7)
    table = np.unique(rng.integers(0, 2**63, size=5000, dtype=np.uint64) * np.uint64(2))
    index = EvalIndex({13: table})
    near = table[:100] ^ np.uint64(1)  # the same top bits, another hash
    above = table[-1:] + np.uint64(1)  # beyond the last hash of the table, with its top bits
    probe = np.concatenate((table[::7], near, above,
                            rng.integers(0, 2**63, size=2000, dtype=np.uint64) | np.uint64(1)))
    assert np.array_equal(index.holds(13, probe), np.isin(probe, table))
    assert index.holds(13, probe).sum() == len(table[::7]) and index.holds(13, probe).dtype == bool
    assert not index.holds(12, probe).any() and index.holds(12, probe).dtype == bool
    assert index.holds(13, probe[:0]).shape == (0,)
    # The filter passes exactly the hashes whose top 24 bits one of the table's has: few of the random ones.
    tops = set((table >> np.uint64(40)).tolist())
    assert index._maybe(probe).tolist() == [t in tops for t in (probe >> np.uint64(40)).tolist()]
    assert index._maybe(probe).sum() < len(table[::7]) + len(near) + 1 + 50


def test_cut_takes_each_match_and_its_margins_and_keeps_long_pieces():
    config = DecontamConfig(action=CUT, margin=10, min_piece=20, max_splits=2)
    left, right = "a" * 30 + " ", " " + "b" * 30
    text = left + "x1 x2 x3" + right
    first = len(units(left))
    assert cut(text, [(first, 3)], config) == ["a" * 21, "b" * 21]  # 10 characters each side go with the match
    assert cut(text, [], config) == [text]
    assert cut(text, [(first, 3)], DecontamConfig(margin=10, min_piece=22)) is None  # both pieces too short
    assert cut(text, [(first, 1), (first + 2, 1)], config) == ["a" * 21, "b" * 21]  # overlapping cuts are one
    three = left + "x1" + " c " * 20 + "x2" + " d " * 20 + "x3" + right
    spots = [(first, 1), (first + 21, 1), (first + 42, 1)]  # x1, x2, x3: 20 units between each
    x1, x2 = three.index("x1"), three.index("x2")
    assert cut(three, spots, config) is None  # cut 3 times, more than max_splits
    assert cut(three, spots[:2], config) == [three[:x1 - 10], three[x1 + 12:x2 - 10], three[x2 + 12:]]
    assert cut(three, spots[:2], DecontamConfig(margin=10, min_piece=41)) == [three[x2 + 12:]]
    assert cut(three, spots[:2], DecontamConfig(margin=10, min_piece=40)) == [three[x1 + 12:x2 - 10],
                                                                            three[x2 + 12:]]  # 40 long: kept
    at_start = "x1 " + "b" * 30
    assert cut(at_start, [(0, 1)], DecontamConfig(margin=2, min_piece=1)) == [at_start[4:]]  # nothing before it
    # Regions that only touch are one cut: x1's reaches 10 past it, exactly where x2's begins.
    touching = left + "x1" + " " * 20 + "x2" + right
    assert cut(touching, [(first, 1), (first + 1, 1)], DecontamConfig(margin=10, min_piece=20, max_splits=1)) == [
        left[:21], "b" * 21]


def test_a_config_refuses_what_cannot_be_run():
    with pytest.raises(ValueError, match="min_ngram 14 must be between 1 and ngram 13"):
        DecontamConfig(min_ngram=14)
    with pytest.raises(ValueError, match="action 'trim': expected one of drop, cut"):
        DecontamConfig(action="trim")
    with pytest.raises(ValueError, match="margin must be >= 0, got -1"):
        DecontamConfig(margin=-1)
    with pytest.raises(ValueError, match="min_ngram 0 must be between 1 and ngram 13"):
        DecontamConfig(min_ngram=0)
    zero = DecontamConfig(max_docs=1, margin=0, min_piece=0, max_splits=0)  # each may be 0
    assert (zero.max_docs, zero.margin, zero.min_piece, zero.max_splits) == (1, 0, 0, 0)
    with pytest.raises(ValueError, match="max_docs must be >= 1, got 0"):  # (0: no n-gram would be evidence)
        DecontamConfig(max_docs=0)
