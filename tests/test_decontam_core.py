"""Decontamination's pure core (issue #47): the units text is compared in, the n-grams of an evaluation set, the
matches in training text, and NeMo Curator's cut."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import SHARED
from transforms.core.decontam import (CUT, PIECES_JOINED_BY, DecontamConfig, EvalIndex, ItemCatalog, build_index,
                                      capped, catalog_of, check_decontam, cut, cut_record, decontam_section,
                                      find_matches, item_ngrams, listing_record, merge_indexes, ngram_hashes, record_evidence, record_texts,
                                      unit_spans, units, verdict)
from transforms.core.dedup import node_of
from transforms.core.records import GroupId
from transforms.core.stats import Stats

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


# --- The evaluation files' indexes merged, and where each item is. ---

TEN = "one two three four five six seven eight nine ten"


def _same_index(a: EvalIndex, b: EvalIndex) -> None:
    assert a.lengths == b.lengths and (a.items, a.short) == (b.items, b.short)
    for length in a.lengths:
        assert np.array_equal(a.hashes[length], b.hashes[length]) and a.hashes[length].dtype == np.uint64
        assert np.array_equal(a.owners[length], b.owners[length]) and a.owners[length].dtype == np.int64


def test_a_catalog_names_each_items_file_line_and_field():
    """catalog_of: one file's items, their lines and fields (each distinct name once, in order of first use); the
    catalog is what build_index is given, and describe() names an item in plain ints and strings."""
    catalog = catalog_of("evals/a.jsonl", [1, 1, 3, 7], ["question", "answer", "question", "context"])
    assert catalog.sources == ("evals/a.jsonl",) and catalog.names == ("question", "answer", "context")
    assert catalog.starts.tolist() == [0] and catalog.starts.dtype == np.int64
    assert catalog.lines.tolist() == [1, 1, 3, 7] and catalog.lines.dtype == np.int64
    assert catalog.fields.tolist() == [0, 1, 0, 2] and catalog.fields.dtype == np.int32
    assert [catalog.describe(i) for i in range(4)] == [
        {"file": "evals/a.jsonl", "line": 1, "field": "question"},
        {"file": "evals/a.jsonl", "line": 1, "field": "answer"},
        {"file": "evals/a.jsonl", "line": 3, "field": "question"},
        {"file": "evals/a.jsonl", "line": 7, "field": "context"}]
    assert type(catalog.describe(3)["line"]) is int  # (the listing is JSON)
    empty = catalog_of("evals/empty.jsonl", [], [])
    assert empty.names == () and empty.lines.shape == (0,) and empty.fields.shape == (0,)
    assert empty.lines.dtype == np.int64 and empty.fields.dtype == np.int32
    config = DecontamConfig()
    index = build_index([QUESTION, "too short", TEN, QUESTION], config, catalog)
    assert index.catalog is catalog and (index.items, index.short) == (4, 1)
    assert build_index([QUESTION], config).catalog is None


def test_merged_indexes_are_the_index_of_all_items_in_file_order():
    """merge_indexes of each file's index is build_index over the files' items one after the other: the same
    hashes, owners (numbered across the files), items and short ones; an n-gram several files hold is owned by
    the first file's item, even where a later file's own ordinal is smaller."""
    config = DecontamConfig()
    a = [QUESTION, "too short", TEN]
    b = ["short again", "Context: " + QUESTION + " Answer it.", TEN.upper(),
         "alpha beta gamma delta epsilon zeta eta theta"]
    c = ["one more short one"]
    parts = [build_index(a, config), build_index(b, config), build_index([], config), build_index(c, config)]
    merged = merge_indexes(parts)
    _same_index(merged, build_index(a + b + c, config))
    assert (merged.items, merged.short, merged.lengths, len(merged)) == (8, 3, (8, 10, 13), 24)
    assert merged.catalog is None
    # TEN is file a's item 2 and file b's item 2 (5 in all): a's owns it; the 8-unit item is b's item 3 (6).
    assert merged.owners[10].tolist() == [2] and merged.owners[8].tolist() == [6]
    context = set(ngram_hashes([b[1]], 13)[0].tolist()) - set(ngram_hashes([QUESTION], 13)[0].tolist())
    assert len(context) == 3
    assert dict(zip(merged.hashes[13].tolist(), merged.owners[13].tolist())) == {
        h: 4 if h in context else 0 for h in ngram_hashes([b[1]], 13)[0].tolist()}
    # In the other order, b's items come first and own what they share.
    reverse = merge_indexes(parts[::-1])
    _same_index(reverse, build_index(c + [] + b + a, config))
    assert reverse.owners[10].tolist() == [3] and set(reverse.owners[13].tolist()) == {2}
    nothing = merge_indexes([])
    assert (nothing.hashes, nothing.items, nothing.short, nothing.catalog) == ({}, 0, 0, None)


def test_a_merged_catalog_names_items_across_file_boundaries():
    """The files' catalogs, one after the other: each item described by its own file (a file of no items in the
    middle takes none), its line, and its field (the names of all files, each once, renumbered)."""
    config = DecontamConfig()
    first = build_index([QUESTION, "too short", TEN], config,
                        catalog_of("a.jsonl", [1, 1, 2], ["question", "answer", "question"]))
    empty = build_index([], config, catalog_of("b.jsonl", [], []))
    last = build_index([TEN, QUESTION], config, catalog_of("c.jsonl", [5, 9], ["answer", "context"]))
    merged = merge_indexes([first, empty, last])
    catalog = merged.catalog
    assert isinstance(catalog, ItemCatalog) and catalog.sources == ("a.jsonl", "b.jsonl", "c.jsonl")
    assert catalog.starts.tolist() == [0, 3, 3] and catalog.lines.tolist() == [1, 1, 2, 5, 9]
    assert catalog.names == ("question", "answer", "context") and catalog.fields.tolist() == [0, 1, 0, 1, 2]
    assert catalog.fields.dtype == np.int32 and catalog.lines.dtype == np.int64
    assert [catalog.describe(i) for i in range(5)] == [
        {"file": "a.jsonl", "line": 1, "field": "question"}, {"file": "a.jsonl", "line": 1, "field": "answer"},
        {"file": "a.jsonl", "line": 2, "field": "question"}, {"file": "c.jsonl", "line": 5, "field": "answer"},
        {"file": "c.jsonl", "line": 9, "field": "context"}]
    assert merged.owners[10].tolist() == [2] and set(merged.owners[13].tolist()) == {0}
    # A catalog of one part of no items alone, and of a first part of no items.
    alone = merge_indexes([empty]).catalog
    assert alone.sources == ("b.jsonl",) and alone.names == () and alone.lines.tolist() == []
    assert alone.fields.dtype == np.int32
    again = merge_indexes([empty, last]).catalog
    assert again.starts.tolist() == [0, 0] and again.describe(0) == {"file": "c.jsonl", "line": 5, "field": "answer"}
    assert again.names == ("answer", "context") and again.fields.tolist() == [0, 1]


def test_indexes_with_and_without_a_catalog_are_not_merged():
    config = DecontamConfig()
    known = build_index([TEN], config, catalog_of("a.jsonl", [1], ["text"]))
    unknown = build_index([TEN], config)
    for parts in ([known, unknown], [unknown, known], [unknown, unknown, known]):
        with pytest.raises(ValueError) as e:
            merge_indexes(parts)
        assert str(e.value) == "merge_indexes: some parts have a catalog and others none"
    assert merge_indexes([unknown, unknown]).catalog is None


# --- A record's texts and evidence, the verdict, the listing, data_params.json and verify. ---

def test_a_records_texts_are_its_values_or_the_strings_inside_its_json_ones():
    assert record_texts(["plain", '{"a": "b"}'], [False, False]) == ["plain", '{"a": "b"}']
    conversation = ('{"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": '
                    '"Hello", "n": 3, "ok": true, "none": null, "w": 1.5}], "id": 7}')
    assert record_texts([conversation], [True]) == ["user", "Hi there", "assistant", "Hello"]
    nested = '[["a", ["b", 2, false]], {"c": {"d": "e"}, "key": []}, "f"]'
    assert record_texts(["first", nested, "last"], [False, True, False]) == ["first", "a", "b", "e", "f", "last"]
    assert record_texts(['"just text"', "3", "null", "{}"], [True] * 4) == ["just text"]
    assert record_texts(['{"a": "unfinished', "not json at all"], [True, True]) == ['{"a": "unfinished',
                                                                                    "not json at all"]
    assert record_texts([], []) == []


_EVAL = ["a b c d", "x y z", "b c d", "p q"]  # ngram 3: the last too short; "b c d" is item 0's


def _signed(text: str) -> list[int]:
    return ngram_hashes([text], 3)[0].view(np.int64).tolist()


def test_a_records_evidence_is_each_ngram_once_at_its_first_place():
    """Per record, each evaluation n-gram it holds once: (its hash as a signed int64, its owner, (text << 32) |
    first unit of its first place), in order of place; no n-gram runs from one text, or record, into the next."""
    config = DecontamConfig(ngram=3, min_ngram=3)
    index = build_index(_EVAL, config)
    assert (index.items, index.short) == (4, 1)
    abc, bcd, xyz = _signed("a b c")[0], _signed("b c d")[0], _signed("x y z")[0]
    assert bcd < 0 <= abc and xyz >= 0  # a hash of 2**63 or more is negative
    assert bcd == int(ngram_hashes(["b c d"], 3)[0][0]) - 2**64
    records = [["x y z then a b c", "b c d", "a b c again"],  # the second a b c is not evidence again
               ["a b", "c d"],  # not an n-gram: two texts
               [],
               ["nothing here", "q a b c d"],
               ["x y"], ["z"],  # nor across records
               ["b c d b c d"]]
    evidence = record_evidence(records, index)
    assert evidence == [
        [(xyz, 1, 0, 3), (abc, 0, 4, 3), (bcd, 0, 1 << 32, 3)],  # in order of place, not of owner
        [], [],
        [(abc, 0, (1 << 32) | 1, 3), (bcd, 0, (1 << 32) | 2, 3)],  # the record's own text index, not the batch's
        [], [],
        [(bcd, 0, 0, 3)]]
    assert all(type(h) is int for e in evidence for h, _, _, _ in e)
    assert record_evidence([], index) == [] and record_evidence([["a b c"]], EvalIndex({})) == [[]]
    # The first place of an n-gram found again in an earlier text of the record: the earlier one.
    assert record_evidence([["q q", "q b c d", "b c d"]], index) == [[(bcd, 0, (1 << 32) | 1, 3)]]


def test_evidence_hashes_become_signed_at_exactly_2_to_the_63(monkeypatch):
    """The unsigned hash's two's complement: 2**63 - 1 the last kept as it is, 2**63 the first made negative."""
    from transforms.core import decontam

    matches = [(0, 3, 2**63 - 1, 0), (1, 3, 2**63, 1), (2, 3, 2**64 - 1, 2), (3, 3, 0, 3)]
    monkeypatch.setattr(decontam, "find_matches", lambda texts, index: [list(matches)])
    assert record_evidence([["any text"]], EvalIndex({})) == [
        [(2**63 - 1, 0, 0, 3), (-2**63, 1, 1, 3), (-1, 2, 2, 3), (0, 3, 3, 3)]]


def test_an_ngrams_records_are_listed_up_to_the_cap():
    members = ["r1", "r2", "r3"]
    assert capped(3, members, 3) == (3, ["r1", "r2", "r3"])
    assert capped(3, members, 3)[1] is members
    assert capped(4, members + ["r4"], 3) == (4, [])
    assert capped(0, [], 3) == (0, []) and capped(1, ["r1"], 1) == (1, ["r1"]) and capped(2, ["r1"], 1) == (2, [])


def test_a_verdict_names_the_first_matchs_item_counts_ngrams_and_items_and_places_the_matches():
    evidence = [(-5, 2, 10, 13), (7, 1, 3, 13), (9, 1, 1 << 32, 8), (11, 2, 4, 13)]
    spans = ((0, 3, 13), (0, 4, 13), (0, 10, 13), (1, 0, 8))  # (text, first unit, length), in order
    assert verdict(evidence) == (1, 4, 2, spans)
    assert verdict([(-5, 3, 8, 13)]) == (3, 1, 1, ((0, 8, 13),))
    assert verdict([(1, 0, 6, 3), (2, 0, 5, 3), (1, 4, 7, 3)]) == (0, 2, 2, ((0, 5, 3), (0, 6, 3), (0, 7, 3)))
    assert verdict(list(reversed(evidence))) == (1, 4, 2, spans)
    # Two items' n-grams at the same first place (a 13-unit n-gram and a shorter item's whole one): the smaller
    # item, in any order the grouping gives them.
    tied = [(21, 4, 0, 13), (22, 2, 0, 9), (23, 3, 0, 13), (24, 1, 5, 13)]
    assert {verdict(order) for order in (tied, tied[::-1], tied[1:] + tied[:1])} == {
        (2, 4, 4, ((0, 0, 9), (0, 0, 13), (0, 5, 13)))}


def test_a_record_is_cut_value_by_value_and_removed_when_cut_too_often_or_to_nothing():
    config = DecontamConfig(margin=10, min_piece=21, max_splits=2)
    text = "a" * 21 + " " * 10 + "x y z" + " " * 10 + "b" * 21
    first = len(units("a" * 21))  # (the unit "x")
    assert cut_record((text, "other"), [(0, first, 3)], config) == ("a" * 21 + PIECES_JOINED_BY + "b" * 21, "other")
    assert cut_record((text,), [], config) == (text,)
    # Two values cut once each: two cuts in all, the most max_splits allows; a third anywhere is too many.
    assert cut_record((text, text), [(1, first, 3), (0, first, 1)], config) == (  # (10 characters past the "x")
        "a" * 21 + PIECES_JOINED_BY + " " * 4 + "b" * 21, "a" * 21 + PIECES_JOINED_BY + "b" * 21)
    three = text + " q " + "c" * 21
    assert cut_record((text, three), [(0, first, 1), (1, first, 1), (1, first + 4, 1)], config) is None
    assert cut_record(("x y z", text), [(0, 0, 3)], config) is None  # a value cut to nothing


def test_a_listing_line_names_the_record_the_reason_and_the_first_matchs_item():
    item = {"file": "evals/a.jsonl", "line": 3, "field": "question"}
    node = node_of(GroupId(2, 0, "/in/d/a.jsonl", "d/a.jsonl"), "", 41)
    assert listing_record(node, 42, item, 5, 2) == {
        "file": "d/a.jsonl", "line": 42, "step": "decontaminate", "reason": "contaminated", "item": item,
        "ngrams": 5, "items": 2}
    member = node_of(GroupId(2, 0, "/in/d/b.tar", "d/b.tar"), "x/y.txt", 0)
    assert listing_record(member, 1, item, 1, 1) == {
        "file": "d/b.tar", "member": "x/y.txt", "line": 1, "step": "decontaminate", "reason": "contaminated",
        "item": item, "ngrams": 1, "items": 1}


_SUMMARY = {"settings": {"ngram": 13, "min_ngram": 8, "action": "drop", "max_docs": 10},
            "evaluation": {"sets": ["gsm8k"], "files": 1, "items": 7, "items_too_short": 1, "ngrams": 99},
            "listed": 3, "matched": 12, "boilerplate": 2}


def test_the_decontamination_section_counts_the_removed_records_in_total_and_per_source():
    stats = Stats()
    stats.add("decontam.documents.contaminated", 2, "/in/b.jsonl")
    stats.add("decontam.characters.contaminated", 30, "/in/b.jsonl")
    stats.add("decontam.documents.contaminated", 1, "/in/a.jsonl")
    stats.add("decontam.characters.contaminated", 7, "/in/a.jsonl")
    stats.add("documents_read", 10, "/in/c.jsonl")  # no decontamination counter: not a source of the section
    stats.add("dropped.contaminated", 3, "/in/c.jsonl")
    stats.add("decontam.characters.other", 4, "/in/d.jsonl")  # a decontamination counter: a source, of 0 and 0
    section = decontam_section(_SUMMARY, stats)
    assert section == {
        "ngram": 13, "min_ngram": 8, "action": "drop", "max_docs": 10, "evaluation": _SUMMARY["evaluation"],
        "documents_removed": 3, "characters_removed": 37, "listed": 3, "ngrams_matched": 12, "ngrams_boilerplate": 2,
        "per_source": {"/in/a.jsonl": {"documents_removed": 1, "characters_removed": 7},
                       "/in/b.jsonl": {"documents_removed": 2, "characters_removed": 30},
                       "/in/d.jsonl": {"documents_removed": 0, "characters_removed": 0}}}
    assert list(section["per_source"]) == ["/in/a.jsonl", "/in/b.jsonl", "/in/d.jsonl"]
    # Counters as numpy ints (a batch's own) come out as plain ints: the section is JSON.
    numpy = Stats()
    numpy.totals["decontam.documents.contaminated"] = np.int64(3)
    numpy.totals["decontam.characters.contaminated"] = np.int64(9)
    numpy.sources["/in/a.jsonl"] = {"decontam.documents.contaminated": np.int64(3),
                                    "decontam.characters.contaminated": np.int64(9)}
    section = decontam_section(_SUMMARY, numpy)
    assert json.dumps(section) and section["per_source"]["/in/a.jsonl"] == {"documents_removed": 3,
                                                                          "characters_removed": 9}
    assert type(section["documents_removed"]) is int and type(section["characters_removed"]) is int
    none = decontam_section({**_SUMMARY, "listed": 0}, Stats())
    assert (none["documents_removed"], none["characters_removed"], none["listed"], none["per_source"]) == (0, 0, 0, {})


def test_the_decontamination_section_refuses_a_listing_that_disagrees():
    stats = Stats()
    stats.add("decontam.documents.contaminated", 2, "/in/a.jsonl")
    with pytest.raises(RuntimeError) as e:
        decontam_section(_SUMMARY, stats)
    assert str(e.value) == "decontamination: 2 records removed and 0 cut, 3 listed"
    with pytest.raises(RuntimeError, match="decontamination: 0 records removed and 0 cut, 3 listed"):
        decontam_section(_SUMMARY, Stats())


def test_with_the_cut_action_the_section_counts_the_records_cut_and_verify_recounts_them():
    stats = Stats()
    stats.add("decontam.documents.contaminated", 1, "/in/a.jsonl")
    stats.add("decontam.documents.cut", 2, "/in/b.jsonl")
    stats.add("decontam.characters.cut", 900, "/in/b.jsonl")
    summary = {**_SUMMARY, "settings": {**_SUMMARY["settings"], "action": CUT}}  # (3 listed)
    section = decontam_section(summary, stats)
    assert (section["documents_removed"], section["documents_cut"], section["characters_cut"]) == (1, 2, 900)
    assert section["per_source"]["/in/b.jsonl"] == {"documents_removed": 0, "characters_removed": 0,
                                                    "documents_cut": 2, "characters_cut": 900}
    inp = {"dropped_by_reason": {"contaminated": 1}}
    assert check_decontam(section, inp, {"contaminated": 1, "cut": 2}) == []
    assert check_decontam(section, inp, {"contaminated": 1, "cut": 1}) == [
        "filtered/decontaminate/ lists 1 records cut, decontamination.documents_cut is 2"]
    bad = {**section, "per_source": {"/in/a.jsonl": {"documents_removed": 1}}}
    assert check_decontam(bad, inp, {"contaminated": 1, "cut": 2}) == [
        "decontamination.per_source cuts 0 records, the total is 2"]
    dropping = Stats()
    dropping.add("decontam.documents.contaminated", 3, "/in/a.jsonl")
    assert "documents_cut" not in decontam_section(_SUMMARY, dropping)  # (drop's section as it was)


def test_verify_checks_each_count_of_the_decontamination_section():
    """check_decontam: every count that disagrees named once; sections, inputs and listings missing parts count
    0 (and a section without `listed` is named)."""
    fine = {"documents_removed": 2, "listed": 2, "per_source": {"a": {"documents_removed": 1},
                                                                "b": {"documents_removed": 1}}}
    inp = {"dropped_by_reason": {"contaminated": 2, "duplicate_exact": 5}}
    assert check_decontam(fine, inp, {"contaminated": 2}) == []
    # A listing of the right size, of another reason in part.
    assert check_decontam(fine, inp, {"contaminated": 1, "duplicate_exact": 1}) == [
        "filtered/decontaminate/ lists 2 records (1 contaminated), decontamination.documents_removed is 2"]
    assert check_decontam(fine, inp, {}) == [
        "filtered/decontaminate/ lists 0 records (0 contaminated), decontamination.documents_removed is 2"]
    assert check_decontam(fine, inp, {"contaminated": 3}) == [
        "filtered/decontaminate/ lists 3 records (3 contaminated), decontamination.documents_removed is 2"]
    assert check_decontam({}, {}, None) == ["decontamination.listed is None, 0 records were removed"]
    assert check_decontam({"listed": 0}, {"dropped_by_reason": {"duplicate_exact": 1}}, {}) == []
    assert check_decontam({"listed": 0, "per_source": {"a": {}}}, {}, None) == []
    odd = {"documents_removed": 1, "listed": 1, "per_source": {"a": {"characters_removed": 4}}}
    assert check_decontam(odd, {"dropped_by_reason": {"contaminated": 1}}, {"contaminated": 1}) == [
        "decontamination.per_source removes 0 records, the total is 1"]
    # Every count wrong at once: each problem named, in order.
    wrong = {"documents_removed": 3, "listed": 2, "per_source": {"a": {"documents_removed": 1}}}
    assert check_decontam(wrong, {"dropped_by_reason": {"contaminated": 4}}, None) == [
        "decontamination.documents_removed is 3, input.dropped_by_reason.contaminated is 4",
        "decontamination.per_source removes 1 records, the total is 3",
        "decontamination.listed is 2, 3 records were removed",
        "decontamination: the removed records are not listed (no filtered/decontaminate/ directory)"]


# --- What bounds the memory of indexing and matching: slices of records, the filter's size. ---

def test_slices_end_at_the_item_that_reaches_the_limit_and_the_last_holds_the_rest():
    from transforms.core.decontam import slices

    assert list(slices([3, 2, 5, 1], 5)) == [(0, 2), (2, 3), (3, 4)]
    assert list(slices([5, 4, 1], 5)) == [(0, 1), (1, 3)]  # each run counted from 0
    assert list(slices([4, 5], 10)) == [(0, 2)]  # the rest, under the limit
    assert list(slices([5], 5)) == [(0, 1)] and list(slices([], 5)) == []  # no empty run after the last
    assert list(slices([0, 0, 7, 0], 1)) == [(0, 3), (3, 4)]


def test_an_index_is_built_a_slice_of_items_at_a_time(monkeypatch):
    """build_index hands _index_slice runs of items of SLICE_CHARS characters or more (each run's items
    numbered after the last's), the rest last; the index is the same as of one run."""
    from transforms.core import decontam

    config = DecontamConfig(ngram=2, min_ngram=1)
    items = ["aaaa", "bb cc", "d", "aaaa", "bb cc", "d", "eee"]  # 4 + 5 + 1 characters: 10, twice, and 3
    whole = build_index(items, config)
    calls = []
    original = decontam._index_slice

    def spy(texts, first, config, found):
        calls.append((list(texts), first))
        return original(texts, first, config, found)

    monkeypatch.setattr(decontam, "_index_slice", spy)
    monkeypatch.setattr(decontam, "SLICE_CHARS", 10)
    sliced = build_index(items, config)
    assert calls == [(items[:3], 0), (items[3:6], 3), (items[6:], 6)]
    _same_index(sliced, whole)
    assert dict(zip(sliced.hashes[2].tolist(), sliced.owners[2].tolist())) == {
        int(ngram_hashes(["bb cc"], 2)[0][0]): 1}
    assert {int(h): o for h, o in zip(sliced.hashes[1], sliced.owners[1])} == {
        int(ngram_hashes([t], 1)[0][0]): o for t, o in (("aaaa", 0), ("d", 2), ("eee", 6))}


def test_items_without_units_at_the_end_are_counted_short():
    """An item of no units (empty, punctuation) is too short wherever it is: last in its slice too, and among
    items in other scripts."""
    config = DecontamConfig()
    index = build_index([TEN, "", " ,.;"], config)
    assert (index.items, index.short, len(index)) == (3, 2, 1)
    index = build_index(["日本語のテキスト、です。" * 2, TEN, ""], config)
    assert (index.items, index.short, index.lengths) == (3, 1, (10, 13))
    h, text_of, first = ngram_hashes(["a b", "", "日本"], 1)
    assert text_of.tolist() == [0, 0, 2, 2] and first.tolist() == [0, 1, 0, 1]


def test_the_filter_grows_with_the_index_from_24_to_30_bits():
    from transforms.core.decontam import _filter_bits

    assert [_filter_bits(n) for n in (0, 1, 2**19 - 1, 2**19, 2**24, 2**25 - 1, 2**25, 2**40)] == [
        24, 24, 24, 25, 30, 30, 30, 30]
