"""When tiktoken gives exactly the ids `tokenizers` gives, and the rank table that makes it so.

Both libraries encode a text in three layers: split out added tokens and
normalize, cut the rest into words with a regex (pre-tokenize), then BPE each
word, a sequence of bytes. `backends.TiktokenEncoder` reproduces the first two
layers with the tokenizer's own pieces (below); this module is about the
third, where the two algorithms really differ.

**The two BPEs on one word.** Parts start as single bytes.

- tokenizers (HF) repeatedly merges the adjacent pair (x, y) that is *listed*
  in the merges with the lowest priority (its index in the list; leftmost
  first on ties) into the token x+y, until no adjacent pair is listed
  (`Word::merge_all`).
- tiktoken (TT) returns the word itself when it has a rank. Otherwise it
  repeatedly merges the adjacent pair whose *concatenation* has the lowest
  rank (leftmost first on ties), until no concatenation has a rank
  (`byte_pair_encode`).

So TT would merge x and y whenever x+y is a token, even if (x, y) is not the
merge that lists x+y, or give it another priority; and it short-cuts whole
words.

**The rank table R.** A token t produced by the listed merge (x, y) gets the
priority of that merge; single bytes get ranks after all merges (a
concatenation of two parts is never one byte, so their rank only names them).
TT returns ranks, which a table maps back to ids, so the ids need not follow
merge order (NeoX, OLMo). Tokens that no merge produces (GPT-2's
"<|endoftext|>" in the model vocabulary, added tokens, unreachable entries)
are left out: HF's BPE never outputs them either. When several listed merges
produce t, t's rank is that of the merge HF's run on t alone ends with.
Only the order of the ranks of multi-byte tokens steers TT, so when the ids of
merged tokens increase with their merges' priority (GPT-2's do), the ids
themselves are used as ranks and TT's output needs no mapping.

**Locality.** In HF's run on any word, the merges inside the span of a part
are exactly HF's run on that part's text alone: parts only grow, so while the
part exists nothing has crossed the ends of its span, and each merge inside
it was the minimum (priority, position) of the pairs inside it, which is
what the run alone picks too. Hence (a) every part HF ever forms is a token
whose own run ends in [t], always by the same last merge; (b) whenever parts
x and y are adjacent, HF's run on the text x+y alone passes through [x, y].

**The condition: every token in R rebuilds itself** (HF's BPE on its text
gives [t]; with `ignore_merges`, every byte-level token of the vocabulary
must be in R and rebuild itself, so the option changes nothing).

**Claim: under the condition, TT with R gives HF's result on every word.**
The two runs start in the same state; suppose they are in the same state.
If adjacent parts x and y have x+y = t in R, then by (b) HF's run on t alone
passes through [x, y], and as t rebuilds itself that run then merges (x, y):
so (x, y) is a listed merge and the one t's rank comes from (the last merge
of t), with the same priority in both. If (x, y) is listed, x+y is in R
(every merge result is), and the same argument applies. The pairs either
algorithm may merge are therefore the same pairs with the same priorities;
equal priorities only come from the same merge, and both take the leftmost;
so both make the same merge, or both stop. TT's short-cut fires only on a
word in R, which HF turns into itself by the condition.

**When it fails.** The merges (b, c), (a, b), (ab, c), in that order: HF
turns "abc" into [a, bc] and stops, as a + bc is no listed merge; TT sees
the split a | bc of the token abc and merges it (and short-cuts the word
"abc"). The condition is also necessary for this R: a token that does not
rebuild itself is itself a word on which the two differ. `rank_table` finds
such a token and raises `NotExact`, and the tokenizer stays on `tokenizers`.
(Leaving those tokens out of R would be exact too, HF never forming them by
(a), but no tokenizer we know needs it.) Options whose effect TT cannot
reproduce (dropout, byte_fallback, an unk token, subword prefixes/suffixes)
and a vocabulary that lacks a byte UTF-8 text can hold (HF would drop it, TT
cannot encode it) fail too.

The condition is checked with HF's own BPE (`oracle`), not a re-implementation
of it; only tokens produced by several merges are replayed here, to learn
which merge is last.
"""

from __future__ import annotations

import base64
import dataclasses
from collections import defaultdict
from typing import Callable, Iterable, Optional

import numpy as np

__all__ = ["NotExact", "RankTable", "rank_table", "check_options", "byte_stand_ins", "UTF8_BYTES"]

# Bytes that can occur in UTF-8 text: all but C0, C1 and F5-FF. A vocabulary
# may lack the others (NeoX-20B does) without ever meeting them.
UTF8_BYTES = frozenset(set(range(256)) - {0xC0, 0xC1} - set(range(0xF5, 0x100)))


class NotExact(Exception):
    """tiktoken would not give this tokenizer's ids; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class RankTable:
    """What tiktoken needs: a rank for each token's bytes, and each rank's token id."""

    ranks: dict  # bytes -> rank
    ids: Optional[np.ndarray]  # int32, rank -> token id; None: the ranks are the token ids

    def to_json(self) -> dict:
        """JSON values `from_json` reads back into an equal table (tokens in the table's order)."""
        tokens = list(self.ranks)
        return {"tokens": base64.b64encode(b"".join(tokens)).decode("ascii"),
                "lengths": [len(t) for t in tokens], "ranks": [self.ranks[t] for t in tokens],
                "ids": None if self.ids is None else self.ids.tolist()}

    @classmethod
    def from_json(cls, data: dict) -> "RankTable":
        """The table `to_json` wrote; ValueError (or KeyError, TypeError) for anything else."""
        blob = base64.b64decode(data["tokens"], validate=True)
        lengths, ranks = data["lengths"], data["ranks"]
        if len(lengths) != len(ranks) or sum(lengths) != len(blob) or min(lengths, default=1) < 1:
            raise ValueError("the tokens, their lengths and their ranks do not match")
        ends = np.cumsum(lengths).tolist()
        tokens = [blob[a:b] for a, b in zip([0] + ends[:-1], ends)]
        table = dict(zip(tokens, map(int, ranks)))
        if len(table) != len(tokens):
            raise ValueError("a token is listed twice")
        ids = None if data["ids"] is None else np.asarray(data["ids"], dtype=np.int32)
        if ids is not None and (ids.ndim != 1 or max(table.values(), default=-1) >= len(ids)):
            raise ValueError("a rank has no id")
        return cls(table, ids)


def byte_stand_ins() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (the ByteLevel alphabet) -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) \
        + list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTES = byte_stand_ins()
_CHAR = {b: c for c, b in _BYTES.items()}
# str.translate + latin-1 turns a token into its bytes; a character that
# stands for no byte becomes one latin-1 cannot encode.
_TO_LATIN1 = {**{c: 0xFFFF for c in range(256)}, **{ord(c): b for c, b in _BYTES.items()}}


def _token_bytes(token: str) -> Optional[bytes]:
    """The bytes a byte-level token stands for; None if it holds a character of no byte."""
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return None


def _merge_pairs(raw: Iterable) -> list[tuple[str, str]]:
    # tokenizer.json spells a merge "a b" (older files) or ["a", "b"].
    pairs = []
    for m in raw:
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise NotExact(f"merge {m!r} is not two tokens")
            pairs.append((parts[0], parts[1]))
        else:
            a, b = m
            pairs.append((a, b))
    return pairs


def check_options(model: dict) -> None:
    """NotExact when the BPE model has an option tiktoken cannot reproduce."""
    if model.get("type") != "BPE":
        raise NotExact(f"its model is {model.get('type')}, not BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise NotExact(f"its BPE uses dropout {model['dropout']}")
    if model.get("byte_fallback"):
        raise NotExact("its BPE uses byte_fallback")
    if model.get("unk_token") is not None:
        raise NotExact(f"its BPE has an unk token ({model['unk_token']!r})")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise NotExact(f"its BPE uses {key} {model[key]!r}")


def _last_merge(text: str, priority: dict) -> tuple[list[str], Optional[int]]:
    """HF's BPE on one word, step by step: the final parts and the priority of the last merge."""
    parts, last = list(text), None
    while True:
        best = None
        for i in range(len(parts) - 1):
            p = priority.get((parts[i], parts[i + 1]))
            if p is not None and (best is None or p < best[0]):
                best = (p, i)
        if best is None:
            return parts, last
        last, i = best
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def rank_table(model: dict, oracle: Callable[[list[str]], list[list[int]]]) -> RankTable:
    """The rank table of a byte-level BPE model (tokenizer.json's "model"), or NotExact.

    `oracle(texts)` is HF's BPE alone (no normalizer, pre-tokenizer or added
    tokens, `ignore_merges` off): the ids of each text taken as one word.
    """
    check_options(model)
    vocab: dict = model.get("vocab") or {}
    if len(set(vocab.values())) != len(vocab):
        raise NotExact("two tokens of its vocabulary share an id")
    merges = _merge_pairs(model.get("merges") or [])
    missing = sorted(b for b in UTF8_BYTES if _CHAR[b] not in vocab)
    if missing:
        raise NotExact(f"its vocabulary lacks {len(missing)} byte(s) UTF-8 text can hold, e.g. 0x{missing[0]:02X}")
    # HF keeps the last priority of a pair listed twice (its merge map is built in order).
    priority: dict = {}
    for i, (a, b) in enumerate(merges):
        if not a or not b:
            raise NotExact(f"merge {i} has an empty side")
        priority[(a, b)] = i
    produced_by: dict = defaultdict(list)
    for (a, b), i in priority.items():
        produced_by[a + b].append(i)
    # A token with a character outside the byte alphabet never occurs in a
    # byte-level word: neither library can produce it from text.
    as_bytes = {t: b for t in produced_by if (b := _token_bytes(t)) is not None}
    merged = list(as_bytes)
    for t, ids in zip(merged, oracle(merged)):
        if ids != [vocab[t]]:
            raise NotExact(
                f"tokenizers' BPE does not rebuild token {t!r} (id {vocab[t]}) from its merges (it gives {ids}): "
                "a split of it that is not its listed merge can occur, and tiktoken would merge that split")
    if model.get("ignore_merges"):
        stray = [t for t in vocab if len(t) > 1 and t not in produced_by and _token_bytes(t) is not None]
        if stray:
            raise NotExact(f"its BPE uses ignore_merges and token {stray[0]!r} is not the result of a merge")
    n = len(merges)
    ranks: dict = {}
    ids = np.zeros(n + 256, dtype=np.int32)
    for char, byte in _BYTES.items():
        if char in vocab:
            ranks[bytes([byte])] = n + byte
            ids[n + byte] = vocab[char]
    merge_ranks = []
    for t in merged:
        if len(produced_by[t]) == 1:
            rank = produced_by[t][0]
        else:
            parts, rank = _last_merge(t, priority)
            if parts != [t]:  # the oracle said it rebuilds itself: the replay disagrees with HF
                raise NotExact(f"replaying the merges of {t!r} gives {parts}, not the token")
        ranks[as_bytes[t]] = rank
        ids[rank] = vocab[t]
        merge_ranks.append(rank)
    merge_ranks.sort()
    if np.all(np.diff(ids[merge_ranks]) > 0):
        # The ids of merged tokens follow their merges' priority (GPT-2's do): the ids can be
        # the ranks themselves, as only the order of multi-byte ranks steers tiktoken's merges
        # (a single byte is never a pair), and tiktoken's output is then the ids, unmapped.
        return RankTable({token: int(ids[rank]) for token, rank in ranks.items()}, None)
    return RankTable(ranks, ids)
