"""Decontamination's pure core (issue #47): the units a text is compared in, the n-grams of an evaluation set,
where a training text holds one, and NeMo Curator's cut around each match.

A text is compared as GPT-3's decontamination and lm-evaluation-harness's janitor compare it, so that a copied
evaluation item is found however it was re-wrapped, re-cased or re-punctuated: case folded, punctuation and
symbols deleted (a word's pieces around an apostrophe or a hyphen join: "don't" is "dont"), split on whitespace
into words. Scripts written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan) would be one "word"
per sentence, so each of their characters is a unit of its own (their combining marks deleted: a Thai syllable's
vowel signs do not make it another unit). The units are not the tokenizer's: token ids differ by case and
punctuation, which a copied item must survive; and they are not dedup's shingles, for the same reason.

An evaluation item is its n-grams of `ngram` (13) units; an item shorter than that but of at least `min_ngram`
(8) units is one n-gram of all of them (NeMo Curator's rule); a shorter one is too short to be evidence and is
left out (counted). A training text holds an item's n-gram where the same units follow each other in it; the
stage then leaves out n-grams found in more than `max_docs` training documents (boilerplate, GPT-3's rule).

Every hash is a function of the units alone (64-bit, keyed by nothing that varies), so the index built on one
worker matches on every other, on every engine.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from typing import Iterable, Optional, Sequence

import numpy as np

# The rolling hash's parts are dedup's (issue #46): SplitMix64's finalizer and a polynomial base with its powers.
from transforms.core.dedup import _mix64_in_place, _powers

__all__ = ["DecontamConfig", "units", "unit_spans", "ngram_hashes", "item_ngrams", "EvalIndex", "build_index",
           "find_matches", "cut", "DROP", "CUT", "ACTIONS"]

DROP, CUT = "drop", "cut"
ACTIONS = (DROP, CUT)


@dataclasses.dataclass(frozen=True)
class DecontamConfig:
    """How training text is checked against an evaluation set. The defaults are GPT-3's n-gram (13 units) and
    boilerplate rule (an n-gram in more than 10 training documents is not evidence), and NeMo Curator's shortest
    item (8 units) and cut (200 characters each side of a match; pieces under 200 characters dropped; a record
    cut more than 10 times dropped)."""

    ngram: int = 13
    min_ngram: int = 8
    action: str = DROP
    max_docs: int = 10
    margin: int = 200
    min_piece: int = 200
    max_splits: int = 10

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.ngram:
            raise ValueError(f"decontamination: min_ngram {self.min_ngram} must be between 1 and ngram {self.ngram}")
        if self.action not in ACTIONS:
            raise ValueError(f"decontamination: action {self.action!r}: expected one of {', '.join(ACTIONS)}")
        for name in ("max_docs", "margin", "min_piece", "max_splits"):
            if getattr(self, name) < 0:
                raise ValueError(f"decontamination: {name} must be >= 0, got {getattr(self, name)}")


# Scripts written without spaces between words: each character is a unit.
_NO_SPACE = ((0x0E00, 0x0EFF),  # Thai, Lao
             (0x0F00, 0x0FFF),  # Tibetan
             (0x1000, 0x109F),  # Myanmar
             (0x1780, 0x17FF),  # Khmer
             (0x3040, 0x30FF),  # Hiragana, Katakana
             (0x31F0, 0x31FF),  # Katakana phonetic extensions
             (0x3400, 0x4DBF),  # CJK extension A
             (0x4E00, 0x9FFF),  # CJK unified ideographs
             (0xF900, 0xFAFF),  # CJK compatibility ideographs
             (0xFF66, 0xFF9F),  # halfwidth katakana
             (0x20000, 0x3134F))  # CJK extensions B-G


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    """str.translate's table over the case-folded text: punctuation, symbols, format characters, variation
    selectors and enclosing marks, and (in scripts without spaces) combining marks deleted; controls and separators a space; a character of a script without
    spaces a unit of its own (spaces around it). Everything else (letters, marks, digits) is kept."""
    table: dict = {}
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        # Variation selectors and enclosing marks dress a symbol (an emoji, a keycap): they go with it.
        if cat[0] in "PS" or cat in ("Cf", "Me") or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
            table[cp] = None
        elif cat[0] == "Z" or cat == "Cc":
            table[cp] = " "
    for lo, hi in _NO_SPACE:
        for cp in range(lo, hi + 1):
            if table.get(cp, "") is None:
                continue
            cat = unicodedata.category(chr(cp))
            if cat[0] == "M":
                table[cp] = None
            elif cat[0] in "LN":
                table[cp] = f" {chr(cp)} "
    return table


def units(text: str) -> list[str]:
    """The text's units, as compared: case folded, punctuation and symbols deleted, split on whitespace; a
    character of a script without spaces a unit of its own."""
    return text.casefold().translate(_table()).split()


# unit_spans' classes of an original character: what its case folding becomes through the table.
_SPACE, _GONE, _ALONE, _WORD = range(4)


def _kind(ch: str) -> int:
    out = ch.casefold().translate(_table())
    if not out:
        return _GONE
    if out.isspace():
        return _SPACE
    if out[0] == " ":
        return _ALONE
    return _WORD


def unit_spans(text: str) -> list[tuple[int, int]]:
    """Where each of `units(text)` is in `text`: (start, end) character offsets, the first and one past the last
    character that makes it (deleted characters inside a word are inside its span, at its ends outside it).

    A character at a time, in Python: for the few records that hold a match (the cut, the listing)."""
    spans: list[tuple[int, int]] = []
    start = end = -1
    for i, ch in enumerate(text):
        kind = _kind(ch)
        if kind == _WORD:
            if start < 0:
                start = i
            end = i + 1
        elif kind == _GONE:
            continue
        else:
            if start >= 0:
                spans.append((start, end))
                start = -1
            if kind == _ALONE:
                spans.append((i, i + 1))
    if start >= 0:
        spans.append((start, end))
    return spans


_BYTE_VALUES = _mix64_in_place(np.arange(1, 257, dtype=np.uint64))
_NGRAM_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd: invertible modulo 2^64
_NGRAM_INVERSE = np.uint64(pow(int(_NGRAM_BASE), -1, 1 << 64))


def _unit_hashes(words: Sequence[str]) -> np.ndarray:
    """A 64-bit hash per unit, from its UTF-8 bytes: the sum of its mixed bytes times base^(position in the unit),
    its length mixed in; every unit at once (joined by NUL, which no unit holds: it is a control, a space)."""
    if not words:
        return np.zeros(0, dtype=np.uint64)
    joined = np.frombuffer("\0".join(words).encode("utf-8"), dtype=np.uint8)
    ends = np.append(np.flatnonzero(joined == 0), len(joined))  # each unit's end in `joined`
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    data = joined[joined != 0]
    offset = np.arange(len(data), dtype=np.int64) - np.repeat(starts - np.arange(len(starts)), lengths)
    # (uint64 arrays wrap silently: no overflow to silence)
    terms = _BYTE_VALUES[data] * _powers(_NGRAM_BASE, int(lengths.max()))[offset]
    h = np.add.reduceat(terms, starts - np.arange(len(starts))) ^ lengths.astype(np.uint64)
    return _mix64_in_place(h)


def _batch_units(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's units hashed, all texts' in one array, and each text's count of units."""
    per_text = [units(t) for t in texts]
    counts = np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))
    return _unit_hashes([w for ws in per_text for w in ws]), counts


def _ngrams_of(u: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ngram_hashes over a batch's unit hashes `u` and its texts' unit counts."""
    total = len(u) - n + 1
    if total <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=np.uint64), empty, empty
    # H(i) = sum_k u[i+k] B^(n-1-k) = B^(i+n-1) (Q[i+n] - Q[i]), Q[j] = sum_(t<j) u[t] B^-t: prefix sums, so that
    # an n-gram of any length costs the same few passes.
    q = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(u * _powers(_NGRAM_INVERSE, len(u)))))
    h = _mix64_in_place(_powers(_NGRAM_BASE, len(u))[n - 1:] * (q[n:] - q[:total]) ^ np.uint64(n))
    ends = np.cumsum(counts)
    text_of = np.searchsorted(ends, np.arange(total, dtype=np.int64), side="right")
    first = np.arange(total, dtype=np.int64) - (ends - counts)[text_of]
    inside = first + n <= counts[text_of]  # ends in its own text
    return h[inside], text_of[inside], first[inside]


def ngram_hashes(texts: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every n-gram of each text's units: (hash uint64, the text's index, its first unit), texts in order and
    each text's n-grams in order of position. A text of fewer than n units has none. The texts are hashed as one
    batch (no n-gram crosses from one text to the next)."""
    return _ngrams_of(*_batch_units(texts), n)


def item_ngrams(text: str, config: DecontamConfig) -> tuple[int, np.ndarray]:
    """An evaluation item's n-grams: (length, hashes). `config.ngram` units each; an item shorter than that but
    of at least `min_ngram` units, one n-gram of all of them; a shorter one none (length 0)."""
    m = len(units(text))
    if m >= config.ngram:
        return config.ngram, ngram_hashes([text], config.ngram)[0]
    if m >= config.min_ngram:
        return m, ngram_hashes([text], m)[0]
    return 0, np.zeros(0, dtype=np.uint64)


_FILTER_BITS = 24  # the index's filter: a bit per value of a hash's top 24 bits (2 MB)


@dataclasses.dataclass(frozen=True)
class EvalIndex:
    """An evaluation set's n-grams, per length: sorted distinct hashes (8 bytes each: a 10 MB set of English is
    about 1.7 million) and, beside each, the item it was first found in (its ordinal among the items read: the
    listing names it). `items` counts the items read, `short` those too short to be evidence."""

    hashes: dict
    owners: dict = dataclasses.field(default_factory=dict)
    items: int = 0
    short: int = 0

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(sorted(self.hashes))

    def __len__(self) -> int:
        return sum(len(h) for h in self.hashes.values())

    @functools.cached_property
    def _filter(self) -> np.ndarray:
        """A bit per value of the top 24 bits of a hash, set where one of the index's has it: a training n-gram
        whose bit is clear is not in the index (most of them, at one cache-friendly look-up each), and only the
        rest are searched for."""
        bits = np.zeros(1 << (_FILTER_BITS - 3), dtype=np.uint8)
        for table in self.hashes.values():
            top = table >> np.uint64(64 - _FILTER_BITS)
            np.bitwise_or.at(bits, (top >> np.uint64(3)).astype(np.int64),
                             np.left_shift(1, (top & np.uint64(7)).astype(np.uint8)).astype(np.uint8))
        return bits

    def _maybe(self, hashes: np.ndarray) -> np.ndarray:
        """The filter's verdict: which of `hashes` have the top 24 bits of one of the index's."""
        top = hashes >> np.uint64(64 - _FILTER_BITS)
        return ((self._filter[(top >> np.uint64(3)).astype(np.int64)] >> (top & np.uint64(7)).astype(np.uint8))
                & 1).astype(bool)

    def holds(self, length: int, hashes: np.ndarray) -> np.ndarray:
        """Which of `hashes` (n-grams of `length` units) are the index's."""
        return self._look_up(length, hashes)[0]

    def owners_of(self, length: int, hashes: np.ndarray) -> np.ndarray:
        """The item each of `hashes` (all the index's) was first found in."""
        found, at = self._look_up(length, hashes)
        if not found.all():
            raise KeyError(f"{int((~found).sum())} of the hashes are not in the index")
        return self.owners[length][at]

    def _look_up(self, length: int, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of `hashes` are the index's, where each found one is in its table)."""
        table = self.hashes.get(length)
        at = np.zeros(len(hashes), dtype=np.int64)
        if table is None or not len(hashes):
            return np.zeros(len(hashes), dtype=bool), at
        maybe = self._maybe(hashes)
        candidates = hashes[maybe]
        at[maybe] = np.minimum(np.searchsorted(table, candidates), len(table) - 1)
        maybe[maybe] = table[at[maybe]] == candidates
        return maybe, at


def build_index(items: Iterable[str], config: DecontamConfig) -> EvalIndex:
    """The index of an evaluation set's texts (each item's text fields, one at a time), each n-gram owned by the
    first item (in the order given) that holds it."""
    found: dict = {}
    count = short = 0
    for ordinal, text in enumerate(items):
        count += 1
        length, hashes = item_ngrams(text, config)
        if not length:
            short += 1
            continue
        found.setdefault(length, []).append((hashes, np.full(len(hashes), ordinal, dtype=np.int64)))
    tables, owners = {}, {}
    for length, parts in found.items():
        hashes = np.concatenate([h for h, _ in parts])
        ordinals = np.concatenate([o for _, o in parts])
        order = np.lexsort((ordinals, hashes))  # by hash, then by item: the first of equal hashes is the owner
        hashes, ordinals = hashes[order], ordinals[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        tables[length], owners[length] = hashes[first], ordinals[first]
    return EvalIndex(tables, owners, count, short)


def find_matches(texts: Sequence[str], index: EvalIndex) -> list[list[tuple[int, int, int, int]]]:
    """Per text, the evaluation n-grams it holds: (first unit, length, hash, the item that owns it), in order of
    position then length."""
    out: list[list[tuple[int, int, int, int]]] = [[] for _ in texts]
    u, counts = _batch_units(texts)
    for length in index.lengths:
        hashes, text_of, first = _ngrams_of(u, counts, length)
        hit = index.holds(length, hashes)
        owners = index.owners_of(length, hashes[hit])
        for t, f, h, o in zip(text_of[hit].tolist(), first[hit].tolist(), hashes[hit].tolist(), owners.tolist()):
            out[t].append((f, length, h, o))
    for matches in out:
        matches.sort()
    return out


def cut(text: str, matches: Sequence[tuple[int, int]], config: DecontamConfig) -> Optional[list[str]]:
    """NeMo Curator's cut: the text without each match (first unit, length) and `margin` characters each side of
    it; the pieces left, in order, without those under `min_piece` characters. None when the record is cut more
    than `max_splits` times (overlapping cuts are one) or no piece is left."""
    if not matches:
        return [text]
    spans = unit_spans(text)
    regions: list[list[int]] = []
    for first, length in sorted(matches):
        lo = max(0, spans[first][0] - config.margin)
        hi = min(len(text), spans[first + length - 1][1] + config.margin)
        if regions and lo <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], hi)
        else:
            regions.append([lo, hi])
    if len(regions) > config.max_splits:
        return None
    pieces, at = [], 0
    for lo, hi in regions:
        pieces.append(text[at:lo])
        at = hi
    pieces.append(text[at:])
    kept = [p for p in pieces if len(p) >= config.min_piece]
    return kept or None
