"""Documents to ids at bounded cost: the reference's split_text rule, and cutting texts longer than UNCUT_CHARS.

`tokenize_documents` is what the pipeline calls: one int32 array per
document, ids then EOS. A text of at most UNCUT_CHARS characters is encoded
whole; a longer one is cut at safe spaces into pieces (`piece_spans`) whose
ids, checked per tokenizer on probe texts (`_find_cut_plan`), concatenate to
the whole text's.

The tokenizer it works for is any object with the attributes `TokenizerLike`
lists (`tokenizer.Tokenizer` is one); this module does not import it, since
the Tokenizer encodes through this one.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Protocol, Sequence

import numpy as np
import tokenizers

from transforms.core.tokenizer.backends import affixes

__all__ = ["split_text", "piece_spans", "encode_bounded", "tokenize_documents", "UNCUT_CHARS", "PIECE_CHARS"]

# Bounded tokenization cost (`encode_bounded`): a text of at most UNCUT_CHARS
# characters is encoded whole; a longer one in pieces of at most PIECE_CHARS
# characters (`piece_spans`). Read at call time from this module (tests may patch them here).
# Large enough that real documents are encoded whole (exact by construction):
# a piece boundary inside a long run without spaces (say, a list of
# identifiers one per line) would split a word and change its ids.
UNCUT_CHARS = 1 << 20
PIECE_CHARS = 1 << 16
# Characters per encode_batch call when encoding the pieces of one long
# text: keeps the tokenizer's intermediate state (a few hundred bytes per
# token) in the tens of megabytes, and both cores busy.
_PIECE_BATCH_CHARS = 4 << 20
# A space whose previous character is not whitespace: where the pre-tokenizers
# of byte-level BPE tokenizers (GPT-2, NeoX, Llama-3 style regexes) always
# start a new pre-token, so cutting there cannot change the ids.
_SAFE_CUT = re.compile(r"(?<=\S) ")
# Texts on which the cut convention of a tokenizer is checked (`_cut_plan`):
# cutting at every safe space must give the ids of the whole text.
_CUT_PROBES = (
    "Hello world, this is a test. It's 2024: 12345 items cost $3.50 -- ok? Yes!",
    "Spaces  double   triple\tand tabs\nnew line\n\n  indented line \u00a0nbsp x\r\ny",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade \u4e2d\u6587 \u5b57\u7b26 \u65e5\u672c\u8a9e "
    "\ud55c\uad6d\uc5b4 \U0001f600 emoji \u0627\u0644\u0639\u0631\u0628\u064a\u0629 x",
    "def f(x):\n    return x ** 2  # comment\n\nclass A: pass",
    "<|endoftext|> special text <|padding|> and <s> </s> [CLS] end",
)


def split_text(text: str, split_len: int) -> list[str]:
    """The reference's split_text_and_tokenize cut: a piece ends at the first space at
    or after `split_len` characters from its start, and that space starts the next
    piece. An empty text has no pieces."""
    if split_len < 1:
        raise ValueError(f"--chunk_len_to_split must be at least 1, got {split_len}")
    pieces = []
    start, n = 0, len(text)
    while start < n:
        end = text.find(" ", start + split_len)
        if end < 0:
            end = n
        pieces.append(text[start:end])
        start = end
    return pieces


@dataclasses.dataclass(frozen=True)
class _CutPlan:
    """How a tokenizer's long texts are cut: the post-processor's ids around the
    text, and whether the space at a cut is dropped (see `piece_spans`)."""

    prefix: np.ndarray
    suffix: np.ndarray
    drop_space: bool
    exact: bool  # cutting at safe spaces reproduced the probes' ids
    safe_cut: "re.Pattern[str]" = _SAFE_CUT


def piece_spans(text: str, limit: Optional[int] = None, drop_space: bool = False,
                safe_cut: "re.Pattern[str]" = _SAFE_CUT) -> list[tuple[int, int]]:
    """Where a text is cut to bound the cost of tokenizing it: (start, end) of each piece.

    A text of at most `limit` (default PIECE_CHARS) characters is one piece. A
    longer one is cut before a *safe space* (a U+0020 whose previous character
    is not whitespace) at `limit // 2` to `limit` characters from the piece's
    start, the earliest such space; when there is none (a run without spaces),
    it is cut hard at exactly `limit` characters. Every piece has at most
    `limit` characters, so the cost is linear in the text's length whatever
    the tokenizer does on one giant "word". With `drop_space` the space at a
    safe cut belongs to no piece (tokenizers whose normalizer prepends the
    word marker to every encoded text put it back). `safe_cut` is the
    tokenizer's pattern of a safe space (`_safe_cut_pattern`: never next to one
    of its added tokens).
    """
    limit = PIECE_CHARS if limit is None else limit
    if limit < 2:
        raise ValueError(f"piece limit must be at least 2 characters, got {limit}")
    n = len(text)
    spans = []
    start = 0
    while n - start > limit:
        # endpos n - 1: a cut never leaves an empty piece behind it.
        m = safe_cut.search(text, start + limit // 2, min(start + limit + 1, n - 1))
        if m is None:
            spans.append((start, start + limit))
            start += limit
        else:
            cut = m.start()
            spans.append((start, cut))
            start = cut + 1 if drop_space else cut
    spans.append((start, n))
    return spans


def _all_safe_spans(text: str, drop_space: bool, safe_cut: "re.Pattern[str]") -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in safe_cut.finditer(text, 0, len(text) - 1):
        spans.append((start, m.start()))
        start = m.start() + 1 if drop_space else m.start()
    spans.append((start, len(text)))
    return spans


def _encode_spans(encoder, text: str, spans: list[tuple[int, int]], plan: "_CutPlan") -> np.ndarray:
    """prefix + the pieces encoded without special tokens + suffix."""
    arrays = [plan.prefix]
    batch: list[str] = []
    size = 0
    for s, e in spans:
        batch.append(text[s:e])
        size += e - s
        if size >= _PIECE_BATCH_CHARS:
            arrays.extend(encoder.encode_batch(batch, add_special_tokens=False))
            batch, size = [], 0
    if batch:
        arrays.extend(encoder.encode_batch(batch, add_special_tokens=False))
    arrays.append(plan.suffix)
    return np.concatenate(arrays).astype(np.int32, copy=False)


def _find_cut_plan(backend: tokenizers.Tokenizer, encoder) -> _CutPlan:
    """Measure which cut convention reproduces the ids of whole texts for this tokenizer.

    Byte-level BPE tokenizers (GPT-2, NeoX, most Hugging Face BPE tokenizers)
    start a pre-token at every safe space, so keeping the space at the start of
    the next piece is exact. SentencePiece-style tokenizers whose normalizer
    prepends "\u2581" to every encoded text (Llama 2, Mistral) are exact when the
    space is dropped instead. A tokenizer for which neither reproduces the
    probes is cut keeping the space (its ids may then differ around each cut).
    """
    prefix, suffix = (np.asarray(a, dtype=np.int32) for a in affixes(backend))
    safe_cut = _safe_cut_pattern(backend)
    whole = encoder.encode_batch(_CUT_PROBES)
    for drop_space in (False, True):
        plan = _CutPlan(prefix, suffix, drop_space, True, safe_cut)
        if all(np.array_equal(_encode_spans(encoder, t, _all_safe_spans(t, drop_space, safe_cut), plan), w)
               for t, w in zip(_CUT_PROBES, whole)):
            return plan
    return _CutPlan(prefix, suffix, False, False, safe_cut)


def _safe_cut_pattern(backend: tokenizers.Tokenizer) -> "re.Pattern[str]":
    """A safe space that is neither right before nor right after an added token's
    text: the tokenizer matches added tokens before normalizing, and they may
    strip the whitespace next to them, so a cut there could change the ids."""
    contents = sorted({t.content for t in backend.get_added_tokens_decoder().values() if t.content},
                      key=lambda c: (-len(c), c))
    if not contents:
        return _SAFE_CUT
    after = "".join(f"(?<!{re.escape(c)})" for c in contents)
    before = "|".join(re.escape(c) for c in contents)
    return re.compile(rf"(?<=\S){after} (?!{before})")


class TokenizerLike(Protocol):
    """What `encode_bounded` and `tokenize_documents` use of a tokenizer (`tokenizer.Tokenizer`)."""

    eos_id: int
    bos_id: Optional[int]
    adds_bos: bool

    @property
    def encoder(self):
        """The encoder backend: `encode_batch(texts, *, add_special_tokens=True, eos=None)`."""

    def _cut_plan(self) -> "_CutPlan":
        """`_find_cut_plan` of its backend and encoder, computed once."""


def encode_bounded(tok: TokenizerLike, texts: Sequence[str], *, uncut: Optional[int] = None,
                   piece: Optional[int] = None) -> list[np.ndarray]:
    """Token ids of each text (with the tokenizer's BOS/affixes, without EOS), at bounded cost.

    The rule: a text of at most `uncut` (UNCUT_CHARS, 1 Mi characters) characters is
    encoded whole, so its ids are exactly the tokenizer's. A longer text is
    cut by `piece_spans` into pieces of at most `piece` (PIECE_CHARS, 64 Ki)
    characters, the pieces are encoded without special tokens, in batches, and
    the post-processor's ids (BOS...) are put once around their concatenation.

    The effect on ids: a cut at a safe space changes nothing (shown for the
    GPT-2 pre-tokenizer regex, and checked per tokenizer on probe texts by
    `_find_cut_plan`: GPT-2, NeoX, Llama-3 style and Mistral/Llama-2 style
    tokenizers all pass). A hard cut, only in a run of more than `piece // 2`
    characters without a safe space (base64, a long number, minified code),
    stops BPE merges from crossing it: around it the ids may differ (usually
    by one token) from encoding the whole text, which still decodes to the
    same text. A tokenizer whose probes fail (`exact` False) may see such
    differences at safe cuts too.
    """
    uncut = UNCUT_CHARS if uncut is None else uncut
    texts = list(texts)
    out: list[Optional[np.ndarray]] = [None] * len(texts)
    short = [i for i, t in enumerate(texts) if len(t) <= uncut]
    if short:
        for i, ids in zip(short, tok.encoder.encode_batch([texts[i] for i in short])):
            out[i] = ids
    if len(short) < len(texts):
        plan = tok._cut_plan()
        for i, text in enumerate(texts):
            if out[i] is None:
                spans = piece_spans(text, piece, plan.drop_space, plan.safe_cut)
                out[i] = _encode_spans(tok.encoder, text, spans, plan)
    return out  # type: ignore[return-value]


def tokenize_documents(
    tok: TokenizerLike,
    texts: list[str],
    *,
    split_len: Optional[int] = None,
    remove_bos_in_chunks: bool = False,
) -> list[np.ndarray]:
    """One int32 array per text: its ids followed by EOS.

    With `split_len` the texts are cut by `split_text`, all pieces are encoded in
    one batch and concatenated per text (an empty text is then just [eos]).
    `remove_bos_in_chunks` drops the leading id of every piece after the first only
    when it is a BOS the tokenizer added (COMPAT: never an ordinary token).
    Whatever `split_len`, a text or piece longer than UNCUT_CHARS is encoded
    in pieces by `encode_bounded`, so the cost stays linear in its length.
    """
    eos = tok.eos_id
    if split_len is None:
        if all(len(t) <= UNCUT_CHARS for t in texts):
            return tok.encoder.encode_batch(texts, eos=eos)
        return [np.append(ids, np.int32(eos)) for ids in encode_bounded(tok, texts)]
    counts, pieces = [], []
    for text in texts:
        parts = split_text(text, split_len)
        counts.append(len(parts))
        pieces.extend(parts)
    encoded = encode_bounded(tok, pieces)
    drop_bos = remove_bos_in_chunks and tok.adds_bos and tok.bos_id is not None
    eos_array = np.asarray([eos], dtype=np.int32)
    out, pos = [], 0
    for count in counts:
        arrays = []
        for k in range(count):
            piece = encoded[pos + k]
            if k and drop_bos and piece[:1].tolist() == [tok.bos_id]:
                piece = piece[1:]
            arrays.append(piece)
        pos += count
        arrays.append(eos_array)
        out.append(np.concatenate(arrays))
    return out
