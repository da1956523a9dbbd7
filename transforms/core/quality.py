"""Quality filters' pure core (issue #47): the rules users know by name, each a function of a record's text and
words that says which rule removes it (None: kept).

    gopher_quality     Gopher's quality rules (Rae et al. 2021, appendix A.1.1), with datatrove's
                       GopherQualityFilter's defaults, order and reason names
    gopher_repetition  Gopher's repetition rules (its table A1), with datatrove's GopherRepetitionFilter's (its
                       "empty" is gopher_repetition_empty here: a reason of its own in data_params.json)

A record's words are what datatrove splits it into: spaCy's English tokenizer (`spacy.blank("en")`, no model),
each token stripped, the empty ones left out (`words_of`). spaCy is needed only when a filter runs: it is the
`filters` extra.

A *symbol word* is one made only of punctuation, symbols and controls (Unicode categories P, S and Cc).
datatrove's list of such characters is a hand-made one of 281: all of them are in ours but three (the fullwidth
digit one, U+FF11, and two code points Unicode had not assigned); ours also holds the other symbols (currency,
arithmetic, arrows, emoji), so a word such as "©" or "€" counts as a symbol here and as a word there. Measured
in tests/test_quality.py: the decisions on its corpora are datatrove's on every record.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from typing import Optional, Sequence

from transforms.core.removed import agreement_problems

__all__ = ["GopherQuality", "GopherRepetition", "FILTERS", "filter_config", "words_of", "is_symbol_word", "STOP_WORDS", "verdict",
           "reasons_of", "quality_section", "check_quality", "COUNTER_PREFIX", "LISTING_DIR", "STEP"]

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")  # Gopher's (its appendix A.1.1)


@functools.lru_cache(maxsize=None)
def _symbolic(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "PS" or cat == "Cc"


def is_symbol_word(word: str) -> bool:
    """Whether every character of `word` is punctuation, a symbol or a control."""
    return all(_symbolic(ch) for ch in word)


@functools.lru_cache(maxsize=1)
def _tokenizer():
    try:
        import spacy
    except ImportError:
        raise RuntimeError("the quality filters split words with spaCy: pip install 'create_hdf5_dataset[filters]' "
                           "(or spacy>=3.8)") from None
    return spacy.blank("en").tokenizer


def words_of(text: str) -> list[str]:
    """The words of `text` as datatrove's word_tokenize gives them for English: spaCy's tokens, stripped, the
    empty ones left out. (A text spaCy's tokenizer refuses for holding "IS_ALPHA", a name of its own, is split
    without it, as datatrove does.)"""
    tokenizer = _tokenizer()
    try:
        tokens = tokenizer(text)
    except Exception:
        if "IS_ALPHA" not in text:
            raise
        tokens = tokenizer(text.replace("IS_ALPHA", ""))
    return [w for w in (t.text.strip() for t in tokens) if w]


@dataclasses.dataclass(frozen=True)
class GopherQuality:
    """Gopher's quality rules, each settable, None to leave it out. A record is removed by the first rule it
    fails, in this order: fewer than min_doc_words or more than max_doc_words non-symbol words; a mean length of
    those words outside [min_avg_word_length, max_avg_word_length]; more "#" or more ellipses ("..." and "…")
    per word than max_symbol_word_ratio; more than max_bullet_lines_ratio of its lines starting with a bullet
    ("•" or "-"), or more than max_ellipsis_lines_ratio of them ending with an ellipsis; fewer than
    max_non_alpha_words_ratio of its words holding a letter; fewer than min_stop_words of the stop words."""

    min_doc_words: Optional[int] = 50
    max_doc_words: Optional[int] = 100000
    min_avg_word_length: Optional[float] = 3
    max_avg_word_length: Optional[float] = 10
    max_symbol_word_ratio: Optional[float] = 0.1
    max_bullet_lines_ratio: Optional[float] = 0.9
    max_ellipsis_lines_ratio: Optional[float] = 0.3
    max_non_alpha_words_ratio: Optional[float] = 0.8
    min_stop_words: Optional[int] = 2
    stop_words: Sequence[str] = STOP_WORDS

    name = "gopher_quality"
    needs_words = True

    def check(self, text: str, words: Sequence[str]) -> Optional[str]:
        """The rule that removes the record (datatrove's reason name), or None to keep it."""
        n_words = len(words)
        kept = [w for w in words if not is_symbol_word(w)]
        if self.min_doc_words and len(kept) < self.min_doc_words:
            return "gopher_short_doc"
        if self.max_doc_words and len(kept) > self.max_doc_words:
            return "gopher_long_doc"
        if kept:  # (no mean length without a word: datatrove's mean is then NaN, which no bound refuses)
            mean = sum(map(len, kept)) / len(kept)
            if self.min_avg_word_length and mean < self.min_avg_word_length:
                return "gopher_below_avg_threshold"
            if self.max_avg_word_length and mean > self.max_avg_word_length:
                return "gopher_above_avg_threshold"
        if not n_words:  # (nothing to measure the rest by: with min_doc_words unset, an empty record is kept)
            return None
        if self.max_symbol_word_ratio and text.count("#") / n_words > self.max_symbol_word_ratio:
            return "gopher_too_many_hashes"
        if self.max_symbol_word_ratio and (text.count("...") + text.count("…")) / n_words > self.max_symbol_word_ratio:
            return "gopher_too_many_ellipsis"
        lines = text.splitlines()
        if lines and self.max_bullet_lines_ratio and sum(
                line.lstrip().startswith(("•", "-")) for line in lines) / len(lines) > self.max_bullet_lines_ratio:
            return "gopher_too_many_bullets"
        if lines and self.max_ellipsis_lines_ratio and sum(
                line.rstrip().endswith(("...", "…")) for line in lines) / len(lines) > self.max_ellipsis_lines_ratio:
            return "gopher_too_many_end_ellipsis"
        if self.max_non_alpha_words_ratio and sum(
                any(c.isalpha() for c in w) for w in words) / n_words < self.max_non_alpha_words_ratio:
            return "gopher_below_alpha_threshold"
        if self.min_stop_words and len(set(self.stop_words).intersection(words)) < self.min_stop_words:
            return "gopher_enough_stop_words"
        return None

    # Every reason `check` gives, for the drop reasons' table (transforms.core.reasons).
    reasons = ("gopher_short_doc", "gopher_long_doc", "gopher_below_avg_threshold", "gopher_above_avg_threshold",
               "gopher_too_many_hashes", "gopher_too_many_ellipsis", "gopher_too_many_bullets",
               "gopher_too_many_end_ellipsis", "gopher_below_alpha_threshold", "gopher_enough_stop_words")


_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile("\n+")
N_GRAM_SIZES = range(2, 11)  # the word n-grams a repetition rule may count (the drop reasons name each)


def _duplicates(parts: Sequence[str]) -> tuple[int, int]:
    """(how many of `parts` repeat an earlier one, their characters)."""
    seen: set = set()
    count = chars = 0
    for part in parts:
        if part in seen:
            count += 1
            chars += len(part)
        else:
            seen.add(part)
    return count, chars


def _top_ngram_chars(words: Sequence[str], n: int) -> int:
    """The characters of the most frequent n-gram (its words joined by a space) times its count; of equal
    counts, the first to appear."""
    counts: dict = {}
    for i in range(len(words) - n + 1):
        gram = " ".join(words[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    best = max(counts.values())
    top = next(g for g, c in counts.items() if c == best)
    return len(top) * best


def _repeated_ngram_chars(words: Sequence[str], n: int) -> int:
    """The characters of the n-grams (words joined without a space) that repeat an earlier one, counted left to
    right and skipping past each repeat, so that no word is counted twice."""
    seen: set = set()
    chars = i = 0
    while i < len(words) - n + 1:
        gram = "".join(words[i:i + n])
        if gram in seen:
            chars += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


@dataclasses.dataclass(frozen=True)
class GopherRepetition:
    """Gopher's repetition rules (Rae et al. 2021, table A1), each settable, None (or an empty list) to leave it
    out. A record is removed by the first it fails, in this order: more than dup_para_frac of its paragraphs
    (split at blank lines) repeating an earlier one, or their characters more than dup_para_char_frac of its
    text; the same of its lines (dup_line_frac, dup_line_char_frac); for each (n, share) of top_n_grams, its most
    frequent word n-gram's characters times its count more than share of the text; for each (n, share) of
    dup_n_grams, the characters of its repeated word n-grams more than share of the text. An empty text is
    removed (gopher_repetition_empty)."""

    dup_line_frac: Optional[float] = 0.3
    dup_para_frac: Optional[float] = 0.3
    dup_line_char_frac: Optional[float] = 0.2
    dup_para_char_frac: Optional[float] = 0.2
    top_n_grams: tuple = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))

    name = "gopher_repetition"
    needs_words = True

    def __post_init__(self):
        for field in ("top_n_grams", "dup_n_grams"):
            pairs = tuple((int(n), float(share)) for n, share in (getattr(self, field) or ()))
            for n, _ in pairs:
                if n not in N_GRAM_SIZES:
                    raise ValueError(f"gopher_repetition: {field} counts {n}-grams: from 2 to 10 words")
            object.__setattr__(self, field, pairs)

    def check(self, text: str, words: Sequence[str]) -> Optional[str]:
        """The rule that removes the record (datatrove's reason name), or None to keep it."""
        if not text:
            return "gopher_repetition_empty"
        paragraphs = _PARAGRAPHS.split(text.strip())
        count, chars = _duplicates(paragraphs)
        if self.dup_para_frac and count / len(paragraphs) > self.dup_para_frac:
            return "dup_para_frac"
        if self.dup_para_char_frac and chars / len(text) > self.dup_para_char_frac:
            return "dup_para_char_frac"
        lines = _LINES.split(text)
        count, chars = _duplicates(lines)
        if self.dup_line_frac and count / len(lines) > self.dup_line_frac:
            return "dup_line_frac"
        if self.dup_line_char_frac and chars / len(text) > self.dup_line_char_frac:
            return "dup_line_char_frac"
        for n, share in self.top_n_grams:
            if len(words) >= n and _top_ngram_chars(words, n) / len(text) > share:
                return f"top_{n}_gram"
        for n, share in self.dup_n_grams:
            if _repeated_ngram_chars(words, n) / len(text) > share:
                return f"duplicated_{n}_n_grams"
        return None

    reasons = ("gopher_repetition_empty", "dup_para_frac", "dup_para_char_frac", "dup_line_frac",
               "dup_line_char_frac", *(f"top_{n}_gram" for n in N_GRAM_SIZES),
               *(f"duplicated_{n}_n_grams" for n in N_GRAM_SIZES))


FILTERS = {GopherQuality.name: GopherQuality, GopherRepetition.name: GopherRepetition}


def filter_config(name: str, params: Optional[dict] = None):
    """The filter `name` with `params` over its defaults; a ValueError naming what is unknown."""
    if name not in FILTERS:
        raise ValueError(f"quality filter {name!r}: expected one of {', '.join(sorted(FILTERS))}")
    cls = FILTERS[name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params or {}) - known)
    if unknown:
        raise ValueError(f"quality filter {name}: unknown setting {', '.join(unknown)} (its settings: "
                         f"{', '.join(sorted(known))})")
    values = dict(params or {})
    if "stop_words" in values:
        values["stop_words"] = tuple(values["stop_words"])
    for field in ("top_n_grams", "dup_n_grams"):
        if field in values:
            values[field] = tuple(tuple(pair) for pair in (values[field] or ()))
    return cls(**values)


# --- The job's side: a record's verdict, what data_params.json and verify say. ---

COUNTER_PREFIX = "quality."  # Stats counters: quality.<filter>.<rule>, per source
LISTING_DIR = "filtered/quality"
STEP = "quality"


def verdict(filters: Sequence, text: str) -> Optional[tuple[str, str]]:
    """(the filter, its rule) that removes a record of `text`, the first in `filters` order; None to keep it. Its
    words are split once, for every filter that reads them."""
    words = words_of(text) if any(f.needs_words for f in filters) else None
    for f in filters:
        rule = f.check(text, words)
        if rule is not None:
            return f.name, rule
    return None


def reasons_of(name: str) -> tuple:
    """Every rule (drop reason) of the filter `name`."""
    return FILTERS[name].reasons


def quality_section(summary: dict, stats) -> dict:
    """data_params.json's `quality`: per filter its settings and the records each of its rules removed (in total;
    per source the records removed), the records removed and listed; raises when the listing and the removed
    records disagree."""
    filters = {}
    for name, settings in summary["settings"].items():
        removed = {rule: int(stats.totals.get(f"{COUNTER_PREFIX}{name}.{rule}", 0)) for rule in reasons_of(name)}
        filters[name] = {**settings, "documents_removed": {k: v for k, v in removed.items() if v}}
    total = sum(sum(f["documents_removed"].values()) for f in filters.values())
    if total != summary["listed"]:
        raise RuntimeError(f"quality filters: {total} records removed, {summary['listed']} listed")

    def removed_in(c) -> int:
        return int(sum(v for k, v in c.items() if k.startswith(COUNTER_PREFIX)))

    return {"filters": filters, "documents_removed": total, "listed": summary["listed"],
            "per_source": {src: {"documents_removed": removed_in(c)} for src, c in sorted(stats.sources.items())
                           if removed_in(c)}}


def check_quality(section, inp, listing) -> list[str]:
    """`verify`'s problems with a `quality` section: each filter's rules against the input's dropped records,
    the total and per source, its `listed` count and the records OUT/filtered/quality/ lists per reason
    (`listing`, None when absent)."""
    problems = []
    dropped = inp.get("dropped_by_reason", {})
    total = 0
    for name, body in section.get("filters", {}).items():
        for rule, n in body.get("documents_removed", {}).items():
            total += n
            if dropped.get(rule, 0) != n:
                problems.append(f"quality.filters.{name}.documents_removed.{rule} is {n}, input.dropped_by_reason."
                                f"{rule} is {dropped.get(rule, 0)}")
    if section.get("documents_removed") != total:
        problems.append(f"quality.documents_removed is {section.get('documents_removed')}, its filters' rules add "
                        f"up to {total}")
    return problems + agreement_problems("quality", total, section, listing, LISTING_DIR)
