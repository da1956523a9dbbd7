"""Encoder backends: texts -> token ids, by `tokenizers`, or where each is exact by tiktoken or fastokens.

Decoding, vocabulary look-ups and everything else stay on the
`tokenizers.Tokenizer`; only encoding has three implementations, which give
the same ids and differ in speed (one thread, the bench corpus): `tokenizers`
~3 MB/s, tiktoken ~11 MB/s (`exact` proves its BPE, this module mirrors the
layers around it), fastokens 70-120 MB/s (checked, not proven: `fast`).
`select_encoder` picks the fastest exact one.

`TiktokenEncoder` reproduces `tokenizers.Tokenizer.encode` layer by layer,
with the tokenizer's own pieces where a layer is not the BPE:

1. added tokens are split out of the text first, leftmost-longest, those
   matched on the raw text (`normalized` False) before the rest is
   normalized, then those matched on normalized text (by their normalized
   content); empty pieces are dropped (`AddedVocabulary.extract_and_normalize`);
2. each other piece is normalized by the tokenizer's own normalizer object
   (Unicode normal forms only; a piece of ASCII text is left alone, as every
   normal form leaves it unchanged), gets the ByteLevel prefix space when it
   does not start with one, and is cut into words by the pre-tokenizer's
   regex, which tiktoken runs (only patterns whose two regex engines,
   Oniguruma in tokenizers and fancy-regex in tiktoken, were compared code
   point by code point: `VERIFIED_PATTERNS`);
3. each word is BPE-encoded with `exact.rank_table`'s ranks, mapped to ids;
4. the post-processor's ids (BOS...) go around the text, as `affixes` finds them.

Anything else (other normalizers or pre-tokenizers, added tokens that strip
or match single words, truncation or padding) keeps the tokenizer on
`tokenizers`. A new encoder is also compared with `tokenizers` on probe texts
before it is used, a guard against a `tokenizers` release that changes a layer.
A text whose regex split tiktoken gives up on (fancy-regex's backtracking
stack overflows on a run of about a million spaces) is encoded by `tokenizers`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import numpy as np
import tokenizers
from tokenizers import models

from transforms.core.threads import machine_cpus
from transforms.core.tokenizer.check_cache import CheckCache, cache_key
from transforms.core.tokenizer.exact import NotExact, RankTable, check_options, rank_table
from transforms.core.tokenizer.fast import DEFAULT_CHECK_SHARE, FASTOKENS, FastokensEncoder, Unavailable
from transforms.core.tokenizer.probes import PROBES

__all__ = ["AUTO", "TOKENIZERS", "TIKTOKEN", "FASTOKENS", "BACKENDS", "HfEncoder", "TiktokenEncoder", "select_encoder",
           "affixes", "VERIFIED_PATTERNS", "GPT2_PATTERN", "CL100K_PATTERN"]

AUTO, TOKENIZERS, TIKTOKEN = "auto", "tokenizers", "tiktoken"
BACKENDS = (AUTO, FASTOKENS, TIKTOKEN, TOKENIZERS)

log = logging.getLogger(__name__)

# tokenizers' ByteLevel regex (pre_tokenizers/byte_level.rs), the GPT-2 pattern.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# cl100k's pattern, as Llama-3 and OLMo-2 spell it in a Split pre-tokenizer.
CL100K_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Both match every character (each is a letter, a number, whitespace or none
# of these), so a Split that keeps the gaps between matches never has one.
VERIFIED_PATTERNS = frozenset({GPT2_PATTERN, CL100K_PATTERN})
_NORMAL_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})
_FIXED_AFFIX_PROCESSORS = frozenset({"ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing"})
# tiktoken's one special token (an empty alternation would match everywhere).
# Ordinary encoding never allows it, so there it is plain text. Where a piece
# holds added tokens matched after normalization, each is replaced by this
# marker and the piece is encoded in one call with the marker allowed: tiktoken
# then encodes the text between markers exactly as separate calls would, and
# the marker's rank is replaced by the tokens' ids. A piece that already holds
# the marker takes the slow path. ASCII first, so that skipping an occurrence
# lands on a character boundary; no backslash, as it is a re.sub replacement.
_MARKER = "\x00\x01create_hdf5_dataset\x01\x00"
_PARALLEL_CHARS = 1 << 16  # smaller batches are encoded in the calling thread
_AFFIX_PROBES = ("a", "0", "x y", ".", "\u4e00")


def affixes(backend: tokenizers.Tokenizer) -> tuple[list[int], list[int]]:
    """The ids the post-processor puts before and after the text, found empirically."""
    for probe in _AFFIX_PROBES:
        enc = backend.encode(probe, add_special_tokens=True)
        # special_tokens_mask marks post-processor tokens only, not special text.
        mask = enc.special_tokens_mask
        if 0 in mask:
            last = len(mask) - mask[::-1].index(0)
            return enc.ids[: mask.index(0)], enc.ids[last:]
    return [], []


class _RegexLimit(Exception):
    """fancy-regex gave up on a text (its backtracking stack: a run of about a million spaces)."""


class HfEncoder:
    """`tokenizers`' own encode_batch_fast (it releases the GIL and uses every core)."""

    name = TOKENIZERS

    def __init__(self, backend: tokenizers.Tokenizer, reason: Optional[str] = None):
        self._backend = backend
        self.reason = reason  # why not a faster one, when auto chose this one

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True,
                     eos: Optional[int] = None) -> list[np.ndarray]:
        """int32 ids of each text, followed by `eos` when given."""
        encodings = self._backend.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)
        if eos is None:
            return [np.asarray(e.ids, dtype=np.int32) for e in encodings]
        return [np.asarray(e.ids + [eos], dtype=np.int32) for e in encodings]


class _Core:
    """A tiktoken Encoding with the rank table of one BPE model and regex: shared, immutable."""

    def __init__(self, table: RankTable, pattern: str):
        try:
            import tiktoken
        except ImportError:
            raise NotExact("tiktoken is not installed") from None

        # The marker's rank: beyond every token's.
        self.marker = max(table.ranks.values()) + 1 if table.ids is None else len(table.ids)
        self.encoding = tiktoken.Encoding(f"create_hdf5_dataset-{len(table.ranks)}", pat_str=pattern,
                                          mergeable_ranks=table.ranks, special_tokens={_MARKER: self.marker})
        # rank -> id (the marker's -1, replaced by its added token); None when the ranks are the ids.
        self.ids = None if table.ids is None else np.append(table.ids, np.int32(-1))


_CORES: "OrderedDict[str, _Core | NotExact]" = OrderedDict()
_CORES_LOCK = threading.Lock()
_CORES_MAX = 4
_POOL: Optional[ThreadPoolExecutor] = None
_POOL_SIZE = 1
_POOL_PID = 0
_POOL_LOCK = threading.Lock()
_LOGGED: set = set()


def _pool() -> tuple[ThreadPoolExecutor, int]:
    """The process's encoding pool and its size, made on first use.

    Its size is the limit tokenizers' own (rayon) pool has: RAYON_NUM_THREADS,
    which `threads.limit_native_threads` sets to the cores one worker process
    gets before the first encode (a user's own setting wins), else every core.
    """
    global _POOL, _POOL_SIZE, _POOL_PID
    with _POOL_LOCK:
        # A forked worker process inherits the pool object but not its threads.
        if _POOL is None or _POOL_PID != os.getpid():
            env = os.environ.get("RAYON_NUM_THREADS", "").strip()
            _POOL_SIZE = int(env) if env.isdigit() and int(env) > 0 else machine_cpus()
            _POOL = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix="tiktoken")
            _POOL_PID = os.getpid()
        return _POOL, _POOL_SIZE


# Bumped whenever rank_table changes, so that no table of an older check is reused.
_TABLE_VERSION = 1


def _dump_table(table: "RankTable | NotExact") -> dict:
    return {"not_exact": str(table)} if isinstance(table, NotExact) else table.to_json()


def _load_table(data: dict) -> "RankTable | NotExact":
    if "not_exact" in data:
        if not isinstance(data["not_exact"], str):
            raise TypeError("a reason is a string")
        return NotExact(data["not_exact"])
    return RankTable.from_json(data)


# The rank table of a BPE model, or why there is none: building it checks every merged token with
# tokenizers' BPE, about 0.3 s of Python for GPT-2, held once per process and once per machine where the
# I/O layer installed its store (the oracle is tokenizers' own BPE, so its release is part of the key).
_TABLES: CheckCache["RankTable | NotExact"] = CheckCache("rank_tables", dump=_dump_table, load=_load_table, keep=4)


def _table_for(backend: tokenizers.Tokenizer, model_json: str) -> "RankTable | NotExact":
    def check() -> "RankTable | NotExact":
        model = json.loads(model_json)["model"]
        try:
            return rank_table(model, _oracle(backend, model))
        except NotExact as e:
            return e

    return _TABLES.get(cache_key(str(_TABLE_VERSION), tokenizers.__version__, model_json), check)


def _core_for(backend: tokenizers.Tokenizer, pattern: str) -> _Core:
    """The (cached) core of a tokenizer's BPE model and regex."""
    model_json = tokenizers.Tokenizer(backend.model).to_str()
    key = cache_key(model_json, pattern)
    with _CORES_LOCK:
        core = _CORES.get(key)
        if core is None:
            table = _table_for(backend, model_json)
            try:
                core = table if isinstance(table, NotExact) else _Core(table, pattern)
            except NotExact as e:
                core = e
            _CORES[key] = core
            while len(_CORES) > _CORES_MAX:
                _CORES.popitem(last=False)
        else:
            _CORES.move_to_end(key)
    if isinstance(core, NotExact):
        raise core
    return core


def _oracle(backend: tokenizers.Tokenizer, model: dict) -> Callable[[list[str]], list[list[int]]]:
    """tokenizers' BPE alone: each text is one word (no normalizer, pre-tokenizer or added tokens)."""
    if model.get("ignore_merges"):
        # The check needs the merges' own result, which ignore_merges would short-cut.
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        bpe = models.BPE(model["vocab"], merges)
    else:
        bpe = backend.model
    # The model itself, one word per call: encode_batch would build an Encoding per
    # token of the vocabulary (tens of megabytes for a moment).
    return lambda texts: [[t.id for t in bpe.tokenize(text)] for text in texts]


def _state(component) -> Optional[dict]:
    return None if component is None else json.loads(component.__getstate__())


def _pre_tokenizer(state: Optional[dict]) -> tuple[str, bool]:
    """The regex tiktoken cuts words with, and whether each piece gets a prefix space."""
    kind = (state or {}).get("type")
    if kind == "ByteLevel" and state.get("use_regex", True):
        return GPT2_PATTERN, bool(state.get("add_prefix_space"))
    if kind == "Sequence" and len(state.get("pretokenizers") or []) == 2:
        split, byte_level = state["pretokenizers"]
        if (split.get("type") == "Split" and byte_level.get("type") == "ByteLevel"
                and not byte_level.get("use_regex", True) and not byte_level.get("add_prefix_space")):
            pattern = (split.get("pattern") or {}).get("Regex")
            keeps_matches = (split.get("behavior"), bool(split.get("invert"))) in (("Removed", True),
                                                                                   ("Isolated", False))
            if pattern in VERIFIED_PATTERNS and keeps_matches:
                return pattern, False
            raise NotExact(f"its Split pre-tokenizer ({split.get('behavior')}, invert {split.get('invert')}, "
                           f"pattern {pattern!r}) is not one whose regex was verified against tiktoken's")
    raise NotExact(f"its pre-tokenizer ({json.dumps(state)[:100]}) is not a byte-level one")


def _normal_forms(state: Optional[dict]) -> bool:
    """Whether the normalizer is made of Unicode normal forms only (False: there is none)."""
    if state is None:
        return False
    kinds = [n.get("type") for n in state.get("normalizers", [])] if state.get("type") == "Sequence" \
        else [state.get("type")]
    if not all(k in _NORMAL_FORMS for k in kinds):
        raise NotExact(f"its normalizer ({', '.join(map(str, kinds))}) is not made of Unicode normal forms")
    return bool(kinds)


def _check_post_processor(state: Optional[dict]) -> None:
    kinds = [p.get("type") for p in state.get("processors", [])] if state and state.get("type") == "Sequence" \
        else [state.get("type")] if state else []
    odd = [k for k in kinds if k not in _FIXED_AFFIX_PROCESSORS]
    if odd:
        raise NotExact(f"its post-processor ({', '.join(map(str, odd))}) may add ids that depend on the text")


def _check_model(model) -> None:
    # The same checks rank_table makes, from the model's attributes: without serializing its vocabulary.
    check_options({"type": type(model).__name__, **{key: getattr(model, key, None) for key in (
        "dropout", "byte_fallback", "unk_token", "continuing_subword_prefix", "end_of_word_suffix")}})


def _check_tokenizer(backend: tokenizers.Tokenizer) -> None:
    if backend.truncation is not None or backend.padding is not None:
        raise NotExact("it truncates or pads encodings")
    if getattr(backend, "encode_special_tokens", False):
        raise NotExact("it encodes special tokens as text (encode_special_tokens)")
    for token in backend.get_added_tokens_decoder().values():
        if token.lstrip or token.rstrip or token.single_word:
            raise NotExact(f"its added token {token.content!r} strips spaces or matches single words")


def _layers(backend: tokenizers.Tokenizer) -> tuple[str, bool, Optional[Callable[[str], str]]]:
    """(regex, prefix space, normalizer) of a tokenizer tiktoken can stand in for; else NotExact
    naming every layer it cannot reproduce."""
    reasons, found = [], []
    for step in (lambda: _check_model(backend.model), lambda: _check_tokenizer(backend),
                 lambda: _normal_forms(_state(backend.normalizer)),
                 lambda: _pre_tokenizer(_state(backend.pre_tokenizer)),
                 lambda: _check_post_processor(_state(backend.post_processor))):
        try:
            found.append(step())
        except NotExact as e:
            reasons.append(str(e))
    if reasons:
        raise NotExact("; ".join(reasons))
    _, _, has_normalizer, (pattern, prefix_space), _ = found
    return pattern, prefix_space, backend.normalizer.normalize_str if has_normalizer else None


def _literal_alternation(contents: list[str]) -> Optional["re.Pattern[str]"]:
    # Python's re tries alternatives in order at the leftmost position that
    # matches: longest first gives tokenizers' leftmost-longest matching.
    if not contents:
        return None
    return re.compile("|".join(re.escape(c) for c in sorted(contents, key=lambda c: (-len(c), c))))


class TiktokenEncoder:
    """tokenizers' encode reproduced on tiktoken's BPE; NotExact from the constructor when it cannot be."""

    name = TIKTOKEN
    reason = None  # why not fastokens, when auto chose this one

    def __init__(self, backend: tokenizers.Tokenizer):
        pattern, self._prefix_space, self._normalize = _layers(backend)
        raw, normalized = {}, {}
        for i, token in backend.get_added_tokens_decoder().items():
            if not token.content:
                continue
            if token.normalized and self._normalize and self._normalize(token.content) != token.content:
                raise NotExact(f"its added token {token.content!r} changes when normalized")
            content = token.content
            table = normalized if token.normalized else raw
            if table.get(content, i) != i:
                raise NotExact(f"two added tokens match the same text {content!r}")
            table[content] = i
        self._raw, self._raw_re = raw, _literal_alternation(list(raw))
        self._normalized, self._normalized_re = normalized, _literal_alternation(list(normalized))
        self._simple = not (raw or normalized or self._normalize or self._prefix_space)
        self._backend = backend  # for the texts tiktoken's regex engine gives up on
        core = _core_for(backend, pattern)
        self._encoding, self._ids, self._marker = core.encoding, core.ids, core.marker
        self._marker_allowed = {_MARKER}
        prefix, suffix = affixes(backend)
        self._prefix = np.asarray(prefix, dtype=np.int32)
        self._suffix = np.asarray(suffix, dtype=np.int32)
        for add_special_tokens in (True, False):
            mine = self.encode_batch(PROBES, add_special_tokens=add_special_tokens)
            theirs = backend.encode_batch_fast(list(PROBES), add_special_tokens=add_special_tokens)
            for text, a, b in zip(PROBES, mine, theirs):
                if a.tolist() != b.ids:
                    raise NotExact(f"tiktoken and tokenizers disagree on the probe text {text[:40]!r}")
        probe = " x ".join(list(raw) + list(normalized))
        if probe and self.encode_batch([probe])[0].tolist() != backend.encode(probe).ids:
            raise NotExact("tiktoken and tokenizers disagree on a text of its added tokens")

    def _ranks(self, text: str, allowed: set) -> np.ndarray:
        try:
            return self._encoding.encode_to_numpy(text, allowed_special=allowed, disallowed_special=())
        except UnicodeEncodeError as e:
            # As tokenizers: a str that is no valid Unicode (a lone surrogate) is refused.
            raise TypeError(f"cannot encode text that is not valid Unicode: {e}") from None
        except ValueError as e:
            if "Regex error" not in str(e):
                raise
            raise _RegexLimit(str(e)) from None

    def _to_ids(self, ranks: np.ndarray) -> np.ndarray:
        """The token ids of tiktoken's ranks: a read-only view of them when the ranks are the ids."""
        return ranks.view(np.int32) if self._ids is None else self._ids[ranks]

    def _words(self, text: str) -> np.ndarray:
        return self._to_ids(self._ranks(text, set()))

    def _marked_words(self, piece: str) -> np.ndarray:
        """A piece with the added tokens matched after normalization, in one tiktoken call (see _MARKER)."""
        tokens = [self._normalized[m] for m in self._normalized_re.findall(piece)]
        if not tokens:
            return self._words(piece)
        ranks = self._ranks(self._normalized_re.sub(_MARKER, piece), self._marker_allowed)
        ids = self._to_ids(ranks)
        if self._ids is None:
            ids = ids.copy()  # a view of tiktoken's read-only buffer
        ids[ranks == self._marker] = tokens
        return ids

    def _text_ids(self, text: str) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for piece, token in _split(text, self._raw_re, self._raw):
            if token is not None:
                out.append(np.asarray([token], dtype=np.int32))
                continue
            if self._normalize is not None and not piece.isascii():
                piece = self._normalize(piece)
            if self._normalized_re is not None and not self._prefix_space and _MARKER not in piece:
                out.append(self._marked_words(piece))
                continue
            for word, token2 in _split(piece, self._normalized_re, self._normalized):
                if token2 is not None:
                    out.append(np.asarray([token2], dtype=np.int32))
                elif self._prefix_space and not word.startswith(" "):
                    out.append(self._words(" " + word))
                else:
                    out.append(self._words(word))
        return out

    def _encode_one(self, text: str, add_special_tokens: bool, eos: Optional[int]) -> np.ndarray:
        try:
            parts = [self._words(text)] if self._simple else self._text_ids(text)
        except _RegexLimit:
            ids = self._backend.encode(text, add_special_tokens=add_special_tokens).ids
            return np.asarray(ids if eos is None else ids + [eos], dtype=np.int32)
        if add_special_tokens and (len(self._prefix) or len(self._suffix)):
            parts = [self._prefix, *parts, self._suffix]
        if eos is not None:
            parts.append(np.asarray([eos], dtype=np.int32))
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def _encode_run(self, texts: Sequence[str], add_special_tokens: bool, eos: Optional[int]) -> list[np.ndarray]:
        return [self._encode_one(t, add_special_tokens, eos) for t in texts]

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True,
                     eos: Optional[int] = None) -> list[np.ndarray]:
        """int32 ids of each text, followed by `eos` when given; large batches on every core.

        tiktoken releases the GIL while it encodes one text, so the batch is
        cut into runs of texts of about equal size, one task per run.
        """
        texts = list(texts)
        total = sum(map(len, texts))
        if total < _PARALLEL_CHARS or len(texts) < 2:
            return self._encode_run(texts, add_special_tokens, eos)
        pool, workers = _pool()
        runs, start, size, target = [], 0, 0, total / (2 * workers)
        for i, t in enumerate(texts):
            size += len(t)
            if size >= target:
                runs.append((start, i + 1))
                start, size = i + 1, 0
        if start < len(texts):
            runs.append((start, len(texts)))
        futures = [pool.submit(self._encode_run, texts[a:b], add_special_tokens, eos) for a, b in runs]
        return [ids for f in futures for ids in f.result()]


def _split(text: str, pattern: Optional["re.Pattern[str]"], ids: dict):
    """(piece, None) for the text between added tokens, (content, id) for each added token; no empty pieces."""
    if pattern is None:
        if text:
            yield text, None
        return
    start = 0
    for m in pattern.finditer(text):
        if m.start() > start:
            yield text[start:m.start()], None
        yield m.group(), ids[m.group()]
        start = m.end()
    if start < len(text):
        yield text[start:], None


def select_encoder(backend: tokenizers.Tokenizer, mode: str, name: str, *,
                   check_share: float = DEFAULT_CHECK_SHARE, check_seed: int = 0):
    """The encoder `mode` asks for; ValueError when that one is not exact for this tokenizer.

    `tokenizers` is the reference. `tiktoken` where `exact` proves it. `fastokens` where its
    load check passes, with a share `check_share` of each job's texts checked against the
    exact encoder it would otherwise use (`fast`). `auto`: the fastest exact one, saying once
    per process why a faster one was passed over.
    """
    if mode not in BACKENDS:
        raise ValueError(f"--tokenizer_backend must be one of {', '.join(BACKENDS)}, got {mode!r}")
    if mode == TOKENIZERS:
        return HfEncoder(backend)
    reasons, noteworthy = [], False
    if mode in (AUTO, FASTOKENS):
        try:
            return FastokensEncoder(backend, lambda: _exact_reference(backend), share=check_share, seed=check_seed,
                                    tokenizer_name=name)
        except Exception as e:  # noqa: BLE001 - whatever stops the check, the ids are not vouched for
            reason = _reason(e)
            if mode == FASTOKENS:
                raise ValueError(f"--tokenizer_backend fastokens: fastokens would not give the ids of tokenizer "
                                 f"{name!r}: {reason}") from None
            reasons.append(f"not fastokens: {reason}")
            # Its absence is the installation's (the note in data_params says it); a failed check the tokenizer's.
            noteworthy = not isinstance(e, Unavailable)
    try:
        encoder = TiktokenEncoder(backend)
    except Exception as e:  # noqa: BLE001 - whatever stops the check, the ids are not vouched for
        reason = _reason(e)
        if mode == TIKTOKEN:
            raise ValueError(f"--tokenizer_backend tiktoken: tiktoken would not give the ids of tokenizer "
                             f"{name!r}: {reason}") from None
        reasons.append(f"not tiktoken: {reason}")
        encoder, noteworthy = HfEncoder(backend), True
    if reasons:
        encoder.reason = "; ".join(reasons)
    if noteworthy:
        with _CORES_LOCK:
            first = (name, encoder.reason) not in _LOGGED
            _LOGGED.add((name, encoder.reason))
        if first:
            log.warning("tokenizer %s: encoding with %s: %s", name or "(unnamed)", encoder.name, encoder.reason)
    return encoder


def _reason(e: Exception) -> str:
    return str(e) if isinstance(e, NotExact) else f"its check failed ({type(e).__name__}: {e})"


def _exact_reference(backend: tokenizers.Tokenizer):
    """The exact encoder fastokens is checked against: tiktoken where it is exact (faster), else tokenizers."""
    try:
        return TiktokenEncoder(backend)
    except Exception:  # noqa: BLE001 - any doubt: tokenizers itself
        return HfEncoder(backend)
