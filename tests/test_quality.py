"""Quality filters (issue #47): Gopher's quality rules (transforms/core/quality.py) against datatrove's
GopherQualityFilter on real corpora, every decision; and the stage through the job: counted per rule, listed,
recounted by verify, before decontamination; the settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import RUNNER, SHARED, require_shared, run_job, verify_problems
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
    with pytest.raises(ValueError, match="quality filter 'c5': expected one of gopher_quality, gopher_repetition"):
        Q.filter_config("c5")
    with pytest.raises(ValueError, match="quality filter gopher_quality: unknown setting min_words"):
        Q.filter_config("gopher_quality", {"min_words": 3})


def test_verdict_asks_each_filter_in_order():
    class Never:
        name, needs_words = "never", False

        def check(self, text, words):
            return None

    class Always(Never):
        name, needs_words = "always", True

        def check(self, text, words):
            assert words is not None
            return "rule"

    assert Q.verdict([Never()], "x") is None
    assert Q.verdict([Never(), Always()], "x") == ("always", "rule")
    assert Q.verdict([Always(), Never()], "x") == ("always", "rule")


def test_the_section_and_verify_count_each_rule():
    stats = Stats()
    stats.add("quality.gopher_quality.gopher_short_doc", 2, "/in/a.jsonl")
    stats.add("quality.gopher_quality.gopher_enough_stop_words", 1, "/in/b.jsonl")
    settings = {"gopher_quality": {"min_doc_words": 50}}
    section = Q.quality_section({"settings": settings, "listed": 3}, stats)
    assert section == {"filters": {"gopher_quality": {"min_doc_words": 50, "documents_removed": {
        "gopher_short_doc": 2, "gopher_enough_stop_words": 1}}}, "documents_removed": 3, "listed": 3,
        "per_source": {"/in/a.jsonl": {"documents_removed": 2}, "/in/b.jsonl": {"documents_removed": 1}}}
    with pytest.raises(RuntimeError, match="3 records removed, 4 listed"):
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
    assert Q._top_ngram_chars(["a", "bb", "a", "bb", "c"], 2) == len("a bb") * 2
    assert Q._top_ngram_chars(["xx", "y", "z"], 1) == 2  # all once: the first
    assert Q._repeated_ngram_chars(["a", "b", "a", "b", "a", "b"], 2) == 4  # ab, ba, ab (+2, skip), ab (+2)
    assert Q._repeated_ngram_chars(["ab", "c", "d", "e"], 2) == 0
    assert Q._repeated_ngram_chars(["ab", "c", "a", "bc"], 2) == 3  # joined without a space: abc twice
    assert Q._duplicates(["a", "b", "a", "a"]) == (2, 2)


def test_repetition_settings_are_checked():
    made = Q.filter_config("gopher_repetition", {"top_n_grams": [[3, 0.5]], "dup_n_grams": []})
    assert made.top_n_grams == ((3, 0.5),) and made.dup_n_grams == ()
    with pytest.raises(ValueError, match="top_n_grams counts 11-grams: from 2 to 10 words"):
        Q.filter_config("gopher_repetition", {"top_n_grams": [[11, 0.1]]})
    assert set(Q.GopherRepetition.reasons) >= {"top_2_gram", "duplicated_10_n_grams", "dup_para_frac"}


# ------------------------------------------------------------------- against datatrove


def test_words_are_datatroves():
    split = pytest.importorskip("datatrove.utils.text").split_into_words
    for text in _texts()[::7]:
        assert Q.words_of(text) == split(text)


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


@pytest.mark.parametrize("flags, message", [
    (["--quality_filters", "c5"], "quality_filters: quality filter 'c5': expected one of gopher_quality, "
                                  "gopher_repetition"),
    (["--quality_filters", "gopher_quality", "--quality_filter_params", '{"gopher_quality": {"x": 1}}'],
     "quality filter gopher_quality: unknown setting x"),
    (["--quality_filter_params", '{"gopher_quality": {}}'], "quality_filter_params: names gopher_quality, which "
                                                             "quality_filters does not"),
])
def test_bad_quality_settings_are_refused_by_name(flags, message, tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(_args(tmp_path, tmp_path / "out", *flags) + RUNNER)
