"""Quality filters (issue #47): Gopher's, C4's and FineWeb's rules (transforms/core/quality.py) against
datatrove's filters on real corpora, every decision (and every text C4 cuts); and the stage through the job:
counted per rule, listed, recounted by verify, before decontamination; the settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import numpy as np

from tests.helpers import RUNNER, SHARED, read_rows, require_shared, run_job, verify_problems
from transforms.core import quality as Q
from transforms.core.stats import Stats

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]
CORPORA = ("en_small_pd.jsonl", "code_small.jsonl", "multilingual_dev.jsonl")


def _texts() -> list[str]:
    """Half of the English prose and of the code, a third of the multilingual corpus (spaCy and datatrove split
    a megabyte a second)."""
    texts = []
    for name in CORPORA:
        path = require_shared(SHARED / "corpora" / name)
        found = [json.loads(x)["text"] for x in path.read_text().split("\n") if x]
        texts += found[::3] if name.startswith("multilingual") else found[::2]
    return texts


# ------------------------------------------------------------------- the rules


def _words(n: int, word: str = "word") -> list[str]:
    return [word] * n


def test_each_rule_removes_for_its_reason_in_order():
    g = Q.GopherQuality()
    stop = ["the", "and"]
    fine = _words(60, "house") + stop
    text = " ".join(fine)
    assert g.check(text, fine) is None
    assert g.check(text, _words(49) + ["!!", "--"]) == "gopher_short_doc"  # symbol words are not counted
    assert g.check(text, _words(100001)) == "gopher_long_doc"
    assert g.check(text, _words(60, "ab") + stop) == "gopher_below_avg_threshold"
    assert g.check(text, _words(60, "abcdefghijkl") + stop) == "gopher_above_avg_threshold"
    assert g.check("#" * 7 + text, fine) == "gopher_too_many_hashes"  # 7 of 62 words: more than 0.1
    assert g.check("#" * 6 + text, fine) is None  # 6 / 62 < 0.1
    assert g.check("... " * 4 + "… " * 3 + text, fine) == "gopher_too_many_ellipsis"
    bullets = "\n".join(["- " + text] * 10)
    assert g.check(bullets, fine) == "gopher_too_many_bullets"
    assert g.check("\n".join([" • a"] * 9 + ["b"]), fine) is None  # 0.9: not more than 0.9
    assert g.check("\n".join(["a..."] * 4 + ["b"] * 6), fine) == "gopher_too_many_end_ellipsis"
    assert g.check(text, _words(60, "house") + stop + ["12345"] * 20) == "gopher_below_alpha_threshold"
    assert g.check(text, _words(62, "house")) == "gopher_enough_stop_words"
    assert g.check(text, _words(61, "house") + ["the"]) == "gopher_enough_stop_words"  # two needed


def test_each_rule_lets_a_record_at_its_bound_through():
    """datatrove's comparisons, strict: a record exactly at a bound is kept by every rule."""
    g = Q.GopherQuality(min_stop_words=None, max_non_alpha_words_ratio=None)
    at = _words(50, "abcd")
    assert g.check(" ".join(at), at) is None and g.check("x", _words(49, "abcd")) == "gopher_short_doc"
    assert Q.GopherQuality(max_doc_words=50, min_stop_words=None).check("x", at) is None
    assert Q.GopherQuality(max_doc_words=49, min_stop_words=None).check("x", at) == "gopher_long_doc"
    mean3, mean10 = _words(50, "abc"), _words(50, "abcdefghij")  # mean lengths 3 and 10: both kept
    assert g.check("x", mean3) is None and g.check("x", mean10) is None
    text = " ".join(at)
    assert g.check("#" * 5 + text, at) is None and g.check("#" * 6 + text, at) == "gopher_too_many_hashes"
    assert g.check("..." * 3 + "…" * 2 + text, at) is None  # 5 of 50: 0.1, not more
    assert g.check("..." * 3 + "…" * 3 + text, at) == "gopher_too_many_ellipsis"
    lines = ["  • a", "\t- b", " •c", "- d", "•e", "  -f", "• g", " - h", "•i", "  •j"]  # (indented bullets count)
    assert g.check("\n".join(lines), at) == "gopher_too_many_bullets"
    assert g.check("\n".join(["• a"] * 10), at) == "gopher_too_many_bullets"
    ends = ["a… ", "b...  ", "c", "d", "e", "f", "g", "h", "i", "j"]  # (trailing spaces left out: 3 of 10 is 0.3)
    assert g.check("\n".join(ends[:2] + ["k…"] + ends[3:]), at) is None
    assert g.check("\n".join(ends[:2] + ["k…", "l…\t"] + ends[4:]), at) == "gopher_too_many_end_ellipsis"


def test_without_spacy_the_filters_say_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "spacy", None)
    with pytest.raises(RuntimeError, match=r"^the quality filters split words with spaCy: pip install "
                                           r"'create_hdf5_dataset\[filters\]' \(or spacy>=3\.8\)$"):
        Q._spacy()


def test_a_rule_set_to_none_is_left_out():
    g = Q.GopherQuality(min_doc_words=None, min_stop_words=None)
    assert g.check("a b", ["house", "cat"]) is None
    assert g.check("", []) is None  # nothing to measure
    # Only symbol words: no mean length to refuse (datatrove's is NaN), the letters' rule refuses it.
    assert g.check("!! ??", ["!!", "??"]) == "gopher_below_alpha_threshold"
    assert Q.GopherQuality(min_doc_words=None, max_non_alpha_words_ratio=None, min_stop_words=None).check(
        "!!", ["!!"]) is None


def test_symbol_words_are_made_of_punctuation_symbols_and_controls():
    assert all(Q.is_symbol_word(w) for w in ("!!", "--", "…", "©", "€", "─", "\x07", "‘"))
    assert not any(Q.is_symbol_word(w) for w in ("a!", "１", "x", "日本", "'s"))


def test_a_filter_is_made_from_its_name_and_settings():
    assert Q.filter_config("gopher_quality") == Q.GopherQuality()
    made = Q.filter_config("gopher_quality", {"min_doc_words": 10, "stop_words": ["a", "b"]})
    assert made.min_doc_words == 10 and made.stop_words == ("a", "b")
    with pytest.raises(ValueError, match="quality filter 'c5': expected one of c4_quality, fineweb_quality, "
                                         "gopher_quality, gopher_repetition"):
        Q.filter_config("c5")
    with pytest.raises(ValueError, match="quality filter gopher_quality: unknown setting min_words"):
        Q.filter_config("gopher_quality", {"min_words": 3})


def test_judge_asks_each_filter_in_order_on_the_text_the_ones_before_left():
    class Never:
        name, needs_words, cuts_lines = "never", False, False

        def check(self, text, words):
            return None

    class Always(Never):
        name, needs_words = "always", True

        def check(self, text, words):
            assert words == Q.words_of(text)
            return "rule"

    class Short(Never):  # removes a text of fewer than 5 words
        name, needs_words = "short", True

        def check(self, text, words):
            return "short" if len(words) < 5 else None

    assert Q.judge([Never()], "x") == Q.Judgement()
    assert Q.judge([Never(), Always()], "x") == Q.Judgement(("always", "rule"))
    assert Q.judge([Always(), Never()], "x") == Q.Judgement(("always", "rule"))
    c4 = Q.C4Quality(min_num_sentences=1)
    text = "One two three four.\nno end here\nFive six seven [2] eight."
    assert Q.judge([Short(), c4, Never()], text) == Q.Judgement(
        None, "One two three four.\nFive six seven  eight.", (("c4_quality", {"no_terminal_punc": 1}),))
    assert Q.judge([Short()], "A b c.\nx y") == Q.Judgement()  # 6 words
    assert Q.judge([c4, Short()], "A b c.\nx y") == Q.Judgement(("short", "short"))  # 4 words once cut
    assert Q.judge([c4], "Just one line here.") == Q.Judgement()  # nothing to cut


def test_the_section_and_verify_count_each_rule():
    stats = Stats()
    stats.add("quality.gopher_quality.gopher_short_doc", 2, "/in/a.jsonl")
    stats.add("quality.gopher_quality.gopher_enough_stop_words", 1, "/in/b.jsonl")
    settings = {"gopher_quality": {"min_doc_words": 50}}
    section = Q.quality_section({"settings": settings, "listed": 3}, stats)
    assert section == {"filters": {"gopher_quality": {"min_doc_words": 50, "documents_removed": {
        "gopher_short_doc": 2, "gopher_enough_stop_words": 1}}}, "documents_removed": 3, "documents_cut": 0,
        "listed": 3,
        "per_source": {"/in/a.jsonl": {"documents_removed": 2}, "/in/b.jsonl": {"documents_removed": 1}}}
    with pytest.raises(RuntimeError, match="3 records removed and 0 cut, 4 listed"):
        Q.quality_section({"settings": settings, "listed": 4}, stats)
    inp = {"dropped_by_reason": {"gopher_short_doc": 2, "gopher_enough_stop_words": 1}}
    assert Q.check_quality(section, inp, {"gopher_short_doc": 2, "gopher_enough_stop_words": 1}) == []
    assert Q.check_quality(section, {"dropped_by_reason": {"gopher_short_doc": 1}}, None) == [
        "quality.filters.gopher_quality.documents_removed.gopher_short_doc is 2, input.dropped_by_reason."
        "gopher_short_doc is 1",
        "quality.filters.gopher_quality.documents_removed.gopher_enough_stop_words is 1, input.dropped_by_reason."
        "gopher_enough_stop_words is 0",
        "quality: the removed records are not listed (no filtered/quality/ directory)"]
    bad = {**section, "documents_removed": 4, "listed": 2, "per_source": {}}
    assert Q.check_quality(bad, inp, {"x": 1}) == [
        "quality.documents_removed is 4, its filters' rules add up to 3",
        "quality.per_source removes 0 records, the total is 3",
        "quality.listed is 2, 3 records were removed",
        "filtered/quality/ lists 1 records, quality.documents_removed is 3"]


def test_the_section_and_verify_count_the_records_cut():
    stats = Stats()
    stats.add("quality.c4_quality.too_few_sentences", 1, "/in/a.jsonl")
    for name, n in (("documents", 2), ("c4_quality.documents", 2), ("c4_quality.characters", 40),
                    ("c4_quality.lines.policy", 1), ("c4_quality.lines.no_terminal_punc", 3)):
        stats.add("quality_cut." + name, n)
    section = Q.quality_section({"settings": {"c4_quality": {}}, "listed": 3}, stats)
    assert section["filters"]["c4_quality"] == {
        "documents_removed": {"too_few_sentences": 1}, "documents_cut": 2, "characters_removed": 40,
        "lines_cut": {"no_terminal_punc": 3, "policy": 1}}
    assert section["documents_removed"] == 1 and section["documents_cut"] == 2 and section["listed"] == 3
    assert section["per_source"] == {"/in/a.jsonl": {"documents_removed": 1}}  # (cuts are not removals)
    inp = {"dropped_by_reason": {"too_few_sentences": 1}}
    assert Q.check_quality(section, inp, {"too_few_sentences": 1, "lines_cut": 2}) == []
    assert Q.check_quality(section, inp, {"too_few_sentences": 1, "lines_cut": 1}) == [
        "filtered/quality/ lists 1 records cut, quality.documents_cut is 2"]
    assert Q.check_quality({**section, "documents_cut": 3}, inp, {"too_few_sentences": 1, "lines_cut": 2}) == [
        "quality.documents_cut is 3, its filters cut 2"]


def test_repetition_rules_remove_for_their_reason_in_order():
    r = Q.GopherRepetition()
    fine = ("The committee met on Tuesday to discuss the budget.\n\nA storm closed the northern bridge for a week, "
            "and traffic moved slowly.\n\nMost readers prefer short chapters with clear headings.")
    assert r.check(fine, Q.words_of(fine)) is None
    assert r.check("", []) == "gopher_repetition_empty"
    paras = "\n\n".join(["same paragraph here"] * 4 + [f"other {i}" for i in range(6)])
    assert r.check(paras, Q.words_of(paras)) == "dup_para_char_frac"  # 3 of 10 repeat: 0.3 is not more than 0.3
    paras = "\n\n".join(["same paragraph here"] * 5 + [f"other {i}" for i in range(6)])
    assert r.check(paras, Q.words_of(paras)) == "dup_para_frac"  # 4 of 11
    lines = "\n".join(["a line that repeats"] * 2 + [f"line number {i} is its own, long enough" for i in range(8)])
    lines_only = Q.GopherRepetition(dup_line_char_frac=None, top_n_grams=(), dup_n_grams=())
    assert lines_only.check(lines, Q.words_of(lines)) is None  # 1 of 10 lines repeats
    many = "\n".join(["a line that repeats"] * 5 + [f"line {i}" for i in range(5)])
    assert r.check(many, Q.words_of(many)) == "dup_line_frac"
    words = "the cat " * 40 + " ".join(f"w{i}" for i in range(40))
    assert r.check(words, Q.words_of(words)) == "top_2_gram"
    assert Q.GopherRepetition(top_n_grams=()).check(words, Q.words_of(words)) == "duplicated_5_n_grams"
    assert Q.GopherRepetition(top_n_grams=(), dup_n_grams=()).check(words, Q.words_of(words)) is None


def test_repetition_counts_as_datatrove_counts():
    """The most frequent n-gram: its characters (words joined by a space) times its count, the first of equal
    counts; repeated n-grams: words joined without a space, counted left to right past each repeat."""
    assert Q._Grams(["a", "bb", "a", "bb", "c"]).top(2) == len("a bb") * 2
    assert Q._Grams(["xx", "y", "z"]).top(1) == 2  # all once: the first
    assert Q._Grams(["a", "b", "a", "b", "a", "b"]).repeated(2) == 4  # ab, ba, ab (+2, skip), ab (+2)
    assert Q._Grams(["ab", "c", "d", "e"]).repeated(2) == 0
    assert Q._Grams(["ab", "c", "a", "bc"]).repeated(2) == 3  # joined without a space: abc twice
    assert Q._duplicates(["a", "b", "a", "a"]) == (2, 2)


def test_repetition_settings_are_checked():
    made = Q.filter_config("gopher_repetition", {"top_n_grams": [[3, 0.5]], "dup_n_grams": []})
    assert made.top_n_grams == ((3, 0.5),) and made.dup_n_grams == ()
    with pytest.raises(ValueError, match="top_n_grams counts 11-grams: from 2 to 10 words"):
        Q.filter_config("gopher_repetition", {"top_n_grams": [[11, 0.1]]})
    assert set(Q.GopherRepetition.reasons) >= {"top_2_gram", "duplicated_10_n_grams", "dup_para_frac"}


def test_c4_cuts_the_lines_its_rules_refuse_and_removes_for_its_document_rules():
    c4 = Q.C4Quality(min_num_sentences=2)
    good = "The river rose all night. Nobody slept."
    text = "\n".join([good, "  Menu  ", "Enable JavaScript to see this page.", "We use cookies on this site, ok.",
                      "Too few.", "A word " + "x" * 1001 + " here.", "Ends without a stop", "Trails off...",
                      "See the note [1] for more.", "A quirk kept [edit] as it is. [citation needed]"])
    rule, left, cut = c4.cut(text)
    # (A citation is cut after the line is stripped: one at its end leaves a space there, and no stop.)
    assert rule is None and left == good + "\nSee the note  for more."
    assert cut == {"no_terminal_punc": 4, "javascript": 1, "policy": 1, "too_few_words": 1, "too_long_word": 1}
    assert c4.cut(good + "\n{ a b c.")[0] == "curly_bracket"
    assert c4.cut(good + "\nLorem ipsum dolor sit.")[0] == "lorem_ipsum"
    assert c4.cut("One line, one sentence here.")[0] == "too_few_sentences"
    assert Q.C4Quality(min_num_sentences=-1).cut("no end")[:2] == ("c4_empty", "")  # (-1: datatrove's "none")
    assert Q.C4Quality(min_num_sentences=None, min_words_per_line=-1).cut("Hi.") == (None, "Hi.", {})
    by_sentence = Q.C4Quality(split_paragraph=False, min_num_sentences=1)
    assert by_sentence.cut("First one is fine. then no end\nLast one ends here.") == (
        None, "First one is fine. then no end\nLast one ends here.", {})
    assert Q.sentence_count("One. Two! Three?") == 3 and Q.sentence_count("") == 1


def test_fineweb_rules_remove_for_their_reason_in_order():
    f = Q.FineWebQuality()
    prose = "\n".join(f"Line {i} of this page says something long enough." for i in range(5))
    assert f.check(prose, Q.words_of(prose)) is None
    assert f.check(" \n\t", []) == "fineweb_empty"
    no_stops = "\n".join(f"line {i} has words but never stops at all" for i in range(9)) + "\nOne stop."
    assert f.check(no_stops, Q.words_of(no_stops)) == "line_punct_ratio"  # 1 of 10 < 0.12
    long_line = "a line with no stop that is long enough to count"
    assert f.check(long_line, Q.words_of(long_line)) == "line_punct_ratio"
    assert Q.FineWebQuality(line_punct_exclude_zero=True).check(long_line, Q.words_of(long_line)) is None
    short = "\n".join(["Short one.", "Short two.", "This line is long enough not to count as short."])
    assert f.check(short, Q.words_of(short)) is None  # 2 of 3: not more than 0.67
    short = "Short zero.\n" + short
    assert f.check(short, Q.words_of(short)) == "short_line_ratio"  # 3 of 4
    dup = prose + "\n" + prose.split("\n")[0]
    assert f.check(dup, Q.words_of(dup)) == "char_dup_ratio"
    listy = "\n".join(f"Item number {i} of the list is written here." for i in range(10))  # 9 newlines, 100 words
    assert f.check(listy, Q.words_of(listy)) is None
    assert Q.FineWebQuality(new_line_ratio=0.08).check(listy, Q.words_of(listy)) == "list_ratio"
    assert Q.FineWebQuality(stop_chars=["!"]).check(prose, Q.words_of(prose)) == "line_punct_ratio"


@pytest.mark.parametrize("text", [
    "One. Two! Three?", "", " ", "Hi!! ok", "e.g. this. That", "Wait... what? Yes", "Done. ]", ". . which gives",
    "A.  B. c", " lead. x", "  lead. x", "x. \t y", "end.  ", "Done. ", "(He left.) She stayed.",
    "IS_ALPHA here. Then"])
def test_sentences_are_counted_as_spacys_sentencizer_counts_them(text):
    """Its rule over each run's tokens, a whitespace token where spaCy makes one (at the start; where the
    whitespace is not one space): the count of spaCy's own sentencizer over the whole text."""
    assert Q.sentence_count(text) == max(1, len(Q._sentence_ends(text)))


def test_spacys_own_name_is_left_out_of_every_text():
    """"IS_ALPHA" breaks spaCy's tokenizer in a memory zone, now or on a later text: every text is split without
    it (datatrove's way when spaCy refuses one), the same however often."""
    for _ in range(3):
        assert Q.words_of("x IS_ALPHA y.IS_ALPHA") == ["x", "y."] == Q.words_of("x  y.")
        assert Q.sentence_count("IS_ALPHA here. Then") == 2 == max(1, len(Q._sentence_ends("IS_ALPHA here. Then")))


def test_spacy_is_made_anew_once_it_has_met_many_words(monkeypatch):
    """spaCy keeps a little of every word it meets, even in a memory zone: past LEXEMES_KEPT its tokenizers are
    made anew (a worker's memory must not grow with the corpus' vocabulary), and nothing they say changes."""
    text = "Its fifth cat sat. Then one more sat down, alone!"
    words, sentences = Q.words_of(text), Q.sentence_count(text)
    state = Q._STATE
    first_words, first_sentences = state.words()[0], state.sentences()
    monkeypatch.setattr(state, "LEXEMES_KEPT", len(first_words.vocab) + 5)
    monkeypatch.setattr(state, "runs", {})
    Q.words_of(" ".join(f"w{i}x" for i in range(20)))
    assert state.words()[0] is not first_words and Q.words_of(text) == words
    monkeypatch.setattr(state, "LEXEMES_KEPT", len(first_sentences.vocab) + 5)
    by_sentence = Q.C4Quality(split_paragraph=False, min_num_sentences=1)  # (spaCy's sentencizer itself)
    by_sentence.cut(" ".join(f"u{i}v." for i in range(20)))
    assert state.sentences() is not first_sentences and Q.sentence_count(text) == sentences == 2
    assert by_sentence.cut(text) == (None, "Its fifth cat sat. Then one more sat down, alone!", {})


def test_threads_split_words_and_sentences_each_with_their_own_spacy():
    """A runner's worker runs bundles in threads: each has its own spaCy and cache (one thread's memory zone
    ending would let go of strings another's tokens still name), so what they say is what one thread says."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Record {i} says w{i}x and (q{i}): ((z{i}.\nA second line, c{i} :) here! Third {i}." for i in range(400)]
    alone = [(Q.words_of(t), Q.sentence_count(t), Q.C4Quality(min_num_sentences=1).cut(t)) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda t: (Q.words_of(t), Q.sentence_count(t),
                                            Q.C4Quality(min_num_sentences=1).cut(t)), texts * 3))
    assert together == alone * 3


# ------------------------------------------------------------------- against datatrove


def test_words_are_datatroves():
    split = pytest.importorskip("datatrove.utils.text").split_into_words
    for text in _texts()[::7]:
        assert Q.words_of(text) == split(text)


def test_words_are_each_runs_own_whatever_the_cache_holds(monkeypatch):
    """A text's words are its whitespace runs' tokens, each run tokenized alone: the same whichever runs the
    cache already holds, and when it starts over. (spaCy's whole-text matcher lets ": ((" reach back across the
    space into "a):"; here "a):" is tokenized as it is alone: the one deliberate difference.)"""
    text = "map(ord, a): ((1000003 x)\n\n  Mr. Smith's cat :) sat."
    state = Q._STATE
    monkeypatch.setattr(state, "runs", {})
    cold = Q.words_of(text)
    assert cold == ["map(ord", ",", "a", "):", "(", "(", "1000003", "x", ")", "Mr.", "Smith", "'s", "cat", ":)",
                    "sat", "."]
    assert [t.text for t in Q._tokens(state.sentences(), "map(ord, a): ((1")][3:5] == [")", ":"]  # (spaCy's)
    Q.words_of("((1000003 Smith's")  # (some of its runs cached, alone)
    monkeypatch.setattr(state, "runs", {r: w for r, w in state.runs.items() if r in ("((1000003", "Smith's")})
    assert Q.words_of(text) == cold
    monkeypatch.setattr(state, "RUNS_KEPT", 3)  # (starts over at every text)
    assert Q.words_of(text) == cold and Q.words_of(text + " more") == cold + ["more"]


def test_every_repetition_decision_is_datatroves():
    """datatrove's GopherRepetitionFilter over the same corpora: the same rule removes each record (its 'empty'
    is gopher_repetition_empty here)."""
    from datatrove.data import Document
    from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter

    theirs_filter, ours_filter = GopherRepetitionFilter(), Q.GopherRepetition()
    texts = _texts() + ["", "same\n\nsame\n\nsame"]
    removed = 0
    for i, text in enumerate(texts):
        ours = ours_filter.check(text, Q.words_of(text))
        got = theirs_filter.filter(Document(text=text, id=str(i)))
        theirs = None if got is True else got[1]
        assert ours == ("gopher_repetition_empty" if theirs == "empty" else theirs), (i, ours, theirs)
        removed += ours is not None
    assert 0 < removed < len(texts)


def test_every_decision_is_datatroves():
    """datatrove's GopherQualityFilter (the test extra) over the three corpora: the same records kept and
    removed; the reason differs only where a word is a symbol here and not in datatrove's hand-made list (box
    drawing, a left single quote: docs/guides/filters.md)."""
    from datatrove.data import Document
    from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
    from datatrove.utils.text import PUNCTUATION_SET

    theirs_filter, ours_filter = GopherQualityFilter(), Q.GopherQuality()
    texts = _texts()
    kept = reasons = 0
    for i, text in enumerate(texts):
        words = Q.words_of(text)
        ours = ours_filter.check(text, words)
        got = theirs_filter.filter(Document(text=text, id=str(i)))
        theirs = None if got is True else got[1]
        assert (ours is None) == (theirs is None), (i, ours, theirs)
        kept += ours is None
        if ours != theirs:
            reasons += 1
            assert any(Q.is_symbol_word(w) and not all(c in PUNCTUATION_SET for c in w) for w in words), i
    assert len(texts) > 350 and 0 < kept < len(texts) and reasons < 0.02 * len(texts)


def test_every_c4_and_fineweb_decision_is_datatroves():
    """datatrove's C4QualityFilter and FineWebQualityFilter over the same corpora: the same rule removes each
    record, and C4 leaves the same text of each record it keeps (by lines, and by sentences on a third)."""
    from datatrove.data import Document
    from datatrove.pipeline.filters.c4_filters import C4QualityFilter
    from datatrove.pipeline.filters.fineweb_quality_filter import FineWebQualityFilter

    texts = _texts()
    checked = {"c4": [0, 0], "c4_sentences": [0, 0], "fineweb": [0, 0]}  # kept, removed
    for split_paragraph, name, sample in ((True, "c4", texts), (False, "c4_sentences", texts[::3])):
        theirs_filter = C4QualityFilter(split_paragraph=split_paragraph)
        ours_filter = Q.C4Quality(split_paragraph=split_paragraph)
        for i, text in enumerate(sample):
            doc = Document(text=text, id=str(i))
            got = theirs_filter.filter(doc)
            rule, left, _ = ours_filter.cut(text)
            if got is True and doc.text == "":
                assert rule == "c4_empty", i  # (the one difference: datatrove keeps an empty document)
            else:
                assert (rule, left if rule is None else None) == ((None, doc.text) if got is True else (got[1], None)), i
            checked[name][rule is not None] += 1
    theirs_filter, ours_filter = FineWebQualityFilter(), Q.FineWebQuality()
    for i, text in enumerate(texts):
        got = theirs_filter.filter(Document(text=text, id=str(i)))
        ours = ours_filter.check(text, Q.words_of(text))
        assert ours == (None if got is True else got[1]), (i, ours, got)
        checked["fineweb"][ours is not None] += 1
    assert all(kept and removed for kept, removed in checked.values()), checked


# ------------------------------------------------------------------- through the job


def _args(inp, out, *extra):
    return ["LMData", "--input_dir", str(inp), "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "128",
            "--display_pbar", "False", *extra]


def _listing(out: Path) -> list[dict]:
    directory = out / "filtered" / "quality"
    return [json.loads(line) for p in sorted(directory.iterdir()) for line in p.read_text().splitlines()] \
        if directory.exists() else []


def test_the_job_removes_counts_and_lists_what_the_rules_remove(tmp_path):
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().split("\n")[:120]
    texts = [json.loads(x)["text"] for x in lines if x]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    params = run_job(_args(tmp_path / "in", tmp_path / "out", "--quality_filters", "gopher_quality",
                           "--quality_filter_params", json.dumps({"gopher_quality": {"min_stop_words": 3}})))
    want = {}
    g = Q.GopherQuality(min_stop_words=3)
    for line, text in enumerate(texts, 1):
        rule = g.check(text, Q.words_of(text))
        if rule:
            want[line] = rule
    assert want and len(want) < len(texts)
    assert {r["line"]: r["reason"] for r in _listing(tmp_path / "out")} == want
    assert all(r["step"] == "quality" and r["filter"] == "gopher_quality" for r in _listing(tmp_path / "out"))
    section = params["quality"]
    assert section["documents_removed"] == section["listed"] == len(want)
    assert section["filters"]["gopher_quality"]["min_stop_words"] == 3
    assert params["input"]["used"] == len(texts) - len(want)
    assert verify_problems(tmp_path / "out") == []
    plain = run_job(_args(tmp_path / "in", tmp_path / "plain"))
    assert "quality" not in plain and not any(k.startswith("quality") for k in plain["processing"])


def test_the_job_writes_what_c4_leaves_of_each_record(tmp_path, capsys):
    """The rows of a job that cuts with C4 and filters with FineWeb are the rows of the same job without filters
    over what the filters leave of the records; each record cut or removed is listed, and verify agrees; the
    estimate on the whole corpus counts what the job keeps."""
    from pipelines.create_hdf5_dataset import main
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().split("\n")[:120]
    texts = [json.loads(x)["text"] for x in lines if x] + [  # (and records neither filter changes)
        f"Record {i} has one clean line. It holds three sentences. Each ends with a stop." for i in range(3)]
    filters = (Q.C4Quality(min_num_sentences=3), Q.FineWebQuality())
    left, want = [], {}
    for line, text in enumerate(texts, 1):
        found = Q.judge(filters, text)
        if found.removed:
            want[line] = found.removed[1]
        else:
            left.append(found.text if found.text is not None else text)
            if found.text is not None:
                want[line] = Q.CUT_REASON
    assert 0 < list(want.values()).count(Q.CUT_REASON) < len(want) < len(texts)
    for name, records in (("in", texts), ("left", left)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in records))
    flags = ["--quality_filters", "c4_quality,fineweb_quality",
             "--quality_filter_params", json.dumps({"c4_quality": {"min_num_sentences": 3}})]
    params = run_job(_args(tmp_path / "in", tmp_path / "out", *flags))
    listing = _listing(tmp_path / "out")
    assert {r["line"]: r["reason"] for r in listing} == want
    cut = [r for r in listing if r["reason"] == Q.CUT_REASON]
    assert all(r["filter"] == "c4_quality" and r["characters_removed"] > 0 for r in cut)
    c4 = params["quality"]["filters"]["c4_quality"]
    assert c4["documents_cut"] == params["quality"]["documents_cut"] == len(cut)
    assert c4["characters_removed"] == sum(r["characters_removed"] for r in cut)
    assert c4["lines_cut"] == {k: sum(r["lines"].get(k, 0) for r in cut) for k in c4["lines_cut"]}
    assert params["input"]["used"] == len(left)
    assert verify_problems(tmp_path / "out") == []
    from pipelines.summary import summary_line

    said = summary_line(params, str(tmp_path / "out"), 1.0)
    assert f", {len(cut)} cut to the lines their rules keep; see {tmp_path / 'out' / 'filtered' / 'quality'}." in said
    run_job(_args(tmp_path / "left", tmp_path / "plain"))
    assert np.array_equal(read_rows(tmp_path / "out"), read_rows(tmp_path / "plain"))
    argv = [a for a in _args(tmp_path / "in", "unused", *flags) if a not in ("--output_dir", "unused")]
    assert main(["estimate", *argv, "--sample", "100%", *RUNNER]) == 0
    said = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name, value in (("documents", len(left)), ("tokens", params["post-process"]["num_tokens"])):
        low, high = (float(x[:-1]) * 1000 if x.endswith("k") else float(x)
                     for x in said[name].split("95%: ")[1].split(",")[0].rstrip(")").split("-"))
        assert low <= value <= high < 2 * value, (name, value, said[name])  # (unfiltered: 3 times as many)


@pytest.mark.parametrize("flags, message", [
    (["--quality_filters", "c5"], "quality_filters: quality filter 'c5': expected one of c4_quality, "
                                  "fineweb_quality, gopher_quality, gopher_repetition"),
    (["--quality_filters", "gopher_quality", "--quality_filter_params", '{"gopher_quality": {"x": 1}}'],
     "quality filter gopher_quality: unknown setting x"),
    (["--quality_filter_params", '{"gopher_quality": {}}'], "quality_filter_params: names gopher_quality, which "
                                                             "quality_filters does not"),
])
def test_bad_quality_settings_are_refused_by_name(flags, message, tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(_args(tmp_path, tmp_path / "out", *flags) + RUNNER)


def test_c4_is_refused_for_records_of_more_than_one_text(tmp_path):
    from pipelines.config import ConfigError, load_config

    argv = ["Summarization"] + _args(tmp_path, tmp_path / "out", "--prompt_key", "p", "--completion_key", "c",
                                     "--quality_filters", "c4_quality")[1:]
    with pytest.raises(ConfigError, match="quality_filters: c4_quality cuts lines out of a record's text, which "
                                          "must be one text value .*; Summarization's records are not"):
        load_config(argv + RUNNER)
