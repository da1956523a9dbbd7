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
import itertools
import unicodedata
from typing import Iterable, Optional, Sequence

import numpy as np

# The rolling hash's parts are dedup's (issue #46): SplitMix64's finalizer and a polynomial base with its powers.
from transforms.core.dedup import _mix64_in_place, _powers
from transforms.core.reasons import CONTAMINATED
from transforms.core.removed import agreement_problems

__all__ = ["DecontamConfig", "units", "unit_spans", "unit_hashes", "ngram_hashes", "item_ngrams", "EvalIndex",
           "ItemCatalog", "catalog_of", "build_index", "merge_indexes", "find_matches", "cut", "record_texts",
           "slices", "record_evidence", "capped", "verdict", "listing_record", "decontam_section", "check_decontam",
           "DROP", "CUT", "ACTIONS", "cut_record", "PIECES_JOINED_BY", "COUNTER_PREFIX", "LISTING_DIR", "STEP", "SLICE_CHARS"]

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
        if self.max_docs < 1:
            raise ValueError(f"decontamination: max_docs must be >= 1, got {self.max_docs}")
        for name in ("margin", "min_piece", "max_splits"):
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


# The code points that are not unassigned (Cn) or private use (Co), whose class is not the default (a letter,
# kept): up to CJK extension H, and the tags and variation selectors of plane 14. Looking at these only makes the
# table in a fifth of the time, once per worker (tests/test_decontam_fast.py checks that the rest is Cn or Co).
_ASSIGNED = (range(0x32400), range(0xE0000, 0xE0200))


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    """str.translate's table over the case-folded text: punctuation, symbols, format characters, variation
    selectors and enclosing marks, and (in scripts without spaces) combining marks deleted; controls and
    separators a space; a character of a script without spaces a unit of its own (spaces around it). Everything
    else (letters, marks, digits) is kept."""
    table: dict = {}
    for cp in itertools.chain(*_ASSIGNED):
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


_NGRAM_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd: invertible modulo 2^64
_NGRAM_INVERSE = np.uint64(pow(int(_NGRAM_BASE), -1, 1 << 64))


@functools.lru_cache(maxsize=1)
def _classes() -> np.ndarray:
    """uint8 per code point of case-folded text: what `_table` makes of it (_GONE, _SPACE, _ALONE, else _WORD)."""
    out = np.full(0x110000, _WORD, dtype=np.uint8)
    for cp, to in _table().items():
        out[cp] = _GONE if to is None else _SPACE if to == " " else _ALONE
    return out


@functools.lru_cache(maxsize=1)
def _ascii_values() -> np.ndarray:
    """The mixed value of each ASCII code point (what _code_values gives it), looked up rather than computed."""
    return _mix64_in_place(np.arange(128, dtype=np.uint64) + np.uint64(1))


def _code_values(cps: np.ndarray) -> np.ndarray:
    """Each code point's value in a unit's hash: the code point + 1, mixed (uint8 arrays: ASCII, looked up)."""
    if cps.dtype == np.uint8:
        return np.take(_ascii_values(), cps)
    return _mix64_in_place(cps.astype(np.uint64) + np.uint64(1))


def _unit_hash_values(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """A 64-bit hash per unit, from its code points' values (_code_values; the units' back to back, each
    starting at `starts`): the sum of each value times base^(its place in the unit), the unit's length mixed in.

    By prefix sums, as the n-grams are: with P[j] the sum of value[t] base^t over t < j, a unit [a, b) is
    (P[b] - P[a]) base^-a: a pass over the characters and one over the units."""
    n = len(values)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    # (uint64 arrays wrap silently: no overflow to silence)
    np.cumsum(values * _powers(_NGRAM_BASE, n), out=prefix[1:])
    ends = np.append(starts[1:], n)
    lengths = (ends - starts).astype(np.uint64)
    return _mix64_in_place((prefix[ends] - prefix[starts]) * _powers(_NGRAM_INVERSE, n)[starts] ^ lengths)


def unit_hashes(words: Sequence[str]) -> np.ndarray:
    """The hash of each unit (as `units` gives them), one at a time: what _batch_units computes for a text's
    units, at numpy's speed, without ever making them strings."""
    if not words:
        return np.zeros(0, dtype=np.uint64)
    cps = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    starts = np.concatenate(([0], np.cumsum([len(w) for w in words])[:-1])).astype(np.int64)
    return _unit_hash_values(_code_values(cps), starts)


def _units_of(cps: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_batch_units over case-folded texts given as one array of code points (uint8: all ASCII; uint32), the
    texts one after the other with a space between, and each text's length."""
    # (np.take: a gather, quicker than indexing; ASCII's classes from a table of its own, in cache)
    cls = np.take(_classes()[:128] if cps.dtype == np.uint8 else _classes(), cps)
    kept = np.flatnonzero(cls != _GONE)  # (where each kept character was: its text)
    cps, cls = np.take(cps, kept), np.take(cls, kept)
    word = cls == _WORD
    start = (cls == _ALONE) | (word & ~np.concatenate(([False], word[:-1])))
    in_unit = np.flatnonzero(cls != _SPACE)
    starts = np.flatnonzero(np.take(start, in_unit))
    if not len(starts):
        return np.zeros(0, dtype=np.uint64), np.zeros(len(lens), dtype=np.int64)
    text_of = np.searchsorted(np.cumsum(lens + 1), np.take(kept, np.take(in_unit, starts)), side="right")
    return (_unit_hash_values(_code_values(np.take(cps, in_unit)), starts),
            np.bincount(text_of, minlength=len(lens)).astype(np.int64))


def _batch_units(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's units hashed, all texts' in one array, and each text's count of units.

    The texts are case folded (by Python) and then handled as arrays of code points: each classified by
    `_classes`, the deleted ones taken out, a unit starting at a letter after a non-letter or at a character of
    a script without spaces. The units are those `units` gives, and their hashes `unit_hashes`'. ASCII texts
    (most of English) are handled apart, a byte a character."""
    ascii_at = [i for i, t in enumerate(texts) if t.isascii()]
    other_at = [i for i, t in enumerate(texts) if not t.isascii()] if len(ascii_at) < len(texts) else []
    parts = []
    if ascii_at:  # casefold is lower() in ASCII
        chosen = [texts[i] for i in ascii_at]
        cps = np.frombuffer("\n".join(chosen).encode("ascii").lower(), dtype=np.uint8)
        parts.append((ascii_at, *_units_of(cps, np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen)))))
    if other_at:
        folded = [texts[i].casefold() for i in other_at]
        cps = np.frombuffer("\n".join(folded).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        parts.append((other_at, *_units_of(cps, np.fromiter(map(len, folded), dtype=np.int64, count=len(folded)))))
    if not parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    counts = np.zeros(len(texts), dtype=np.int64)
    owner = []
    for at, _, n in parts:
        counts[at] = n
        owner.append(np.repeat(np.asarray(at, dtype=np.int64), n))
    order = np.argsort(np.concatenate(owner), kind="stable")  # every text's units in text order
    return np.concatenate([h for _, h, _ in parts])[order], counts


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
    text_of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)[:total]  # (each n-gram's first unit's)
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


_FILTER_BITS = 24  # the index's filter: a bit per value of a hash's top bits, at least 24 (2 MB)


def _filter_bits(n: int) -> int:
    """Bits of the filter of an index of n hashes: 32 bits a hash or more (a bit set for one of 2.5% of the
    hashes that are not the index's), 24 to 30 (2 to 128 MB)."""
    return min(30, max(_FILTER_BITS, n.bit_length() + 5))


@dataclasses.dataclass(frozen=True)
class EvalIndex:
    """An evaluation set's n-grams, per length: sorted distinct hashes (8 bytes each: a 10 MB set of English is
    about 1.7 million) and, beside each, the item it was first found in (its ordinal among the items read: the
    listing names it). `items` counts the items read, `short` those too short to be evidence."""

    hashes: dict
    owners: dict = dataclasses.field(default_factory=dict)
    items: int = 0
    short: int = 0
    catalog: Optional["ItemCatalog"] = None  # where each item is (None: not known; the tests' indexes)

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(sorted(self.hashes))

    def __len__(self) -> int:
        return sum(len(h) for h in self.hashes.values())

    @functools.cached_property
    def _filter(self) -> np.ndarray:
        """A bit per value of the top `_filter_bits` bits of a hash, set where one of the index's has it: a
        training n-gram whose bit is clear is not in the index (most of them, at one look-up each), and only the
        rest are searched for."""
        bits = np.zeros(1 << (self._bits - 3), dtype=np.uint8)
        for table in self.hashes.values():
            top = table >> np.uint64(64 - self._bits)
            np.bitwise_or.at(bits, (top >> np.uint64(3)).astype(np.int64),
                             np.left_shift(1, (top & np.uint64(7)).astype(np.uint8)).astype(np.uint8))
        return bits

    @functools.cached_property
    def _bits(self) -> int:
        return _filter_bits(len(self))

    def _maybe(self, hashes: np.ndarray) -> np.ndarray:
        """The filter's verdict: which of `hashes` have the top bits of one of the index's."""
        top = hashes >> np.uint64(64 - self._bits)
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


@dataclasses.dataclass(frozen=True)
class ItemCatalog:
    """Where each evaluation item is, by its ordinal: its file, line and field (what the listing names). Kept as
    arrays, not an object per item: a large evaluation suite has a million strings."""

    sources: tuple  # the files, in the order their items are numbered
    starts: np.ndarray  # int64: each file's first ordinal
    lines: np.ndarray  # int64 per item
    fields: np.ndarray  # int32 per item, into `names`
    names: tuple  # the distinct field names

    def describe(self, ordinal: int) -> dict:
        """{"file", "line", "field"} of the item `ordinal`."""
        f = int(np.searchsorted(self.starts, ordinal, side="right")) - 1
        return {"file": self.sources[f], "line": int(self.lines[ordinal]),
                "field": self.names[int(self.fields[ordinal])]}


def catalog_of(source: str, lines: Sequence[int], fields: Sequence[str]) -> ItemCatalog:
    """The catalog of one file's items (their lines and fields, in order)."""
    names = tuple(dict.fromkeys(fields))
    at = {name: i for i, name in enumerate(names)}
    return ItemCatalog((source,), np.zeros(1, dtype=np.int64), np.asarray(lines, dtype=np.int64).reshape(-1),
                       np.fromiter((at[f] for f in fields), dtype=np.int32, count=len(fields)), names)


def _tables(found: dict, ordered: bool = False) -> tuple[dict, dict]:
    """Per length, (hashes, owners) pieces (consumed: each list is emptied) -> the sorted distinct hashes, each
    with its smallest owner.
    `ordered`: the owners, pieces one after the other, never decrease (a stable sort by hash is then enough)."""
    tables, owners = {}, {}
    for length, parts in found.items():
        hashes = np.concatenate([h for h, _ in parts])
        ordinals = np.concatenate([o for _, o in parts])
        parts.clear()  # (the pieces, copied: let them go before the sort's copies are made)
        # By hash, then by item: the first of equal hashes is the owner.
        order = np.argsort(hashes, kind="stable") if ordered else np.lexsort((ordinals, hashes))
        hashes, ordinals = hashes[order], ordinals[order]
        del order
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        tables[length], owners[length] = hashes[first], ordinals[first]
    return tables, owners


def build_index(items: Iterable[str], config: DecontamConfig, catalog: Optional[ItemCatalog] = None) -> EvalIndex:
    """The index of an evaluation set's texts (each item's text fields, one at a time), each n-gram owned by the
    first item (in the order given) that holds it; `catalog` says where each item is. Each item gives what
    item_ngrams gives it; the items are hashed together, about SLICE_CHARS characters at a time."""
    found: dict = {}
    count = short = 0
    batch: list[str] = []
    size = 0
    for text in items:
        batch.append(text)
        size += len(text)
        if size >= SLICE_CHARS:
            short += _index_slice(batch, count, config, found)
            count, batch, size = count + len(batch), [], 0
    if batch:
        short += _index_slice(batch, count, config, found)
        count += len(batch)
    tables, owners = _tables(found, ordered=True)  # (each slice's items numbered after the last's)
    return EvalIndex(tables, owners, count, short, catalog)


def _index_slice(texts: list[str], first: int, config: DecontamConfig, found: dict) -> int:
    """The n-grams of items numbered from `first`, added to found (length -> [(hashes, owners)]); returns how
    many were too short."""
    u, counts = _batch_units(texts)
    hashes, text_of, _ = _ngrams_of(u, counts, config.ngram)
    if len(hashes):
        found.setdefault(config.ngram, []).append((hashes, text_of + first))
    starts = np.cumsum(counts) - counts
    for length in range(config.min_ngram, config.ngram):  # an item of fewer units: one n-gram of all of them
        chosen = np.flatnonzero(counts == length)
        if len(chosen):
            at = (starts[chosen][:, None] + np.arange(length)).ravel()
            whole, _, _ = _ngrams_of(u[at], np.full(len(chosen), length, dtype=np.int64), length)
            found.setdefault(length, []).append((whole, chosen + first))
    return int((counts < config.min_ngram).sum())


def merge_indexes(parts: Sequence[EvalIndex]) -> EvalIndex:
    """One index of several (each a file's, its items numbered from 0), in the order given: a part's items are
    numbered after the earlier parts', and an n-gram several hold is owned by the first part's item. Every part
    has a catalog, or none has."""
    found: dict = {}
    offset = 0
    starts, sources, lines, fields, names = [], [], [], [], {}
    for part in parts:
        for length, hashes in part.hashes.items():
            found.setdefault(length, []).append((hashes, part.owners[length] + offset))
        if part.catalog is not None:
            cat = part.catalog
            starts.append(cat.starts + offset)
            sources.extend(cat.sources)
            lines.append(cat.lines)
            renumber = np.array([names.setdefault(n, len(names)) for n in cat.names], dtype=np.int32)
            fields.append(renumber[cat.fields] if len(cat.fields) else cat.fields)
        offset += part.items
    tables, owners = _tables(found)
    catalog = None
    if sources:
        if any(p.catalog is None for p in parts):
            raise ValueError("merge_indexes: some parts have a catalog and others none")
        catalog = ItemCatalog(tuple(sources), np.concatenate(starts), np.concatenate(lines),
                              np.concatenate(fields).astype(np.int32), tuple(names))
    return EvalIndex(tables, owners, offset, sum(p.short for p in parts), catalog)


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


def _regions(text: str, matches: Sequence[tuple[int, int]], config: DecontamConfig) -> list[list[int]]:
    """The [lo, hi) character ranges cut out of `text` for its matches (first unit, length): each match with
    `margin` characters each side of it, overlapping ones merged, in order."""
    spans = unit_spans(text)
    regions: list[list[int]] = []
    for first, length in sorted(matches):
        lo = max(0, spans[first][0] - config.margin)
        hi = min(len(text), spans[first + length - 1][1] + config.margin)
        if regions and lo <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], hi)
        else:
            regions.append([lo, hi])
    return regions


def _pieces(text: str, regions: Sequence[Sequence[int]], config: DecontamConfig) -> list[str]:
    pieces, at = [], 0
    for lo, hi in regions:
        pieces.append(text[at:lo])
        at = hi
    pieces.append(text[at:])
    return [p for p in pieces if len(p) >= config.min_piece]


def cut(text: str, matches: Sequence[tuple[int, int]], config: DecontamConfig) -> Optional[list[str]]:
    """NeMo Curator's cut: the text without each match (first unit, length) and `margin` characters each side of
    it; the pieces left, in order, without those under `min_piece` characters. None when the record is cut more
    than `max_splits` times (overlapping cuts are one) or no piece is left."""
    if not matches:
        return [text]
    regions = _regions(text, matches, config)
    if len(regions) > config.max_splits:
        return None
    return _pieces(text, regions, config) or None


PIECES_JOINED_BY = "\n\n"  # a cut record's pieces, one text again (it keeps its identity: its file and line)


def cut_record(values: Sequence[str], matches: Sequence[tuple[int, int, int]],
               config: DecontamConfig) -> Optional[tuple[str, ...]]:
    """A record's values, each cut as `cut` cuts a text at its matches (value, first unit, length), its pieces
    joined by a blank line; None when the record is to be removed: cut more than `max_splits` times in all, or a
    value cut to nothing."""
    by_value: dict = {}
    for value, first, length in matches:
        by_value.setdefault(value, []).append((first, length))
    out = list(values)
    cuts = 0
    for value, found in sorted(by_value.items()):
        regions = _regions(values[value], found, config)
        cuts += len(regions)
        pieces = _pieces(values[value], regions, config)
        if cuts > config.max_splits or not pieces:
            return None
        out[value] = PIECES_JOINED_BY.join(pieces)
    return tuple(out)


# --- The job's side: a record's texts, its evidence, the verdict, what data_params.json and verify say. ---

COUNTER_PREFIX = "decontam."  # Stats counters: decontam.documents.contaminated, decontam.characters..., per source
LISTING_DIR = "filtered/decontaminate"  # OUT/<this>/<file>.jsonl: a line per record removed
STEP = "decontaminate"


def _strings(value) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def record_texts(values: Sequence[str], json_values: Sequence[bool]) -> list[str]:
    """The texts of a record that are checked, each on its own (no n-gram runs from one into the next): a value
    as it is, or, for a value the job reads as JSON (a conversation's messages, a preference pair's sides), every
    string inside it in order (a message's content is one; its role, a word, cannot make an n-gram). A value
    that is not valid JSON is checked as text: the encoder will reject it, and until then it is text."""
    import orjson  # (only a record read as JSON needs it)

    out: list[str] = []
    for value, as_json in zip(values, json_values):
        if not as_json:
            out.append(value)
            continue
        try:
            out.extend(_strings(orjson.loads(value)))
        except orjson.JSONDecodeError:
            out.append(value)
    return out


SLICE_CHARS = 1 << 20  # record_evidence hashes this many characters at a time: its arrays stay in cache-sized pieces


def slices(sizes: Sequence[int], limit: int) -> Iterable[tuple[int, int]]:
    """[lo, hi) runs of consecutive items whose sizes add up to about `limit` (each run ends at the item that
    reaches it; the last run holds the rest), covering every item in order."""
    lo = total = 0
    for i, size in enumerate(sizes):
        total += size
        if total >= limit:
            yield lo, i + 1
            lo, total = i + 1, 0
    if lo < len(sizes):
        yield lo, len(sizes)


def record_evidence(texts_per_record: Sequence[Sequence[str]], index: EvalIndex,
                    slice_chars: int = SLICE_CHARS) -> list[list[tuple[int, int, int]]]:
    """Per record (its texts), each evaluation n-gram it holds once: (hash as a signed 64-bit int: every coder
    keys it exactly, owner, where it is first found: (text << 32) | first unit, its length in units), in order
    of where. Records are
    hashed together, about `slice_chars` characters at a time (a packing group holds 64 MiB of text: its arrays
    would be gigabytes)."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in texts_per_record]
    for lo, hi in slices([sum(map(len, texts)) for texts in texts_per_record], slice_chars):
        _evidence_of(texts_per_record, lo, hi, index, out)
    return out


def _evidence_of(texts_per_record: Sequence[Sequence[str]], lo: int, hi: int, index: EvalIndex, out: list) -> None:
    """record_evidence of the records [lo, hi), into out[lo:hi]."""
    texts = [t for ts in texts_per_record[lo:hi] for t in ts]
    record_of = np.repeat(np.arange(lo, hi), [len(ts) for ts in texts_per_record[lo:hi]])
    starts = np.concatenate(([0], np.cumsum([len(ts) for ts in texts_per_record[lo:hi]])))
    for t, matches in enumerate(find_matches(texts, index)):
        if not matches:
            continue
        r = int(record_of[t])
        seen = {e[0] for e in out[r]}
        for first, length, h, owner in matches:
            signed = h - (1 << 64) if h >= 1 << 63 else h
            if signed not in seen:
                seen.add(signed)
                out[r].append((signed, owner, (t - int(starts[r - lo])) << 32 | first, length))
    for r in range(lo, hi):
        out[r].sort(key=lambda e: e[2])


def capped(count: int, members: list, cap: int) -> tuple[int, list]:
    """An n-gram's training documents, counted, and listed while there are at most `cap` of them: past that it is
    boilerplate, and the list (no longer needed) is dropped, so that no worker holds one n-gram's millions."""
    return (count, members) if count <= cap else (count, [])


def verdict(evidence: Sequence[tuple]) -> tuple[int, int, int, tuple]:
    """A contaminated record's (the item of its first match, the distinct n-grams matched, the distinct items,
    where its matches are: (text, first unit, length), in order) from its evidence (hash, owner, where, length),
    boilerplate left out."""
    # (Earliest place, then smallest item: two items' n-grams can start at the same unit, and the evidence comes
    # from a grouping, in no fixed order.)
    first = min(evidence, key=lambda e: (e[2], e[1]))
    spans = tuple(sorted({(e[2] >> 32, e[2] & 0xFFFFFFFF, e[3]) for e in evidence}))
    return first[1], len({e[0] for e in evidence}), len({e[1] for e in evidence}), spans


def listing_record(node: tuple, line: int, item: dict, ngrams: int, items: int,
                   cut_characters: Optional[int] = None) -> dict:
    """One line of OUT/filtered/decontaminate/: the record removed (or cut: `cut_characters` removed from it),
    why, and the evaluation item of its first match (file, line, field), with how many distinct evaluation
    n-grams and items it holds."""
    out = {"file": node[1], "line": line, "step": STEP, "reason": CONTAMINATED if cut_characters is None else CUT,
           "item": item, "ngrams": ngrams, "items": items}
    if cut_characters is not None:
        out["characters_removed"] = cut_characters
    if node[3]:
        out["member"] = node[3]
    return out


def decontam_section(summary: dict, stats) -> dict:
    """data_params.json's `decontamination`: the settings and the evaluation set (from the stage's `summary`),
    the records and characters removed (in total and per source, from the batches' counters; removed before
    tokenizing, they have no tokens), with the cut action the records cut and their characters cut out, the
    listing's count, the n-grams found and those left out as boilerplate; raises when the listing and the
    counts disagree."""
    cutting = summary["settings"].get("action") == CUT

    def block(c) -> dict:
        out = {"documents_removed": int(c.get(f"{COUNTER_PREFIX}documents.{CONTAMINATED}", 0)),
               "characters_removed": int(c.get(f"{COUNTER_PREFIX}characters.{CONTAMINATED}", 0))}
        if cutting:
            out.update(documents_cut=int(c.get(f"{COUNTER_PREFIX}documents.{CUT}", 0)),
                       characters_cut=int(c.get(f"{COUNTER_PREFIX}characters.{CUT}", 0)))
        return out

    out = {**summary["settings"], "evaluation": summary["evaluation"], **block(stats.totals)}
    if out["documents_removed"] + out.get("documents_cut", 0) != summary["listed"]:
        raise RuntimeError(f"decontamination: {out['documents_removed']} records removed and "
                           f"{out.get('documents_cut', 0)} cut, {summary['listed']} listed")
    out["listed"] = summary["listed"]
    out["ngrams_matched"] = summary["matched"]
    out["ngrams_boilerplate"] = summary["boilerplate"]
    out["per_source"] = {src: block(c) for src, c in sorted(stats.sources.items())
                         if any(k.startswith(COUNTER_PREFIX) for k in c)}
    return out


def check_decontam(section, inp, listing) -> list[str]:
    """`verify`'s problems with a `decontamination` section: its removed records against the input's dropped
    ones (in total and per source), its `listed` count, and the records OUT/filtered/decontaminate/ lists per
    reason (`listing`, None when the directory is absent); the records cut, in total, per source and listed."""
    problems = []
    removed = section.get("documents_removed", 0)
    dropped = inp.get("dropped_by_reason", {}).get(CONTAMINATED, 0)
    if removed != dropped:
        problems.append(f"decontamination.documents_removed is {removed}, input.dropped_by_reason.{CONTAMINATED} "
                        f"is {dropped}")
    cut = section.get("documents_cut", 0)
    by_source = sum(s.get("documents_cut", 0) for s in section.get("per_source", {}).values())
    if by_source != cut:
        problems.append(f"decontamination.per_source cuts {by_source} records, the total is {cut}")
    return problems + agreement_problems("decontamination", removed, section, listing, LISTING_DIR, CONTAMINATED,
                                         cut=cut, cut_reason=CUT)
