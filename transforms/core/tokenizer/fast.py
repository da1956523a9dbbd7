"""The fastokens encoder: tokenizers' ids an order of magnitude faster, trusted only as far as it is checked.

fastokens (Apache-2.0, Rust) reads a `tokenizer.json` and encodes it with its
own pipeline: PCRE2 for the pre-tokenizer's regex, its own BPE and a per-word
cache, `encode_batch_flat` handing back one flat buffer of ids. Measured here
on one thread it runs at 50-170 MB/s where tiktoken runs at ~11 and
`tokenizers` at ~3. Unlike tiktoken's BPE (`exact`), there is no argument
that its ids are tokenizers' ids: it is a re-implementation of every layer.
So it is used only behind three checks, none of which rests on its claims:

1. **At load, per vocabulary** (`vocabulary_check`, cached by the tokenizer's
   JSON, fastokens' release and the check's version, in the process and in
   the user's cache directory): the probe texts the tiktoken
   backend uses, with and without special tokens; every token of the
   vocabulary alone (its decoded text: BPE must rebuild it, and the
   pre-tokenizer must leave it whole or cut it as tokenizers does); the same
   tokens run together in a seeded order (words meeting at every kind of
   boundary); and the added tokens between text. Any difference and the
   tokenizer stays on its exact backend, saying why.
2. **In tests** (`tests/test_fast_encoder.py`): every shared corpus and
   tokenizer, generated text, and the same texts in different orders,
   interleavings and threads (a per-word cache that leaked state between
   texts would show there).
3. **In every job** (`FastokensEncoder.encode_batch`): a fixed share of the
   texts, drawn by a seeded hash of each text (so the same texts are checked
   whatever the batching, runner or worker count), is encoded again by the
   reference encoder and compared. A difference is never written: that call
   is encoded again whole by the reference, the process stops using
   fastokens for the rest of the job, says why, and the job's data_params
   counts it (`cross_check`).

The reference is the exact encoder the tokenizer would use without fastokens:
tiktoken where `exact` proves it, else `tokenizers` itself.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import zlib
from contextlib import contextmanager
from typing import Optional, Sequence

import numpy as np
import tokenizers

from transforms.core.tokenizer.check_cache import CheckCache, cache_key
from transforms.core.tokenizer.exact import NotExact
from transforms.core.tokenizer.probes import PROBES

__all__ = ["FASTOKENS", "FastokensEncoder", "Unavailable", "Tally", "tally", "CHECK_FIELDS", "vocabulary_check",
           "sampled", "DEFAULT_CHECK_SHARE"]

FASTOKENS = "fastokens"
# The share of texts every job encodes twice. At 1/64 the reference (tiktoken at ~11 MB/s a core) adds
# about a tenth of fastokens' own time; a systematic error (one that shows on one text in a thousand)
# is caught within the first few thousand texts of a job.
DEFAULT_CHECK_SHARE = 1 / 64
# The first characters of a text (and its length) name it for the draw: hashing all of a long text would
# cost more than encoding it with fastokens.
_NAME_CHARS = 4096
_RUN_TOKENS = 64  # vocabulary tokens per text of the run-together check
_MIN_FASTOKENS = (0, 3, 5)  # the first release measured exact here

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Tally:
    """What the cross-check did during one `tally()` block: in this thread only."""

    texts: int = 0  # texts encoded by fastokens
    checked: int = 0  # of those, encoded again by the reference
    checked_chars: int = 0
    mismatches: int = 0  # checked texts whose ids differed (all re-encoded by the reference)
    fallback_texts: int = 0  # texts encoded by the reference because fastokens was switched off

    def add(self, other: "Tally") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


# The cross-check's counters, as data_params.json's tokenizer.cross_check names them.
CHECK_FIELDS = tuple(f.name for f in dataclasses.fields(Tally))
_LOCAL = threading.local()


@contextmanager
def tally():
    """Count the cross-check of every fastokens call this thread makes inside the block."""
    outer = getattr(_LOCAL, "tally", None)
    current = _LOCAL.tally = Tally()
    try:
        yield current
    finally:
        _LOCAL.tally = outer
        if outer is not None:
            outer.add(current)


def _count(**deltas: int) -> None:
    current = getattr(_LOCAL, "tally", None)
    if current is not None:
        for name, value in deltas.items():
            setattr(current, name, getattr(current, name) + value)


def sampled(texts: Sequence[str], share: float, seed: int) -> list[int]:
    """Indices of the texts the cross-check takes: a seeded CRC of each text's start and length.

    A text's draw depends only on the text, the share and the seed, never on
    the batch it arrives in, so a job checks the same texts however it is split.
    """
    if share <= 0:
        return []
    if share >= 1:
        return list(range(len(texts)))
    threshold = int(share * (1 << 32))
    start = zlib.crc32(seed.to_bytes(8, "little", signed=False))
    out = []
    for i, text in enumerate(texts):
        name = text[:_NAME_CHARS].encode("utf-8", "surrogatepass") + len(text).to_bytes(8, "little")
        if zlib.crc32(name, start) < threshold:
            out.append(i)
    return out


class Unavailable(NotExact):
    """fastokens is not installed, or in a release older than the one checked here: nothing about the tokenizer."""


def _fastokens():
    try:
        import fastokens
        from importlib.metadata import version
    except ImportError:
        raise Unavailable("fastokens is not installed") from None
    release = version("fastokens")
    parts = tuple(int(p) for p in release.split(".")[:3] if p.isdigit())
    if parts < _MIN_FASTOKENS:
        raise Unavailable(f"fastokens {release} is older than the first release checked here "
                       f"({'.'.join(map(str, _MIN_FASTOKENS))})")
    return fastokens, release


def _flat(native, texts: list[str], add_special_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
    try:
        ids, offsets = native.encode_batch_flat(texts, add_special_tokens=add_special_tokens)
    except UnicodeEncodeError as e:
        # As tokenizers and the tiktoken backend: a str that is no valid Unicode is refused.
        raise TypeError(f"cannot encode text that is not valid Unicode: {e}") from None
    # Ids are below 2**31 (vocabularies are far smaller), so the uint32 buffer reads as int32 as it is.
    return np.frombuffer(ids, dtype=np.int32), np.frombuffer(offsets, dtype=np.uint64).astype(np.int64)


def _split(ids: np.ndarray, offsets: np.ndarray, eos: Optional[int]) -> list[np.ndarray]:
    """Each text's ids out of the flat buffer, followed by `eos` when given (one copy of the buffer)."""
    n = len(offsets) - 1
    bounds = offsets.tolist()
    if eos is None:
        return [ids[a:b] for a, b in zip(bounds, bounds[1:])]
    out = np.insert(ids, offsets[1:], np.int32(eos))
    # Text i's ids and EOS sit i places right of its ids in the buffer: after the EOS of the i before it.
    return [out[a + i:b + i + 1] for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]


# Bumped whenever vocabulary_check changes, so that no result of an older check is reused.
_CHECK_VERSION = 1


def _reason(value) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise TypeError("a reason is a string or None")
    return value


# key -> None (passed) or the reason it failed. The check costs about a second per 50k tokens of
# vocabulary, so it is made once per process, and once per machine where the I/O layer installed its
# store and a cache directory is writable (every worker process of a job, and every job, builds the
# same tokenizers).
_CHECKS: CheckCache[Optional[str]] = CheckCache(
    "fastokens_checks", dump=lambda reason: {"reason": reason}, load=lambda data: _reason(data["reason"]))


def vocabulary_check(backend: tokenizers.Tokenizer, native, reference) -> Optional[str]:
    """None when fastokens gives the exact ids on every probe of this vocabulary, else what differed.

    The probes with and without the post-processor's ids; the vocabulary's
    texts (alone, run together, spaced) without them, as the affixes were
    just checked. The exact ids are the reference encoder's (tiktoken where
    `exact` proves it, several times faster than tokenizers on the ~200k texts).
    """
    probes = [*PROBES, *(f"x{a} y {a}z\n{a}" for a in _added(backend))]
    for texts, add_special_tokens in ((probes, True), (probes, False), (_vocabulary_texts(backend), False)):
        theirs = reference.encode_batch(texts, add_special_tokens=add_special_tokens)
        ids, offsets = _flat(native, texts, add_special_tokens)
        lengths = np.fromiter(map(len, theirs), dtype=np.int64, count=len(theirs))
        if np.array_equal(np.diff(offsets), lengths) and np.array_equal(ids, np.concatenate([*theirs, ids[:0]])):
            continue
        for i, (text, expected) in enumerate(zip(texts, theirs)):
            if not np.array_equal(ids[offsets[i]:offsets[i + 1]], expected):
                return (f"fastokens and {reference.name} disagree on the probe text {text[:40]!r} "
                        f"(add_special_tokens {add_special_tokens})")
    return None


def _added(backend: tokenizers.Tokenizer) -> list[str]:
    return [t.content for _, t in sorted(backend.get_added_tokens_decoder().items()) if t.content]


def _vocabulary_texts(backend: tokenizers.Tokenizer) -> list[str]:
    """Every token's text alone, then all of them run together and spaced, in a seeded order."""
    size = backend.get_vocab_size(with_added_tokens=True)
    pieces = [p for p in backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False) if p]
    order = pieces[:]
    random.Random(0).shuffle(order)
    runs = ["".join(order[i:i + _RUN_TOKENS]) for i in range(0, len(order), _RUN_TOKENS)]
    spaced = [" ".join(order[i:i + _RUN_TOKENS]) for i in range(0, len(order), _RUN_TOKENS * 8)]
    return [*pieces, *runs, *spaced]


class FastokensEncoder:
    """fastokens' encode_batch_flat behind the load check and the in-job cross-check (module doc)."""

    name = FASTOKENS

    def __init__(self, backend: tokenizers.Tokenizer, reference, *, share: float = DEFAULT_CHECK_SHARE,
                 seed: int = 0, tokenizer_name: str = ""):
        fastokens, self.release = _fastokens()
        # An encoder, or a function that builds one: building tiktoken's costs ~0.7 s, which a process
        # that finds the load check cached and never samples a text (the launcher) need not pay.
        self._reference = None if callable(reference) and not hasattr(reference, "encode_batch") else reference
        self._make_reference = reference
        self._reference_lock = threading.Lock()
        self._share = float(share)
        self._seed = int(seed)
        self._name = tokenizer_name or "(unnamed)"
        self._off: Optional[str] = None  # why this process stopped using fastokens
        self._off_lock = threading.Lock()
        state = backend.to_str()
        try:
            self._native = fastokens.Tokenizer.from_json_str(state)
        except Exception as e:  # noqa: BLE001 - a layer fastokens does not implement
            raise NotExact(f"fastokens cannot load it ({type(e).__name__}: {str(e)[:200]})") from None
        key = cache_key(str(_CHECK_VERSION), self.release, state)
        reason = _CHECKS.get(key, lambda: vocabulary_check(backend, self._native, self.reference))
        if reason is not None:
            raise NotExact(reason)
        if self._reference is None:
            # Built now on another thread, while the job is planned and the first texts are read: the first
            # sampled text would otherwise wait for it (tiktoken's rank table takes ~0.4 s).
            threading.Thread(target=lambda: self.reference, name="fastokens-reference", daemon=True).start()

    @property
    def reference(self):
        """The exact encoder the cross-check compares with, and falls back to."""
        if self._reference is None:
            with self._reference_lock:
                if self._reference is None:
                    self._reference = self._make_reference()
        return self._reference

    @property
    def switched_off(self) -> Optional[str]:
        """Why this process encodes with the reference instead, after a cross-check found a difference."""
        return self._off

    @property
    def share(self) -> float:
        return self._share

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True,
                     eos: Optional[int] = None) -> list[np.ndarray]:
        """int32 ids of each text, followed by `eos` when given; a seeded share checked against the reference."""
        texts = list(texts)
        if self._off is not None:
            _count(fallback_texts=len(texts))
            return self.reference.encode_batch(texts, add_special_tokens=add_special_tokens, eos=eos)
        try:
            ids, offsets = _flat(self._native, texts, add_special_tokens)
        except TypeError:
            raise
        except Exception as e:  # noqa: BLE001 - e.g. a PCRE2 resource limit on a pathological text
            _count(fallback_texts=len(texts))
            log.debug("fastokens failed on a batch (%s: %s); encoded by %s", type(e).__name__, e,
                      self.reference.name)
            return self.reference.encode_batch(texts, add_special_tokens=add_special_tokens, eos=eos)
        out = _split(ids, offsets, eos)
        picked = sampled(texts, self._share, self._seed)
        _count(texts=len(texts), checked=len(picked), checked_chars=sum(len(texts[i]) for i in picked))
        if picked:
            expected = self.reference.encode_batch([texts[i] for i in picked],
                                                    add_special_tokens=add_special_tokens, eos=eos)
            wrong = [i for i, e in zip(picked, expected) if not np.array_equal(out[i], e)]
            if wrong:
                _count(mismatches=len(wrong))
                self._switch_off(texts[wrong[0]], len(wrong), len(picked))
                _count(fallback_texts=len(texts))
                return self.reference.encode_batch(texts, add_special_tokens=add_special_tokens, eos=eos)
        return out

    def _switch_off(self, text: str, wrong: int, checked: int) -> None:
        reason = (f"fastokens gave other ids than {self.reference.name} on {wrong} of {checked} checked texts "
                  f"(the first begins {text[:40]!r})")
        with self._off_lock:
            first = self._off is None
            self._off = self._off or reason
        if first:
            log.warning("tokenizer %s: %s; this worker encodes with %s from now on, and that batch was "
                        "encoded again", self._name, reason, self.reference.name)
