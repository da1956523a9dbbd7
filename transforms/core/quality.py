"""Quality filters' pure core (issue #47): the rules users know by name, each a function of a record's text and
words that says which rule removes it (None: kept).

    gopher_quality     Gopher's quality rules (Rae et al. 2021, appendix A.1.1), with datatrove's
                       GopherQualityFilter's defaults, order and reason names
    gopher_repetition  Gopher's repetition rules (its table A1), with datatrove's GopherRepetitionFilter's (its
                       "empty" is gopher_repetition_empty here: a reason of its own in data_params.json)
    c4_quality         C4's line and document rules (Raffel et al. 2020, section 2.2), as datatrove's
                       C4QualityFilter applies them: the lines a rule refuses are cut from the text, a document rule
                       removes the record
    fineweb_quality    FineWeb's rules (Penedo et al. 2024), as datatrove's FineWebQualityFilter (its "empty" is
                       fineweb_empty here)

A filter either keeps or removes a record by its text (`check`), or also cuts lines out of it (`cut`: C4's); the
filters after a cut see the text it leaves, as in a datatrove pipeline.

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
import itertools
import re
import threading
import unicodedata
from typing import Optional, Sequence

import numpy as np

from transforms.core.dedup import _BASE, _BASE_INVERSE, _powers
from transforms.core.removed import agreement_problems

__all__ = ["GopherQuality", "GopherRepetition", "C4Quality", "FineWebQuality", "FILTERS", "filter_config", "words_of",
           "sentence_count", "is_symbol_word", "STOP_WORDS", "TERMINAL_PUNCTUATION", "Judgement", "judge",
           "reasons_of", "quality_section", "check_quality", "COUNTER_PREFIX", "CUT_PREFIX", "CUT_REASON",
           "LISTING_DIR", "STEP"]

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")  # Gopher's (its appendix A.1.1)


@functools.lru_cache(maxsize=None)
def _symbolic(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "PS" or cat == "Cc"


@functools.lru_cache(maxsize=1 << 18)  # (words repeat: each is judged once while it is in the cache)
def is_symbol_word(word: str) -> bool:
    """Whether every character of `word` is punctuation, a symbol or a control."""
    return all(_symbolic(ch) for ch in word)


@functools.lru_cache(maxsize=1 << 18)
def _has_letter(word: str) -> bool:
    return any(c.isalpha() for c in word)


def _spacy():
    try:
        import spacy
    except ImportError:
        raise RuntimeError("the quality filters split words with spaCy: pip install 'create_hdf5_dataset[filters]' "
                           "(or spacy>=3.8)") from None
    return spacy


class _Spacy(threading.local):
    """spaCy, one for each thread (a runner's worker runs several bundles at once, and a memory zone's end lets
    go of every string its vocabulary made in it, whichever thread made it), and each thread's cache of runs.

    A memory zone lets go of the strings of the words spaCy met in it, not of all it keeps of them (about 28 bytes
    each): after LEXEMES_KEPT words, a tokenizer is made anew, so that a worker's memory does not grow with the
    corpus' vocabulary. What either says never depends on it."""

    LEXEMES_KEPT = 1 << 20
    RUNS_KEPT = 1 << 19

    def __init__(self):
        self._sentences = self._words = None
        self.runs: dict = {}  # a whitespace-free run -> its words (words_of)

    def sentences(self):
        """spaCy's English tokenizer and sentencizer."""
        if self._sentences is None or len(self._sentences.vocab) > self.LEXEMES_KEPT:
            self._sentences = _spacy().blank("en")
            self._sentences.add_pipe("sentencizer")
        return self._sentences

    def words(self):
        """spaCy's English tokenizer, its words' attributes (shape, number-like, ...) never computed: nothing here
        reads them, and they are most of the time spaCy takes over a word it has not seen; and the attributes that
        place each token (its start and length)."""
        if self._words is None or len(self._words[0].vocab) > self.LEXEMES_KEPT:
            nlp = _spacy().blank("en")
            nlp.vocab.lex_attr_getters = {}
            from spacy.attrs import IDX, LENGTH

            self._words = nlp, [IDX, LENGTH]
        return self._words


_STATE = _Spacy()


# "IS_ALPHA" is one of spaCy's own names: in a memory zone its tokenizer may refuse a text holding it, or keep a
# word it has already let go of (and fail later, on another text). datatrove splits a text spaCy refuses without
# it; here every text is split without it, so that its words never depend on what came before.
_SPACY_NAME = "IS_ALPHA"


def _tokens(nlp, text: str):
    """spaCy's tokens of `text` (without "IS_ALPHA")."""
    return nlp.tokenizer(text.replace(_SPACY_NAME, ""))


# A text's words are its whitespace-free runs' tokens, each run tokenized alone: spaCy splits a text at whitespace
# (str.isspace, as str.split does), tokenizes each run, and its whitespace tokens strip to nothing. Most runs are
# common words, so most are looked up, not tokenized: a thread's cache holds up to RUNS_KEPT runs, then starts
# again (its answers are the same either way). One deliberate difference from spaCy's whole text: its special-case
# matcher runs over the whole text, so an emoticon-like case can reach across a single space and stop one within
# the run before it ("a): ((" is "a", ")", ":", "(", "(" there; "a", "):", "(", "(" here, as the run "a):" is
# alone). Measured by `make bench-filters` and tests/test_quality.py: no decision differs.


def words_of(text: str) -> list[str]:
    """The words of `text` as datatrove's word_tokenize gives them for English: spaCy's tokens, stripped, the
    empty ones left out."""
    state = _STATE
    runs = text.replace(_SPACY_NAME, "").split()
    cache = state.runs
    missing = [r for r in dict.fromkeys(runs) if r not in cache]
    if missing:
        if len(cache) + len(missing) > state.RUNS_KEPT:
            cache.clear()
            missing = list(dict.fromkeys(runs))
        nlp, place = state.words()
        # The new runs tokenized as one text, a newline apart: the newline is a token of its own, between them,
        # so that no special case reaches from one run into the next.
        joined = "\n".join(missing)
        with nlp.memory_zone():  # (spaCy's strings of new runs let go: its vocabulary would grow with the corpus)
            spans = nlp.tokenizer(joined).to_array(place).tolist()  # (each token's start and length)
        found: list = []
        at = iter(missing)
        for start, length in spans:
            if joined[start] == "\n":
                cache[next(at)] = tuple(found)
                found = []
            else:
                found.append(joined[start:start + length])
        cache[next(at)] = tuple(found)
    out: list = []
    for run in runs:
        out.extend(cache[run])
    return out


def _sentence_ends(text: str) -> list[int]:
    """Where each of spaCy's sentences of `text` ends."""
    nlp = _STATE.sentences()
    with nlp.memory_zone():  # (spaCy's strings of the text let go once it is split)
        return [sent.end_char for sent in nlp.get_pipe("sentencizer")(_tokens(nlp, text)).sents]


@functools.lru_cache(maxsize=1)
def _sentence_ends_chars() -> frozenset:
    from spacy.pipeline.sentencizer import Sentencizer

    return frozenset(Sentencizer.default_punct_chars)


@functools.lru_cache(maxsize=1 << 18)
def _sentence_role(token: str) -> int:
    """What spaCy's sentencizer makes of a token: 1 ends a sentence (one of its characters that do), 2 is
    punctuation (spaCy's is_punct: every character of Unicode category P), 0 is neither (it starts the next
    sentence after an end)."""
    if token in _sentence_ends_chars():
        return 1
    return 2 if all(unicodedata.category(c).startswith("P") for c in token) else 0


_WHITESPACE = re.compile(r"(\s+)")


def sentence_count(text: str) -> int:
    """How many sentences datatrove's split_into_sentences cuts `text` into for English: spaCy's sentencizer's
    sentences, one for a text without any. Its rule over the text's tokens (each run's, as words_of finds them;
    a whitespace token where spaCy makes one: at the start, or where the whitespace is not one space): a token
    that is neither punctuation nor an end, after an end, starts a sentence."""
    text = text.replace(_SPACY_NAME, "")
    words_of(text)  # (every run's tokens in the cache)
    cache = _STATE.runs
    starts = 0
    ended = False
    pieces = _WHITESPACE.split(text)  # (runs and whitespace by turns, from a run: "" first when text starts blank)
    for k, piece in enumerate(pieces):
        if not piece:
            continue
        if k % 2:  # whitespace: a token unless it is one space after a run
            if piece == " " and pieces[k - 1]:
                continue
            roles: Sequence[int] = (0,)
        else:
            roles = [_sentence_role(t) for t in cache[piece]]
        for role in roles:
            if ended and role == 0:
                starts += 1
                ended = False
            elif role == 1:
                ended = True
    return 1 + starts


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
    needs_words = True  # check(text, words) reads its words
    cuts_lines = False  # cut(text) may cut lines out of it (and then there is no check)

    def check(self, text: str, words: Sequence[str]) -> Optional[str]:
        """The rule that removes the record (datatrove's reason name), or None to keep it."""
        n_words = len(words)
        kept = list(itertools.compress(words, [not s for s in map(is_symbol_word, words)]))
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
                map(_has_letter, words)) / n_words < self.max_non_alpha_words_ratio:
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


# The n-gram rules find equal n-grams by a polynomial hash of their contents (mod 2**64, by prefix sums: one numpy
# pass per n, over dedup's tables of powers), and check every hash they rely on against the n-grams themselves: a
# collision costs time, never a decision.


def _window_hashes(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The hash of codes[starts[i]:ends[i]] for each i: sum of codes[t] * BASE**(t - start) (mod 2**64), equal for
    equal contents wherever they are."""
    power, inverse = _powers(_BASE, len(codes) + 1), _powers(_BASE_INVERSE, len(codes) + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
        np.cumsum(codes.astype(np.uint64) * inverse[:len(codes)], out=prefix[1:])
        return (prefix[ends] - prefix[starts]) * power[starts]


class _Grams:
    """A text's words, ready for the n-gram rules: each word's id and length, and the words joined without a
    space (what the repeated n-grams compare), as code points."""

    def __init__(self, words: Sequence[str]):
        self.words = words
        index: dict = {}
        self.ids = np.fromiter((index.setdefault(w, len(index)) for w in words), dtype=np.int64, count=len(words))
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        self.offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.joined = "".join(words)
        self._codes = None

    def top(self, n: int) -> int:
        """The characters of the most frequent n-gram (its words joined by a space) times its count; of equal
        counts, the first to appear. (Words hold no space: n-grams joined by one are equal when their words
        are.)"""
        k = len(self.words) - n + 1
        starts = np.arange(k)
        hashes = _window_hashes(self.ids + 1, starts, starts + n)
        _, first, inverse, counts = np.unique(hashes, return_index=True, return_inverse=True, return_counts=True)
        best = counts.max()
        tied = np.flatnonzero(counts == best)
        windows = np.lib.stride_tricks.sliding_window_view(self.ids, n)
        pure = all(bool((windows[inverse == g] == windows[first[g]]).all()) for g in tied)
        if not pure:  # (a collision among the most frequent: counted by their words)
            return _top_ngram_chars_by_words(self.words, n)
        i = int(first[tied].min())
        return int((self.offsets[i + n] - self.offsets[i] + n - 1) * best)

    def repeated(self, n: int) -> int:
        """The characters of the n-grams (words joined without a space) that repeat an earlier one, counted left
        to right and skipping past each repeat, so that no word is counted twice."""
        k = len(self.words) - n + 1
        if k <= 0:
            return 0
        if self._codes is None:
            raw = self.joined.encode("utf-32-le", "surrogatepass")
            self._codes = np.frombuffer(raw, dtype=np.uint32)
        off = self.offsets
        hashes = _window_hashes(self._codes, off[:k], off[n:n + k])
        _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
        # Only an n-gram whose hash another shares can repeat or be repeated; between them, every n-gram is new,
        # and the walk past them only moves on by one.
        shared = np.flatnonzero(counts[inverse] > 1).tolist()
        seen: set = set()
        chars = i = 0
        joined = self.joined
        for p in shared:
            if p < i:
                continue
            gram = joined[off[p]:off[p + n]]
            if gram in seen:
                chars += len(gram)
                i = p + n
            else:
                seen.add(gram)
                i = p + 1
        return chars


def _top_ngram_chars_by_words(words: Sequence[str], n: int) -> int:
    counts: dict = {}
    for i in range(len(words) - n + 1):
        gram = " ".join(words[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    best = max(counts.values())
    top = next(g for g, c in counts.items() if c == best)
    return len(top) * best


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
    cuts_lines = False

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
        grams = _Grams(words) if self.top_n_grams or self.dup_n_grams else None
        for n, share in self.top_n_grams:
            if len(words) >= n and grams.top(n) / len(text) > share:
                return f"top_{n}_gram"
        for n, share in self.dup_n_grams:
            if grams.repeated(n) / len(text) > share:
                return f"duplicated_{n}_n_grams"
        return None

    reasons = ("gopher_repetition_empty", "dup_para_frac", "dup_para_char_frac", "dup_line_frac",
               "dup_line_char_frac", *(f"top_{n}_gram" for n in N_GRAM_SIZES),
               *(f"duplicated_{n}_n_grams" for n in N_GRAM_SIZES))


# The characters that end a sentence, for FineWeb's line_punct_ratio: datatrove's TERMINAL_PUNCTUATION (Unicode's
# Sentence_Terminal characters of an earlier version, with three Khmer signs), kept as it is so that the decisions
# are datatrove's. A setting (stop_chars) replaces it.
TERMINAL_PUNCTUATION = (
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a\u104b"
    "\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa"
    "\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c"
    "\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f"
    "\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55\U00010f56"
    "\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048\U000110be"
    "\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de"
    "\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3"
    "\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2"
    "\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e"
    "\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8"
    "\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f"
    "\U0001da88")
_TERMINAL = tuple(TERMINAL_PUNCTUATION)


@dataclasses.dataclass(frozen=True)
class FineWebQuality:
    """FineWeb's rules (Penedo et al. 2024), each settable, None to leave it out. Over the lines that are not
    blank, a record is removed by the first rule it fails, in this order: none (fineweb_empty); fewer than
    line_punct_thr of them ending with one of stop_chars (line_punct_ratio; a record with none such kept when
    line_punct_exclude_zero); more than short_line_thr of them at most short_line_length characters long
    (short_line_ratio); the characters of the lines repeating an earlier one more than char_duplicates_ratio of
    the text's characters but its newlines (char_dup_ratio); more newlines per word than new_line_ratio
    (list_ratio)."""

    line_punct_thr: Optional[float] = 0.12
    line_punct_exclude_zero: bool = False
    stop_chars: Optional[Sequence[str]] = None  # None: TERMINAL_PUNCTUATION
    short_line_thr: Optional[float] = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: Optional[float] = 0.01
    new_line_ratio: Optional[float] = 0.3

    name = "fineweb_quality"
    needs_words = True
    cuts_lines = False

    def __post_init__(self):
        if self.stop_chars is not None:
            object.__setattr__(self, "stop_chars", tuple(self.stop_chars))

    def check(self, text: str, words: Sequence[str]) -> Optional[str]:
        """The rule that removes the record (datatrove's reason name), or None to keep it."""
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return "fineweb_empty"
        stops = self.stop_chars if self.stop_chars is not None else _TERMINAL
        if self.line_punct_thr is not None:
            ratio = sum(line.endswith(stops) for line in lines) / len(lines)
            if ratio < self.line_punct_thr and not (ratio == 0 and self.line_punct_exclude_zero):
                return "line_punct_ratio"
        if self.short_line_thr is not None and sum(
                len(line) <= self.short_line_length for line in lines) / len(lines) > self.short_line_thr:
            return "short_line_ratio"
        if self.char_duplicates_ratio is not None and _duplicates(lines)[1] / (
                len(text) - text.count("\n")) > self.char_duplicates_ratio:
            return "char_dup_ratio"
        if self.new_line_ratio is not None and text.count("\n") / len(words) > self.new_line_ratio:
            return "list_ratio"
        return None

    reasons = ("fineweb_empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")


_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")  # Wikipedia's, cut from each line
_END_PUNCTUATION = (".", "?", "!", '"', "'")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


def _sentences(text: str) -> list[str]:
    """`text` cut at the ends of its sentences as datatrove's split_into_sentences cuts it (each piece holds the
    spaces after its sentence)."""
    ends = _sentence_ends(text)
    return [text[a:b] for a, b in zip([0] + ends[:-1], ends[:-1] + [len(text)])]


@dataclasses.dataclass(frozen=True)
class C4Quality:
    """C4's rules (Raffel et al. 2020, section 2.2, and its code), as datatrove's C4QualityFilter applies them,
    each settable, None (or datatrove's -1) to leave it out. Each line (split_paragraph; else each sentence) is
    stripped and cut from the text when it holds a word (split at spaces) longer than max_word_length
    (too_long_word); then, its Wikipedia citations ("[1]", "[edit]", "[citation needed]") taken out when
    remove_citations, when it does not end with . ? ! " or ', or ends with "..." (no_terminal_punc, when
    filter_no_terminal_punct); when it has fewer than min_words_per_line words (too_few_words); when it names
    javascript (filter_javascript); when it holds a cookie or terms-of-use phrase (policy, when filter_policy). The
    record is removed for a kept line that holds "lorem ipsum" (lorem_ipsum, when filter_lorem_ipsum) or "{"
    (curly_bracket, when filter_curly_bracket), or for fewer than min_num_sentences sentences in the lines kept
    (too_few_sentences); else its text is its kept lines, joined by newlines (by spaces without
    split_paragraph). A record left with no text is removed (c4_empty: datatrove keeps an empty document)."""

    split_paragraph: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: Optional[int] = 5
    min_words_per_line: Optional[int] = 3
    max_word_length: Optional[int] = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True

    name = "c4_quality"
    needs_words = False
    cuts_lines = True

    def __post_init__(self):
        for field in ("min_num_sentences", "min_words_per_line", "max_word_length"):
            if getattr(self, field) == -1:  # (datatrove's way to leave a rule out)
                object.__setattr__(self, field, None)

    def cut(self, text: str) -> tuple[Optional[str], str, dict]:
        """(the rule that removes the record or None, the text left, the lines cut per rule)."""
        lines = text.splitlines() if self.split_paragraph else _sentences(text)
        cut: dict = {}
        kept = []
        sentences = 0
        for line in lines:
            line = line.strip()
            words = line.split()
            if self.max_word_length is not None and any(len(w) > self.max_word_length for w in words):
                cut["too_long_word"] = cut.get("too_long_word", 0) + 1
                continue
            if self.remove_citations:
                line = _CITATION.sub("", line)
            if self.filter_no_terminal_punct and (not line.endswith(_END_PUNCTUATION) or line.endswith("...")):
                cut["no_terminal_punc"] = cut.get("no_terminal_punc", 0) + 1
                continue
            if self.min_words_per_line is not None and len(words) < self.min_words_per_line:
                cut["too_few_words"] = cut.get("too_few_words", 0) + 1
                continue
            lower = line.lower()
            if self.filter_lorem_ipsum and "lorem ipsum" in lower:
                return "lorem_ipsum", text, cut
            if self.filter_javascript and "javascript" in lower:
                cut["javascript"] = cut.get("javascript", 0) + 1
                continue
            if self.filter_curly_bracket and "{" in line:
                return "curly_bracket", text, cut
            if self.filter_policy and any(p in lower for p in _POLICY):
                cut["policy"] = cut.get("policy", 0) + 1
                continue
            if self.min_num_sentences is not None:
                sentences += sentence_count(line) if self.split_paragraph else 1
            kept.append(line)
        if self.min_num_sentences is not None and sentences < self.min_num_sentences:
            return "too_few_sentences", text, cut
        left = ("\n" if self.split_paragraph else " ").join(kept).strip()
        return ("c4_empty" if not left else None), left, cut

    reasons = ("lorem_ipsum", "curly_bracket", "too_few_sentences", "c4_empty")
    line_rules = ("too_long_word", "no_terminal_punc", "too_few_words", "javascript", "policy")


FILTERS = {f.name: f for f in (GopherQuality, GopherRepetition, C4Quality, FineWebQuality)}


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
    for field in ("stop_words", "stop_chars"):
        if values.get(field) is not None:
            values[field] = tuple(values[field])
    for field in ("top_n_grams", "dup_n_grams"):
        if field in values:
            values[field] = tuple(tuple(pair) for pair in (values[field] or ()))
    return cls(**values)


# --- The job's side: a record's verdict, what data_params.json and verify say. ---

COUNTER_PREFIX = "quality."  # Stats counters: quality.<filter>.<rule>, per source (the records removed)
CUT_PREFIX = "quality_cut."  # quality_cut.<filter>.documents / .characters / .lines.<rule> (the records cut)
CUT_REASON = "lines_cut"  # a cut record's listing line's reason (it is kept: not a drop reason)
LISTING_DIR = "filtered/quality"
STEP = "quality"


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What the filters make of a record: `removed`, (the filter, its rule) that removes it, None to keep it; for
    a record kept, `text`, what is left of its text when a filter cut it (None: unchanged), and `cuts`, per filter
    that changed it, (its name, {rule: lines cut})."""

    removed: Optional[tuple[str, str]] = None
    text: Optional[str] = None
    cuts: tuple = ()


def judge(filters: Sequence, text: str) -> Judgement:
    """The filters asked in order, each seeing the text the filters before it left: the first rule that removes
    the record, or what is kept of it. Its words are split once for every filter that reads them, again after a
    cut."""
    words = None
    cuts = []
    original = text
    for f in filters:
        if f.cuts_lines:
            rule, left, lines = f.cut(text)
            if rule is not None:
                return Judgement((f.name, rule))
            if left != text:
                cuts.append((f.name, lines))
                text, words = left, None
            continue
        if words is None and f.needs_words:
            words = words_of(text)
        rule = f.check(text, words)
        if rule is not None:
            return Judgement((f.name, rule))
    return Judgement(None, text if text != original else None, tuple(cuts))


def reasons_of(name: str) -> tuple:
    """Every rule (drop reason) of the filter `name`."""
    return FILTERS[name].reasons


def quality_section(summary: dict, stats) -> dict:
    """data_params.json's `quality`: per filter its settings and the records each of its rules removed (in total;
    per source the records removed), for a filter that cuts lines the records it cut, their lines per rule and
    characters; the records removed, cut and listed; raises when the listing and the counts disagree."""
    filters = {}
    for name, settings in summary["settings"].items():
        removed = {rule: int(stats.totals.get(f"{COUNTER_PREFIX}{name}.{rule}", 0)) for rule in reasons_of(name)}
        filters[name] = {**settings, "documents_removed": {k: v for k, v in removed.items() if v}}
        if FILTERS[name].cuts_lines:
            lines = {rule: int(stats.totals.get(f"{CUT_PREFIX}{name}.lines.{rule}", 0))
                     for rule in FILTERS[name].line_rules}
            filters[name].update(
                documents_cut=int(stats.totals.get(f"{CUT_PREFIX}{name}.documents", 0)),
                lines_cut={k: v for k, v in lines.items() if v},
                characters_removed=int(stats.totals.get(f"{CUT_PREFIX}{name}.characters", 0)))
    total = sum(sum(f["documents_removed"].values()) for f in filters.values())
    cut = int(stats.totals.get(f"{CUT_PREFIX}documents", 0))
    if total + cut != summary["listed"]:
        raise RuntimeError(f"quality filters: {total} records removed and {cut} cut, {summary['listed']} listed")

    def removed_in(c) -> int:
        return int(sum(v for k, v in c.items() if k.startswith(COUNTER_PREFIX)))

    return {"filters": filters, "documents_removed": total, "documents_cut": cut, "listed": summary["listed"],
            "per_source": {src: {"documents_removed": removed_in(c)} for src, c in sorted(stats.sources.items())
                           if removed_in(c)}}


def check_quality(section, inp, listing) -> list[str]:
    """`verify`'s problems with a `quality` section: each filter's rules against the input's dropped records,
    the total and per source, its `listed` count and the records OUT/filtered/quality/ lists per reason
    (`listing`, None when absent); the records cut, per filter and listed."""
    problems = []
    dropped = inp.get("dropped_by_reason", {})
    total = cut = 0
    for name, body in section.get("filters", {}).items():
        cut += body.get("documents_cut", 0)
        for rule, n in body.get("documents_removed", {}).items():
            total += n
            if dropped.get(rule, 0) != n:
                problems.append(f"quality.filters.{name}.documents_removed.{rule} is {n}, input.dropped_by_reason."
                                f"{rule} is {dropped.get(rule, 0)}")
    if section.get("documents_removed") != total:
        problems.append(f"quality.documents_removed is {section.get('documents_removed')}, its filters' rules add "
                        f"up to {total}")
    if section.get("documents_cut", 0) != cut:
        problems.append(f"quality.documents_cut is {section.get('documents_cut', 0)}, its filters cut {cut}")
    return problems + agreement_problems("quality", total, section, listing, LISTING_DIR, cut=cut,
                                         cut_reason=CUT_REASON)
