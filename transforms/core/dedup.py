"""Deduplication's pure core (issue #46): exact keys, MinHash signatures and their LSH bands, the similarity of a
candidate pair, connected components by rounds of grouping, and which record of a component survives.

A record is deduplicated on the token ids the job trains on (its text normalized and tokenized, a conversation
rendered): the tokens exist already, and text without spaces (Chinese, Japanese, Thai) shingles as well as
English. A shingle is, from every token on, the shortest run of whole tokens holding `shingle` characters (each
id's characters from the tokenizer's own pieces): runs of a fixed number of ids would cover a dozen characters
in English and two in Tamil, where GPT-2 spends two tokens on a character, and the threshold would not mean the
same in both (measured on the multilingual bench corpus: unrelated Tamil documents shared up to 57% of their
5-id shingles, and 3% of their 12-character ones). Everything here is a function of content, settings
and a record's stable identity, never of order or of how work was split, so a Beam stage built on it gives the
same bytes on every engine and worker count.

Near duplicates, in the stage's steps:

1. `signature`: `values` (400) values over the record's 32-bit shingle hashes by densified one-permutation
   hashing: each shingle hashed once to a bin and a value, the least value per bin, empty bins filled by
   optimal densification. The same collision probability as MinHash's (the shingles' Jaccard), at one hash
   per shingle rather than one per shingle and value; measured over 1,000 pairs per Jaccard, unbiased, with
   the spread of independent hashes (or less) from 100 shingles on and a fifth more at 20.
2. `band_keys`: one 64-bit key per band of the first `bands * rows` values (20 x 8: few elements to
   shuffle, yet a pair at 0.85 a candidate with probability 0.998); records sharing a key are candidates
   (grouped by key, each bucket yielding the pairs of its first record with every other: a star, which
   connects the bucket as well as all its pairs would).
3. `similarity`: the share of equal signature values, an unbiased estimate of the shingle Jaccard; a candidate
   is a duplicate at or above the threshold, so that bucket collisions below it are not merged.
4. `star_round`: connected components by alternating large-star and small-star rounds (Kiveris et al., 2014),
   each a grouping of edges by node: no step holds more than one node's edges. `components` runs the rounds to
   their fixed point in memory (the reference the stage's rounds are tested against, with `union_find`).
5. `survivor`: a component keeps its record of smallest identity (file relative to the input, line).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.core.reasons import DUPLICATE_EXACT, DUPLICATE_NEAR
from transforms.core.seeds import derive_seed, hash_key
from transforms.core.units import line_bases

__all__ = ["DedupConfig", "exact_key", "shingle_hashes", "sketch_keys", "signature", "band_keys", "similarity",
           "detection_probability", "large_star", "small_star", "star_round", "components", "union_find",
           "survivor", "EMPTY", "VALUE_BITS", "VALUE_DTYPE", "verification_values", "EXACT", "NEAR",
           "DROP_REASONS", "ROUNDS", "node_of", "batch_key_of", "fingerprint",
           "bucket_edges", "settled", "line_numbering", "listing_record", "size_bucket", "dedup_section", "check_dedup",
           "EARLIER", "THIS_JOB", "earlier_node", "index_settings", "index_problems", "token_chars"]

EXACT, NEAR = "exact", "near"
# How a removed record is counted among the dropped (input.dropped_by_reason): one reason per kind.
DROP_REASONS = {EXACT: DUPLICATE_EXACT, NEAR: DUPLICATE_NEAR}
COUNTER_PREFIX = "dedup."  # Stats counters: dedup.documents.<kind>, dedup.tokens.<kind>, per source
# Star rounds the stage runs. A path of 50,000 near duplicates in random order converges in 13 (14 counting the
# round that changes nothing); duplicate groups from LSH buckets are stars already and converge in one or two.
# A graph that has not converged after them fails the job, naming a node (`settled`): never a wrong answer.
ROUNDS = 16

_MAX32 = (1 << 32) - 1
EMPTY = np.uint32(_MAX32)  # every value of the signature of a record without shingles


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    kind: str  # "exact" (identical token ids) or "near" (exact, then MinHash-LSH)
    threshold: float = 0.8  # Jaccard of shingles at which two records are near duplicates
    shingle: int = 12  # characters per shingle (runs of whole tokens holding them; without a table, token ids)
    bands: int = 20  # LSH: records sharing a band's values are candidates
    rows: int = 8
    values: int = 400  # the signature's values: a candidate's estimated similarity (bands * rows of them band)
    seed: int = 0

    def __post_init__(self):
        if self.kind not in (EXACT, NEAR):
            raise ValueError(f"dedup must be exact or near, not {self.kind!r}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"dedup_threshold must lie in (0, 1], not {self.threshold}")
        if self.shingle < 1 or self.bands < 1 or self.rows < 1:
            raise ValueError("dedup shingle, bands and rows must be at least 1")
        if self.bands * self.rows > self.values:
            raise ValueError(f"dedup bands x rows ({self.bands} x {self.rows}) exceed the signature's "
                             f"{self.values} values")

    @property
    def hashes(self) -> int:
        return self.values


def exact_key(values: Sequence[np.ndarray], seed: int = 0) -> bytes:
    """A record's 16-byte content key: its token ids, each key's with its length (a prompt "ab" + completion "c"
    is not "a" + "bc"). Records of equal keys are exact duplicates."""
    h = hashlib.blake2b(digest_size=16, key=hash_key("dedup:", seed))
    for ids in values:
        ids = np.ascontiguousarray(ids, dtype="<i4")
        h.update(len(ids).to_bytes(8, "little"))
        h.update(ids.tobytes())
    return h.digest()


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 arrays (wrapping arithmetic): a bijection whose every output bit depends
    on every input bit."""
    x = np.array(x, dtype=np.uint64)  # a copy, worked on in place: a third fewer passes over memory
    if x.ndim == 0:
        x = x.reshape(1)
        return _mix64_in_place(x)[0]
    return _mix64_in_place(x)


def _mix64_in_place(x: np.ndarray) -> np.ndarray:
    """_mix64 of a uint64 array, written over it: for the hot paths' fresh temporaries, which need no copy."""
    shifted = np.empty_like(x)
    np.right_shift(x, _S30, out=shifted)
    x ^= shifted
    x *= _M1
    np.right_shift(x, _S27, out=shifted)
    x ^= shifted
    x *= _M2
    np.right_shift(x, _S31, out=shifted)
    x ^= shifted
    return x


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_MIXED_IDS: list = [np.zeros(0, dtype=np.uint64)]


def _mixed_ids(ids: np.ndarray) -> np.ndarray:
    """_mix64(ids + 1), from a table of every id up to the largest seen (grown by doubling): a gather instead of
    a record's five passes (a vocabulary's table is a few MB)."""
    table = _MIXED_IDS[0]
    top = int(ids.max()) + 1
    if top > len(table):
        with np.errstate(over="ignore"):
            table = _mix64_in_place(np.arange(1, max(top, 2 * len(table), 1 << 16) + 1, dtype=np.uint64))
        _MIXED_IDS[0] = table
    return table[ids]


def shingle_hashes(ids: np.ndarray, shingle: int, chars: Optional[np.ndarray] = None,
                   distinct: bool = True) -> np.ndarray:
    """The distinct 32-bit hashes of a record's shingles, sorted (`distinct` False: one per shingle, repeats
    kept, as MinHash can take them: the minima are the same, and the sort is a fifth of the signature's time).

    Without `chars`, a shingle is every run of `shingle` consecutive ids. With `chars` (per token id, the
    characters its text holds: `token_chars`), it is, from every token on, the shortest run of whole tokens that
    holds at least `shingle` characters, so that a shingle covers as much text in Tamil, where a tokenizer may
    spend two tokens on a character, as in English, where one token is a word. A record shorter than a shingle
    is one shingle of all its ids; a record of no ids has none.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        return np.zeros(0, dtype=np.uint64)
    if chars is not None:
        h = _char_shingles(ids, shingle, chars)
        return np.unique(h) if distinct else h
    ids = ids.astype(np.uint64)
    n = min(shingle, len(ids))
    count = len(ids) - n + 1
    with np.errstate(over="ignore"):
        h = np.full(count, np.uint64(n), dtype=np.uint64)
        for j in range(n):  # a loop over the shingle's positions, each step over every shingle at once
            h = _mix64_in_place(h ^ ids[j:j + count])
    h &= np.uint64(_MAX32)
    return np.unique(h) if distinct else h


_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2^64
_BASE_INVERSE = np.uint64(pow(int(_BASE), -1, 1 << 64))


_POWERS: dict = {}


def _powers(base: np.uint64, n: int) -> np.ndarray:
    """base^0 .. base^(n-1) modulo 2^64 (a table kept per base, grown by doubling: a record's shingles need a
    prefix of it)."""
    table = _POWERS.get(int(base))
    if table is None or len(table) < n:
        size = max(n, 2 * len(table) if table is not None else 4096)
        table = np.full(size, base, dtype=np.uint64)
        table[0] = 1
        with np.errstate(over="ignore"):
            table = np.cumprod(table, dtype=np.uint64)
        _POWERS[int(base)] = table
    return table[:n]


def _char_shingles(ids: np.ndarray, width: int, chars: np.ndarray) -> np.ndarray:
    """Shingles of whole tokens holding at least `width` characters (see shingle_hashes), each hashed as a
    polynomial of its (mixed) ids modulo 2^64: H(i, j) = sum x_t B^(j-1-t) = B^(j-1) (Q_(j-1) - Q_(i-1)) with
    Q_k = sum_(t<=k) x_t B^-t, all prefix sums, so that runs of any length hash without a loop."""
    n = len(ids)
    ends = np.concatenate(([0], np.cumsum(chars[ids], dtype=np.int64)))
    # From token i, the run ends at j (exclusive): the first j with ends[j] - ends[i] >= width.
    stop = np.searchsorted(ends, ends[:-1] + width, side="left")
    # `stop` never decreases (nor do `ends`): the runs that end inside the record are a prefix of the starts.
    count = int(np.searchsorted(stop, n, side="right"))
    if count == 0:  # shorter than a shingle: one shingle of all its ids
        starts, stop = np.zeros(1, dtype=np.int64), np.full(1, n, dtype=np.int64)
    else:
        starts, stop = np.arange(count, dtype=np.int64), stop[:count]
    with np.errstate(over="ignore"):
        x = _mixed_ids(ids) if ids.min() >= 0 else _mix64(ids.astype(np.uint64) + np.uint64(1))
        q = np.cumsum(x * _powers(_BASE_INVERSE, n), dtype=np.uint64)
        below = np.concatenate((np.zeros(1, dtype=np.uint64), q[:len(starts) - 1]))  # Q_(i-1), Q_(-1) = 0
        h = _powers(_BASE, n)[stop - 1] * (q[stop - 1] - below)
        h = _mix64_in_place(h ^ (stop - starts).astype(np.uint64))  # the run's length in: "a b" is not "ab"'s sum
    return h & np.uint64(_MAX32)


def token_chars(pieces: Sequence[bytes]) -> np.ndarray:
    """Per token id, the characters its bytes hold (the UTF-8 bytes that start one): 0 for a piece of a
    character or a control token of no text."""
    return np.fromiter((sum((b & 0xC0) != 0x80 for b in p) for p in pieces), dtype=np.int64, count=len(pieces))


def sketch_keys(hashes: int, seed: int) -> tuple[int, int, int]:
    """The signature's parameters: (its values, the key that hashes a shingle to its bin and value, the key of
    densification's choices), drawn from the seed."""
    rng = np.random.default_rng(derive_seed(seed, "dedup:minhash"))
    key, densify = (int(k) for k in rng.integers(0, 1 << 64, size=2, dtype=np.uint64))
    return hashes, key, densify


def signature(shingles: np.ndarray, bins: int, key: int, densify: int) -> np.ndarray:
    """A record's signature: `bins` uint32 values by densified one-permutation hashing (Shrivastava, "Optimal
    Densification for Fast and Accurate Minwise Hashing", 2017); all EMPTY for a record without shingles.

    Each shingle is hashed once (keyed) to a bin and a 32-bit value; a bin holds the least value of its
    shingles. A bin no shingle fell in copies the value of the first filled bin in its own keyed sequence of bins
    (the same sequence for every record), so that two records' values at a bin are equal with probability their
    shingles' Jaccard, as MinHash's are, at the cost of one hash per shingle instead of one per shingle and value
    (0.04 ms against 2.3 ms for 5,000 shingles and 300 values).
    """
    out = np.full(bins, EMPTY, dtype=np.uint32)
    if len(shingles) == 0:
        return out
    with np.errstate(over="ignore"):
        h = _mix64_in_place(np.asarray(shingles, dtype=np.uint64) ^ np.uint64(key))
        which = (((h >> np.uint64(32)) * np.uint64(bins)) >> np.uint64(32)).astype(np.intp)  # uniform in [0, bins)
        np.minimum.at(out, which, (h & np.uint64(_MAX32)).astype(np.uint32))
        filled = np.zeros(bins, dtype=bool)
        filled[which] = True
        if filled.all():
            return out
        dense, todo, attempt = out.copy(), np.flatnonzero(~filled), 0
        while len(todo):
            attempt += 1
            mixed = _mix64(np.uint64(densify) ^ (todo.astype(np.uint64) << np.uint64(20)) ^ np.uint64(attempt))
            source = (((mixed >> np.uint64(32)) * np.uint64(bins)) >> np.uint64(32)).astype(np.intp)
            found = filled[source]
            dense[todo[found]] = out[source[found]]
            todo = todo[~found]
    return dense


# Odd 64-bit multipliers of a band's values (a fixed draw: keys must agree across jobs and workers).
_BAND_MULTIPLIERS = np.random.default_rng(0x5EED_BA4D).integers(0, 1 << 63, size=256, dtype=np.uint64) * 2 + 1


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit key per band of `rows` consecutive signature values (the first bands * rows): the values'
    weighted sum modulo 2^64, the band's number mixed in (equal values in two bands are not a candidate), all
    bands at once."""
    sig = np.asarray(sig, dtype=np.uint32)[:bands * rows].reshape(bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        weights = _BAND_MULTIPLIERS[np.arange(rows) % len(_BAND_MULTIPLIERS)]
        summed = (sig * weights).sum(axis=1, dtype=np.uint64)
        return _mix64(summed ^ _mix64(np.arange(bands, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)))


VALUE_BITS = 16
VALUE_DTYPE = np.uint16


def verification_values(sig: np.ndarray) -> np.ndarray:
    """The values a candidate is verified with: each signature value's low 16 bits (b-bit minwise hashing, Li
    and König, 2010). Two records' values then agree with probability J + (1 - J) / 65536 instead of J (an
    estimate at most 0.0016 % high), for half the bytes in every join that carries them. The band keys are
    made of the whole values. A record without shingles keeps all ones (EMPTY's low bits)."""
    return (np.asarray(sig, dtype=np.uint32) & np.uint32(0xFFFF)).astype(VALUE_DTYPE)


def similarity(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The estimated Jaccard of two records' shingles: the share of equal signature values (whole, or
    `verification_values`). Records without shingles (all ones: EMPTY) are like nothing: exact duplicates of
    them are found by `exact_key`."""
    sig_a, sig_b = np.asarray(sig_a), np.asarray(sig_b)
    ones = np.iinfo(sig_a.dtype).max
    if (sig_a == ones).all() or (sig_b == ones).all():
        return 0.0
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def detection_probability(jaccard: float, config: DedupConfig) -> float:
    """The probability that a pair of records at this shingle Jaccard is found a duplicate: a candidate in some
    band (1 - (1 - s^rows)^bands), times its estimated similarity reaching the threshold (a binomial tail over
    the verification values, each equal with probability s + (1 - s) / 2^VALUE_BITS)."""
    s, k = jaccard, config.hashes
    candidate = 1 - (1 - s**config.rows) ** config.bands
    need = math.ceil(config.threshold * k - 1e-9)
    p = s + (1 - s) * 2.0**-VALUE_BITS
    tail = sum(math.comb(k, i) * p**i * (1 - p) ** (k - i) for i in range(need, k + 1))
    return candidate * tail


# ------------------------------------------------------------------- connected components


def large_star(node: int, neighbours: Iterable[int]) -> list[tuple[int, int]]:
    """Large-star at one node: every neighbour larger than it is linked to the smallest of the node and its
    neighbours. (The node and its whole neighbourhood: one group of a grouping of edges by node.)"""
    nbrs = set(neighbours)
    m = min(nbrs | {node})
    return sorted((v, m) for v in nbrs if v > node)


def small_star(node: int, neighbours: Iterable[int]) -> list[tuple[int, int]]:
    """Small-star at one node: the node and its neighbours not larger than it, all linked to the smallest of
    them. (Grouped by node, over the edges pointing from it to smaller nodes.)"""
    smaller = {v for v in neighbours if v <= node}
    m = min(smaller | {node})
    return sorted((v, m) for v in smaller | {node} if v != m)


def _adjacency(edges: Iterable[tuple[int, int]], directed_down: bool) -> dict:
    out: dict = {}
    for u, v in edges:
        if u == v:
            continue
        if directed_down:  # small-star's grouping: each edge once, at its larger end
            hi, lo = max(u, v), min(u, v)
            out.setdefault(hi, set()).add(lo)
        else:  # large-star's: both ends
            out.setdefault(u, set()).add(v)
            out.setdefault(v, set()).add(u)
    return out


def star_round(edges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """One large-star then one small-star round over an edge list: the edges after it, sorted and distinct. The
    components are unchanged; at the fixed point every edge links a node to its component's smallest node."""
    large = sorted({e for n, nbrs in _adjacency(edges, False).items() for e in large_star(n, nbrs)})
    return sorted({e for n, nbrs in _adjacency(large, True).items() for e in small_star(n, nbrs)})


def components(edges: Iterable[tuple[int, int]], max_rounds: int = 64) -> dict:
    """Each node's component label (its smallest node), by star rounds to their fixed point. Kiveris et al. prove
    O(log^2 n) rounds; `max_rounds` bounds a bug, not the data."""
    edges = sorted({(max(u, v), min(u, v)) for u, v in edges if u != v})
    for _ in range(max_rounds):
        after = star_round(edges)
        if after == edges:
            break
        edges = after
    else:
        raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
    labels = {}
    for u, m in edges:
        labels[u] = m
        labels[m] = m
    return labels


def union_find(edges: Iterable[tuple[int, int]]) -> dict:
    """Each node's component label (its smallest node), by a plain union-find: the reference the rounds are held
    against."""
    parent: dict = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find(x) for x in list(parent)}


def survivor(identities: Sequence[tuple[str, int]]) -> Optional[tuple[str, int]]:
    """Which record of a group of duplicates is kept: the smallest identity (the file's path relative to the
    input, then the 1-based line), so that neither listing order, runner nor how work was split decides."""
    return min(identities) if identities else None


# ------------------------------------------------------------------- the stage's records

# A record's stable identity, a node of the duplicate graph: (origin, path relative to the input, packing group,
# tar member or "", Document.index, output part or -1). Tuples compare in file order (the group, then the record
# within it), whatever unit read them; the part, a function of the content, comes last and never decides. A
# record of an earlier job's index (--dedup_against) has origin EARLIER, so that it is always the one kept, and
# its file line in place of group and index.
Node = tuple
EARLIER, THIS_JOB = 0, 1


def node_of(group, member: str, index: int) -> Node:
    """The identity of a record of `group` (a GroupId)."""
    return (THIS_JOB, group.relpath, group.slice_index, member, int(index), -1 if group.part is None else group.part)


def earlier_node(relpath: str, member: str, line: int) -> Node:
    """The identity of a record an earlier job's index holds (its file line, as its listing would name it)."""
    return (EARLIER, relpath, 0, member, int(line), -1)


def batch_key_of(node: Node) -> tuple:
    """The key of the batch a record is in: (relpath, packing group, part), as `GroupId` has them."""
    return (node[1], node[2], node[5])


def fingerprint(arrays: Sequence[np.ndarray], config: DedupConfig, perms,
                chars: Optional[np.ndarray] = None) -> tuple[bytes, Optional[np.ndarray]]:
    """A record's exact key and (near) its MinHash signature over the shingles of its ids, its keys' ids one after
    the other. `perms`: `sketch_keys(config.hashes, config.seed)`; `chars`: characters per token id (shingles
    of config.shingle characters; None: of config.shingle ids)."""
    key = exact_key(arrays, config.seed)
    if config.kind != NEAR:
        return key, None
    ids = arrays[0] if len(arrays) == 1 else np.concatenate([np.asarray(a, dtype=np.int64) for a in arrays])
    return key, signature(shingle_hashes(ids, config.shingle, chars, distinct=False), *perms)


def bucket_edges(nodes: Iterable[Node]) -> list[tuple[Node, Node]]:
    """The candidates of one LSH bucket: each member with the bucket's smallest (a star: it connects the bucket
    as all its pairs would, in linear edges)."""
    nodes = sorted(set(nodes))
    return [(n, nodes[0]) for n in nodes[1:]]


def settled(down: Sequence, up: Sequence) -> bool:
    """Whether a node is at the star rounds' fixed point, from its edges to smaller (`down`) and larger (`up`)
    nodes: a root (no smaller neighbour), or a leaf with one smaller neighbour and no larger one."""
    return not down or (len(set(down)) == 1 and not up)


def line_numbering(relpath: str, units: Iterable[tuple[int, int, int]]):
    """(packing group, Document.index) -> a record's line in `relpath` as the dead letters name it: 1-based in a
    text file, the 0-based row of a .parquet file. `units`: (first group, end group, lines) of the file's units
    when it was read as several (their indices count from each unit's start; see units.line_bases), else none.
    The units' bases are ordered once per file, not once per record."""
    bases = line_bases(units)
    firsts = sorted(bases)
    before = [bases[f] for f in firsts]
    first = 0 if relpath.endswith(".parquet") else 1

    def line(group: int, index: int) -> int:
        return first + index + (before[bisect.bisect_right(firsts, group) - 1] if firsts else 0)

    return line


def listing_record(node: Node, line: int, kind: str, kept: Node, kept_line: int, similarity: float,
                   earlier: Optional[str] = None) -> dict:
    """One line of OUT/dedup/: the removed record, why, and the record kept in its place (`earlier`: the index
    directory of the job that kept it, when it is an earlier job's)."""
    where = {"file": kept[1], "line": kept_line, **({"member": kept[3]} if kept[3] else {})}
    if kept[0] == EARLIER:
        where["index"] = earlier
    out = {"file": node[1], "line": line, "kind": kind, "kept": where, "similarity": round(similarity, 4)}
    if node[3]:
        out["member"] = node[3]
    return out


def index_settings(config: DedupConfig, tokenizer: str) -> dict:
    """What an index's signatures depend on (OUT's --dedup_index, index.json): a later job compares only with an
    index of the same."""
    out = {"kind": config.kind, "seed": config.seed, "tokenizer": tokenizer}
    if config.kind == NEAR:
        out.update(shingle=config.shingle, bands=config.bands, rows=config.rows, values=config.values,
                   value_bits=VALUE_BITS)
    return out


def index_problems(found: Mapping, config: DedupConfig, tokenizer: str) -> list[str]:
    """Why an index (its index.json) cannot serve a job deduplicating with `config`: [] when it can. An index of
    near signatures serves an exact job too; an exact one, only an exact job."""
    want = index_settings(config, tokenizer)
    if config.kind == EXACT and found.get("kind") == NEAR:
        want = {**index_settings(DedupConfig(NEAR, seed=config.seed), tokenizer),
                **{k: found.get(k) for k in ("shingle", "bands", "rows", "values", "value_bits")}}
    return [f"its {key} is {found.get(key)!r}, this job's {value!r}" for key, value in want.items()
            if found.get(key) != value]


def size_bucket(size: int) -> str:
    """The component-size histogram's bin of a group of `size` duplicates: 2, 3-4, 5-8, 9-16, ..."""
    if size <= 2:
        return "2"
    hi = 1 << (size - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def dedup_section(summary: dict, stats) -> dict:
    """data_params.json's `dedup`: the settings, records and tokens removed per kind (in total and per source,
    from the batches' counters), the listing's count and the component sizes (`summary`, from the stage); raises
    when the listing and the removed records disagree."""
    kinds = (EXACT, NEAR)

    def block(c) -> dict:
        return {"documents_removed": {k: int(c.get(f"{COUNTER_PREFIX}documents.{k}", 0)) for k in kinds},
                "tokens_removed": {k: int(c.get(f"{COUNTER_PREFIX}tokens.{k}", 0)) for k in kinds}}

    out = {**summary["settings"], **block(stats.totals)}
    removed = sum(out["documents_removed"].values())
    if removed != summary["listed"]:
        raise RuntimeError(f"dedup: {removed} records removed, {summary['listed']} listed")
    out["listed"] = summary["listed"]
    if "against" in summary:  # removed as duplicates of records an earlier job kept
        out["against"] = summary["against"]
    out["duplicate_groups"] = summary["groups"]
    out["group_sizes"] = dict(sorted(summary["sizes"].items(), key=lambda kv: int(kv[0].split("-")[0])))
    out["per_source"] = {src: block(c) for src, c in sorted(stats.sources.items())
                         if any(k.startswith(COUNTER_PREFIX) for k in c)}
    return out


def check_dedup(section: Mapping, inp: Mapping, listing: Optional[Mapping[str, int]]) -> list[str]:
    """`verify`'s problems with a `dedup` section: its removed records against the input's dropped ones (per
    kind, in total and per source), its `listed` count, and the records OUT/dedup/ lists per kind (`listing`,
    None when the directory is absent)."""
    problems = []
    removed = section.get("documents_removed", {})
    dropped = inp.get("dropped_by_reason", {})
    for kind, reason in DROP_REASONS.items():
        if removed.get(kind, 0) != dropped.get(reason, 0):
            problems.append(f"dedup.documents_removed.{kind} is {removed.get(kind, 0)}, input.dropped_by_reason."
                            f"{reason} is {dropped.get(reason, 0)}")
        by_source = sum(s.get("documents_removed", {}).get(kind, 0) for s in section.get("per_source", {}).values())
        if by_source != removed.get(kind, 0):
            problems.append(f"dedup.per_source removes {by_source} {kind} duplicates, the total is "
                            f"{removed.get(kind, 0)}")
    if section.get("listed") != sum(removed.values()):
        problems.append(f"dedup.listed is {section.get('listed')}, {sum(removed.values())} records were removed")
    if listing is None:
        if sum(removed.values()):
            problems.append("dedup: the removed records are not listed (no dedup/ directory)")
    else:
        for kind in DROP_REASONS:
            if listing.get(kind, 0) != removed.get(kind, 0):
                problems.append(f"dedup/ lists {listing.get(kind, 0)} {kind} duplicates, dedup.documents_removed."
                                f"{kind} is {removed.get(kind, 0)}")
    return problems
