"""Fill-in-the-middle (FIM): a per-row transform of packed LMData rows.

Pure: no Beam, no files. SPEC 1c describes the reference; COMPAT "FIM" says
what we match and what we fix. A row's real tokens are split at EOS into
segments (documents). Each segment independently becomes, with probability
`fim_rate`, a FIM segment: its decoded text is cut at two random character
positions into prefix / middle / suffix, each part is re-tokenized, and with
probability `spm_rate` it is laid out as SPM, else PSM. Otherwise it stays
AR (autoregressive, unchanged). With P/S/M the sentinels, E = EOS and
B = BOS (only for tokenizers that add one):

    PSM: [B] P prefix S suffix M middle E
    SPM: [B] P S suffix M prefix middle E
    AR:  [B] tokens E

For example, with msl = 6 (so x must hold 7 tokens) and one token per
character, the row `a b c E d e` (text "abc", then "de") with the draws
FIM, boundaries (1, 2), PSM for "abc" and AR for "de" plans

    P a S c M b E | d e E        (10 tokens: 3 too many)

Tokens are then removed round-robin over the segments, one per visit: the
end of the suffix, then the start of the prefix, then the start of the middle
(an AR segment is all suffix; a visit that finds its part empty only moves on
to the next part). Here: "c", "e", (switch to prefix), "d":

    x      = P a S M b E E
    input  = P a S M b E,  labels = a S M b E E,  mask = 1 1 1 1 1 1

With too few tokens, padding is appended instead and the mask is 0 on the
labels that are padding.

Deliberate differences from the reference (COMPAT "FIM"):
- randomness comes from an injected `FimDraws`; production uses `row_draws`,
  seeded by (seed, the row's identity), never numpy's global state;
- sentinel ids are exact vocabulary look-ups (`resolve_sentinels`);
- no spurious empty segment after a trailing EOS;
- the caller passes only real tokens, so padding is never FIM content;
- a row whose sentinels and EOS alone exceed msl + 1 tokens (many tiny
  documents; the reference loops forever) keeps as many leading segments as
  fit and drops the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from transforms.core.seeds import derive_seed

__all__ = [
    "AR",
    "PSM",
    "SPM",
    "FimConfig",
    "FimDraws",
    "NumpyDraws",
    "Segment",
    "assemble",
    "fim_row",
    "make_fim_config",
    "plan_row",
    "plan_segment",
    "removal_counts",
    "resolve_sentinels",
    "row_draws",
    "row_tokens",
    "split_segments",
]

PSM, SPM, AR = "PSM", "SPM", "AR"

Encode = Callable[[str], Sequence[int]]
Decode = Callable[[Sequence[int]], str]

_EMPTY = np.zeros(0, dtype=np.int32)


class FimDraws(Protocol):
    """The random source of FIM, injectable so tests can replay any draws."""

    def bernoulli(self, p: float) -> int:
        """1 with probability p, else 0."""

    def boundaries(self, n_chars: int) -> tuple[int, int]:
        """Two sorted integers, each uniform in [0, n_chars]."""


class NumpyDraws:
    """`FimDraws` over a numpy `Generator` or legacy `RandomState`, in the reference's call order.

    `bernoulli(p)` is `binomial(1, p)`; `boundaries(n)` is
    `sorted(randint(0, n + 1, size=2))` (`integers` for a Generator).
    """

    def __init__(self, rs) -> None:
        self._rs = rs
        self._integers = rs.integers if isinstance(rs, np.random.Generator) else rs.randint

    def bernoulli(self, p: float) -> int:
        return int(self._rs.binomial(1, p))

    def boundaries(self, n_chars: int) -> tuple[int, int]:
        a, b = self._integers(0, n_chars + 1, size=2)
        return (int(a), int(b)) if a <= b else (int(b), int(a))


def row_draws(seed: int, identity: str) -> NumpyDraws:
    """The production random source of one row: PCG64 seeded by (seed, "fim", identity).

    `identity` must be stable across runs and runners, e.g. the packing
    group's name and the row's index in it.
    """
    return NumpyDraws(np.random.Generator(np.random.PCG64(derive_seed(seed, "fim", identity))))


@dataclasses.dataclass(frozen=True)
class FimConfig:
    max_seq_length: int
    fim_rate: float
    spm_rate: float
    prefix_id: int
    middle_id: int
    suffix_id: int
    eos_id: int
    pad_id: int
    bos_id: Optional[int] = None  # placed before every segment (SPEC "opt_bos")
    inverted_mask: bool = False

    def __post_init__(self) -> None:
        if self.max_seq_length < 1:
            raise ValueError(f"max_seq_length must be at least 1, got {self.max_seq_length}")
        for name in ("fim_rate", "spm_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
        sentinels = {"fim_prefix_tok": self.prefix_id, "fim_middle_tok": self.middle_id,
                     "fim_suffix_tok": self.suffix_id}
        if len(set(sentinels.values())) != 3:
            raise ValueError(f"the FIM sentinel tokens must be three different tokens, got ids {sentinels}")
        for name, value in sentinels.items():
            if value == self.eos_id:
                raise ValueError(f"{name} (id {value}) is the EOS token; FIM splits documents at EOS")


def resolve_sentinels(tok, prefix_tok: str, middle_tok: str, suffix_tok: str) -> tuple[int, int, int]:
    """(prefix, middle, suffix) ids by exact vocabulary look-up (`tok.token_to_id`).

    Never the last BPE piece of the string (SPEC bug 10). A missing or unset
    token is a ValueError naming every offending flag and token.
    """
    flags = (("--fim_prefix_tok", prefix_tok), ("--fim_middle_tok", middle_tok), ("--fim_suffix_tok", suffix_tok))
    ids, problems = [], []
    for flag, token in flags:
        if not token:
            problems.append(f"{flag} is required")
            ids.append(None)
            continue
        tid = tok.token_to_id(token)
        if tid is None:
            problems.append(f"{flag} {token!r} is not a token of the vocabulary")
        ids.append(tid)
    if problems:
        name = getattr(tok, "name", "") or "the tokenizer"
        raise ValueError(f"FIM sentinel tokens missing from {name!r}: " + "; ".join(problems))
    return int(ids[0]), int(ids[1]), int(ids[2])


def make_fim_config(
    tok,
    *,
    max_seq_length: int,
    fim_rate: float,
    spm_rate: float,
    prefix_tok: str,
    middle_tok: str,
    suffix_tok: str,
    inverted_mask: bool = False,
) -> FimConfig:
    """FimConfig for a pipeline `Tokenizer`: sentinels resolved, BOS per segment iff `tok.adds_bos`.

    Pass the tokenizer the LM side was configured with (before `without_bos()`),
    so that a BOS-adding tokenizer keeps its BOS in front of every segment.
    """
    prefix_id, middle_id, suffix_id = resolve_sentinels(tok, prefix_tok, middle_tok, suffix_tok)
    return FimConfig(
        max_seq_length=max_seq_length,
        fim_rate=fim_rate,
        spm_rate=spm_rate,
        prefix_id=prefix_id,
        middle_id=middle_id,
        suffix_id=suffix_id,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        bos_id=tok.bos_id if tok.adds_bos else None,
        inverted_mask=inverted_mask,
    )


def row_tokens(row: np.ndarray, inverted_mask: bool = False) -> np.ndarray:
    """The real input tokens of an LMData (3, msl) row: input_ids where the mask is set.

    A packed row gives all msl input_ids; a padded row (no packing, remainder,
    short_seq_prob) only its real prefix, so padding never becomes FIM content.
    """
    real = row[1] == (0 if inverted_mask else 1)
    return row[0][real]


# ----------------------------------------------------------------- planning


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment's parts before truncation. AR keeps its tokens as `suffix`."""

    fmt: str
    prefix: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
    middle: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)
    suffix: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)


def split_segments(tokens: np.ndarray, eos_id: int) -> list[np.ndarray]:
    """Non-empty runs of `tokens` between EOS ids, in order.

    >>> [s.tolist() for s in split_segments(np.array([5, 0, 0, 6, 7, 0]), 0)]
    [[5], [6, 7]]

    Unlike the reference, nothing follows a trailing EOS (COMPAT "FIM").
    """
    tokens = np.asarray(tokens)
    cuts = np.flatnonzero(tokens == eos_id)
    segments, start = [], 0
    for cut in cuts.tolist():
        if cut > start:
            segments.append(tokens[start:cut])
        start = cut + 1
    if start < len(tokens):
        segments.append(tokens[start:])
    return segments


def _ids(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int32).reshape(-1)


def plan_segment(seg: np.ndarray, cfg: FimConfig, encode: Encode, decode: Decode, draws: FimDraws) -> Segment:
    """Draw one segment's format and parts, in the reference's draw order.

    `decode` must keep special tokens; `encode` must not add BOS (the BOS of
    a BOS tokenizer is placed by `assemble`).
    """
    if not draws.bernoulli(cfg.fim_rate):
        return Segment(AR, suffix=_ids(seg))
    text = decode(seg.tolist() if isinstance(seg, np.ndarray) else list(seg))
    b0, b1 = draws.boundaries(len(text))
    prefix, middle, suffix = _ids(encode(text[:b0])), _ids(encode(text[b0:b1])), _ids(encode(text[b1:]))
    fmt = SPM if draws.bernoulli(cfg.spm_rate) else PSM
    return Segment(fmt, prefix, middle, suffix)


def plan_row(tokens: np.ndarray, cfg: FimConfig, encode: Encode, decode: Decode, draws: FimDraws) -> list[Segment]:
    """Every segment of a row, planned in order (draws are consumed segment by segment)."""
    return [plan_segment(seg, cfg, encode, decode, draws) for seg in split_segments(tokens, cfg.eos_id)]


# --------------------------------------------------------------- truncation


def _pops(visits: int, s: int, p: int, m: int) -> int:
    """Tokens a segment with parts (s, p, m) loses in its first `visits` round-robin visits.

    The reference's truncate_helper pops one token per visit from the current
    part (suffix, then prefix, then middle); a visit that finds the part empty
    only moves on to the next part. So visits 0..s-1 pop the suffix, visit s
    switches, visits s+1..s+p pop the prefix, visit s+p+1 switches, and
    visits s+p+2..s+p+m+1 pop the middle.
    """
    return (min(visits, s) + min(max(visits - s - 1, 0), p) + min(max(visits - s - p - 2, 0), m))


def removal_counts(parts: Sequence[tuple[int, int, int]], diff: int) -> list[tuple[int, int, int]]:
    """(suffix, prefix, middle) tokens each segment loses when `diff` tokens must go.

    Exactly the result of the reference's one-token-at-a-time round robin
    over segments (see `_pops`), computed with a binary search on the number
    of complete rounds instead of `diff` list pops. Requires
    0 <= diff <= the total number of tokens.
    """
    n = len(parts)
    if diff <= 0 or n == 0:
        return [(0, 0, 0)] * n
    if diff > sum(s + p + m for s, p, m in parts):
        raise ValueError(f"cannot remove {diff} tokens from segments holding {sum(map(sum, parts))}")

    def total(rounds: int) -> int:
        return sum(_pops(rounds, s, p, m) for s, p, m in parts)

    # Smallest number of rounds after which `diff` tokens have gone.
    lo, hi = 1, max(s + p + m + 2 for s, p, m in parts)
    while lo < hi:
        mid = (lo + hi) // 2
        if total(mid) >= diff:
            hi = mid
        else:
            lo = mid + 1
    rounds = lo
    # Walk the last round in segment order until the last pop.
    removed = total(rounds - 1)
    visits = [rounds - 1] * n
    for i, (s, p, m) in enumerate(parts):
        visits[i] = rounds
        removed += _pops(rounds, s, p, m) - _pops(rounds - 1, s, p, m)
        if removed == diff:
            break
    out = []
    for v, (s, p, m) in zip(visits, parts):
        rs = min(v, s)
        rp = min(max(v - s - 1, 0), p)
        rm = min(max(v - s - p - 2, 0), m)
        out.append((rs, rp, rm))
    return out


# ------------------------------------------------------------------- layout


def _overhead(seg: Segment, cfg: FimConfig) -> int:
    return (1 if seg.fmt == AR else 4) + (cfg.bos_id is not None)


def assemble(segments: Sequence[Segment], cfg: FimConfig) -> np.ndarray:
    """Planned segments -> the (3, msl) int32 row: truncate or pad, lay out, shift.

    The laid-out sequence x has msl + 1 tokens: when the segments hold n
    fewer, n pads are appended, and the mask is 1 on the first msl - n
    positions (the labels that are real; the input at position msl - n is the
    final EOS, whose label is padding).
    """
    msl = cfg.max_seq_length
    segments = list(segments)
    # Sentinels and EOS alone must fit (the reference would loop forever).
    budget = msl + 1
    overhead = 0
    for k, seg in enumerate(segments):
        overhead += _overhead(seg, cfg)
        if overhead > budget:
            segments = segments[:k]
            overhead -= _overhead(seg, cfg)
            break
    sizes = [(len(s.suffix), len(s.prefix), len(s.middle)) for s in segments]
    diff = sum(map(sum, sizes)) + overhead - budget
    cuts = removal_counts(sizes, diff)

    bos = [] if cfg.bos_id is None else [np.array([cfg.bos_id], dtype=np.int32)]
    pre, mid, suf, eos = (np.array([t], dtype=np.int32) for t in (cfg.prefix_id, cfg.middle_id, cfg.suffix_id,
                                                                    cfg.eos_id))
    pieces: list[np.ndarray] = []
    for seg, (rs, rp, rm) in zip(segments, cuts):
        suffix = seg.suffix[: len(seg.suffix) - rs]
        prefix = seg.prefix[rp:]
        middle = seg.middle[rm:]
        pieces.extend(bos)
        if seg.fmt == PSM:
            pieces += [pre, prefix, suf, suffix, mid, middle, eos]
        elif seg.fmt == SPM:
            pieces += [pre, suf, suffix, mid, prefix, middle, eos]
        else:
            pieces += [suffix, eos]
    x = np.full(budget, cfg.pad_id, dtype=np.int32)
    if pieces:
        content = np.concatenate(pieces)
        assert len(content) <= budget, (len(content), budget)
        x[: len(content)] = content
        n_real = len(content)
    else:
        n_real = 0
    row = np.empty((3, msl), dtype=np.int32)
    row[0] = x[:-1]
    row[2] = x[1:]
    mask = np.zeros(msl, dtype=np.int32)
    mask[: max(n_real - 1, 0)] = 1
    row[1] = 1 - mask if cfg.inverted_mask else mask
    return row


def fim_row(
    tokens: np.ndarray,
    cfg: FimConfig,
    encode: Encode,
    decode: Decode,
    draws: FimDraws,
) -> np.ndarray:
    """The FIM row (3, msl) int32 of one LMData row's real tokens.

    `tokens`: the row's real input tokens (see `row_tokens`), at most msl of
    them for a packed row, fewer for a padded one. `encode(text)` must not add
    BOS (pass the `without_bos()` tokenizer's encode); `decode(ids)` must keep
    special tokens. `draws` is the row's random source (`row_draws` in
    production). A row without any segment (only EOS tokens) gives a row of
    padding with an all-zero mask.
    """
    return assemble(plan_row(tokens, cfg, encode, decode, draws), cfg)


def fim_block(block, cfg: FimConfig, encode: Encode, decode: Decode, seed: int):
    """RowBlock of packed LMData rows -> RowBlock of FIM rows.

    Each row draws from a generator seeded by (seed, group identity, row
    index), so a row's FIM form does not depend on where or when it was made.
    A row with nothing left to train on (only EOS tokens) is dropped and counted.
    """
    from transforms.core.records import RowBlock
    from transforms.core.stats import ROWS_DROPPED

    rows = []
    for i, row in enumerate(block.rows):
        out = fim_row(row_tokens(row), cfg, encode, decode, row_draws(seed, f"{block.group.name}/{i}"))
        if out[1].any() if not cfg.inverted_mask else not out[1].all():
            rows.append(out)
    empty = len(block.rows) - len(rows)
    block.stats.add(ROWS_DROPPED + "fim_without_loss", empty, block.group.source)
    out = np.stack(rows) if rows else np.zeros((0, 3, cfg.max_seq_length), dtype=np.int32)
    return RowBlock(block.group, out, block.stats)
