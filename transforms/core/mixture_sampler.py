"""A deterministic, resumable sampler over a weighted mixture of datasets, for distributed training.

The datasets ("components") are laid end to end, as `H5MixtureDataset`
does: component c's row j is index `offsets[c] + j`. `MixtureSampler`
yields such indices so that each component gets its share of the samples
(`by="samples"`) or of the loss-valid tokens (`by="tokens"`), and keeps
every property of `ResumableSampler`: an epoch's order is a pure function
of (seed, epoch, sizes, weights, tokens per row); `state_dict()` after k
indices, loaded into a fresh sampler on any machine, continues exactly;
ranks take disjoint positions of one shared order; nothing proportional to
the number of rows is held, and any position is computed directly.

    sampler = MixtureSampler([4639, 6002], [0.7, 0.3], by="tokens", tokens_per_row=[128.0, 77.8],
                             seed=0, rank=rank, world_size=world)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i in sampler:
            row = ds[i]

Shares
------
`by="samples"` (Cerebras Model Zoo's `mixture`): component c's share of
the samples is its weight over the sum of the weights. `by="tokens"`: its
share of the loss-valid tokens is; a row of c carries `tokens_per_row[c]`
such tokens on average (data_params.json's loss_valid_tokens / n_examples),
so c is drawn with probability proportional to weight / tokens_per_row.
Either way a zero weight removes the component from the draws (its rows
keep their indices, nothing yields them). The shares p_c are rounded to
multiples of 2**-31 (cumulatively, so they add up to exactly 1): the
schedule is then exact integer arithmetic in uint64, the same everywhere.

The construction: a balanced schedule, shuffled within blocks
--------------------------------------------------------------
An epoch is L positions. Position t is mapped to a slot of the epoch,
which decides the component; the component's draws decide the row.

1. The schedule of slots is low-discrepancy, not random. The components
   are the leaves of a balanced binary tree; a node with share A (in units
   of 2**-31) whose left subtree has A_L sends its k-th slot left when
   `F(k + 1) > F(k)`, with `F(k) = floor((k * A_L + A // 2) / A)` the number
   of its first k slots that go left (a Beatty sequence, rounded to the
   nearest: |F(k) - k * A_L / A| <= 1/2). A slot walks down the tree to its
   component, and its index among the slots that reached that component is
   the component's draw number. So the first k slots hold N_c(k) draws of c
   with |N_c(k) - k * p_c| <= d / 2, d = ceil(log2(components with a
   positive weight)) (each level adds at most 1/2, scaled down by the
   shares below it): 1/2 for two components, 1 for three or four. N_c(k) and
   the component and draw number of slot t cost O(d), for any k and t.
2. Positions are shuffled within blocks of BLOCK = 64 slots: position t
   takes slot `b * 64 + permute(t % 64)` of its block b = t // 64, by the
   Feistel permutation of `ResumableSampler` keyed by (seed, epoch, b) (the
   epoch's last, partial block is permuted over its own size). Without it
   the pattern of components would be periodic, and with rational weights
   rank r, which takes positions r, r + world_size, ..., could get one
   component only (weights 0.5 / 0.5 on two ranks: all of one each). With
   it a rank's positions in a block are a random subset of the block's
   slots, whose composition is within d of 64 * p_c. A block of 64 keeps
   the blocks' own deviation small (below) and is still wide enough that
   the order of components does not repeat.
3. A component cycles through all its rows before repeating one: its draw
   number j (counted from epoch 0: epoch e starts at e * N_c(L)) is row
   `permute(j % n_c, n_c, keys(seed, c, j // n_c))`, a new keyed
   permutation of its n_c rows per cycle. Over any number of epochs every
   row of c has been drawn either floor or ceil of (draws / n_c) times.

Error bound. Among the first k positions of an epoch (all ranks together),
component c has N_c(k) + e draws, e = 0 at block boundaries (k a multiple
of 64, or L): there the deviation from k * p_c is at most d / 2, however
large k is. Inside a block, e is the deviation of s = k % 64 slots drawn
without replacement from the block's: sd sqrt(s * (64 - s) / 63 * p_c *
(1 - p_c)) <= 2, and over all s of a block rarely more than
3 * sqrt(64 * p_c * (1 - p_c)) <= 12 (Kolmogorov's bound for the maximum
of a bridge: about 1e-7 per block); never more than min(s, 64 - s). Any
window of positions: twice that. i.i.d. draws (a weighted random choice per
sample) deviate by sqrt(k * p_c * (1 - p_c)), growing without bound: 22
samples after 2000 draws of p = 0.3, 70 after 20000. For tokens the
counts are as above, and what remains is which rows were drawn: without
replacement within a cycle, so c's tokens over D draws differ from
D * tokens_per_row[c] by the spread of the partial cycles only (sd at most
sigma_c * sqrt(r * (n_c - r) / (n_c - 1)) for r rows of a cycle, sigma_c
the sd of c's rows' loss-valid tokens; whole cycles add exactly their
total). i.i.d. draws add the count's own variance, k * p_c * (1 - p_c) *
tokens_per_row[c]**2, which dominates when rows are packed (sigma_c near 0).

The epoch
---------
`num_samples` given: L = num_samples positions. Otherwise, as Cerebras
2.10's `Mixture` defines a mixture's epoch ("the number of samples required
to see every sample at least once in each sub-dataset with mixture weight
> 5%"): L is the smallest length whose slots hold at least n_c draws of
every component whose normalized weight exceeds COVER_SHARE = 5% (of every
positive-weight component when none does), so the component with the
largest n_c / p_c sees each of its rows exactly once, and the others at
least once; a component of 5% or less goes through its rows across epochs
(step 3) rather than lengthening every epoch. By tokens the 5% is of the
weights as given, the token shares asked for. Every epoch has the same
length and the same draws per component (`epoch_draws`); the blocks'
permutations and the rows differ.

Where this differs from Cerebras 2.10 (`h5_map_dataset/readers.py`):
Cerebras gives component c `int(T * w_c)` consecutive indices of [0, len)
and its sampler shuffles the whole range, so an epoch's composition is
exact but a prefix's is a draw without replacement (error ~ sqrt(k)); and
index i of c reads row `i % n_c`, the same first rows repeated every epoch.
Here every prefix is balanced (above), repeats are random rows that
continue across epochs, and the epoch ends when the binding component's
draws reach n_c (Cerebras' floor of float products can leave it one short).
Cerebras also zips the unfiltered datasets with the filtered weights when
it sizes the epoch, so a zero weight before a positive one shifts the sizes
it reads; here zero-weight components are simply never drawn. It has no
by-tokens mode, and its `num_samples` spans the whole run rather than an
epoch.

Iteration, ranks and the resume rule are `ResumableSampler`'s (see its
module docstring): rank r takes positions r, r + world_size, ...;
`drop_last` cuts the epoch to a multiple of world_size; `taken` counts this
rank's yielded indices of the current epoch; `set_epoch` to another epoch
starts it at 0, and `load_state_dict` then `__iter__` continues exactly.
"""

from __future__ import annotations

import hashlib
import math
from typing import Optional, Sequence

import numpy as np

from transforms.core.sampler import MAX_ROWS, ROUNDS, RankIterator, _feistel, check_int, permute

__all__ = ["MixtureSampler", "sample_shares", "BLOCK", "COVER_SHARE", "STATE_VERSION"]

STATE_VERSION = 1  # bump when the state or the order changes: an old state is then refused, not resumed elsewhere
BY = ("samples", "tokens")
COVER_SHARE = 0.05  # Cerebras 2.10: an epoch covers every component whose weight is above 5%
_BLOCK_BITS = 6
BLOCK = 1 << _BLOCK_BITS  # a power of two: a full block's Feistel domain is exactly its slots, no cycle-walking
_SCALE_BITS = 31  # shares in units of 2**-31: k * A_L stays below 2**62 in the tree's uint64 arithmetic
_SCALE = 1 << _SCALE_BITS
_MASK64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
# The fields a state must match before it can be loaded: they fix the order and this rank's share of it.


def _check_numbers(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name}[{i}] must be a number, got {v!r}")
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{name}[{i}] must be finite and >= 0, got {v!r}")
        out.append(float(v))
    return tuple(out)


def sample_shares(weights: Sequence[float], tokens_per_row: Optional[Sequence[float]] = None) -> tuple[float, ...]:
    """Each component's share of the samples: weight (/ tokens per row, by tokens) over the sum; 0 for weight 0.

    >>> sample_shares([3, 1]), sample_shares([1, 1], tokens_per_row=[128, 32])
    ((0.75, 0.25), (0.2, 0.8))
    """
    v = _raw_shares(_check_numbers("weights", weights),
                    None if tokens_per_row is None else _check_numbers("tokens_per_row", tokens_per_row))
    total = sum(v)
    return tuple(x / total for x in v)


def _raw_shares(weights: tuple[float, ...], tokens_per_row: Optional[tuple[float, ...]]) -> list[float]:
    if not weights:
        raise ValueError("a mixture needs at least one component")
    if not any(w > 0 for w in weights):
        raise ValueError(f"at least one weight must be > 0, got {list(weights)}")
    if tokens_per_row is None:
        return list(weights)
    if len(tokens_per_row) != len(weights):
        raise ValueError(f"tokens_per_row has {len(tokens_per_row)} values for {len(weights)} components")
    for c, (w, m) in enumerate(zip(weights, tokens_per_row)):
        if w > 0 and not m > 0:
            raise ValueError(f"component {c} has weight {w} but tokens_per_row {m}: its rows carry no loss-valid "
                             "tokens, so no number of them reaches a share of the tokens")
    return [w / m if w > 0 else 0.0 for w, m in zip(weights, tokens_per_row)]


def _quantize(shares: list[float]) -> list[int]:
    """Shares as integers adding up to exactly 2**31, by rounding their cumulative sums (each off by < 2**-31)."""
    total = math.fsum(shares)
    cum, edges = 0.0, [0]
    for x in shares:
        cum += x
        edges.append(round(cum / total * _SCALE))
    edges[-1] = _SCALE
    units = [b - a for a, b in zip(edges, edges[1:])]
    for c, (x, u) in enumerate(zip(shares, units)):
        if x > 0 and u <= 0:
            raise ValueError(f"component {c}'s share {x / total:.3g} is below 2**-31: too small to schedule")
    return units


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in wrapping uint64 arithmetic (exactly defined on every platform)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _S30)
        x = x * _M1
        x = x ^ (x >> _S27)
        x = x * _M2
        return x ^ (x >> _S31)


def _keys(*fields: object) -> tuple[int, ...]:
    """ROUNDS 64-bit keys of the fields: blake2b, stable across processes, machines and versions."""
    prefix = "MixtureSampler/v1\x1f" + "\x1f".join(str(f) for f in fields) + "\x1f"
    return tuple(int.from_bytes(hashlib.blake2b(f"{prefix}{i}".encode("utf-8"), digest_size=8).digest(), "little")
                 for i in range(ROUNDS))


class _Tree:
    """The balanced schedule of slots (module docstring, step 1): a binary tree over the drawn components."""

    def __init__(self, units: list[int]):
        self.components = [c for c, u in enumerate(units) if u > 0]
        self.n = len(units)
        # Nodes as parallel lists; a child < 0 is the leaf of component -child - 1.
        self.total: list[int] = []
        self.left_total: list[int] = []
        self.children: list[tuple[int, int]] = []
        self.root = self._build(self.components, units)
        self.depth = (len(self.components) - 1).bit_length()

    def _build(self, comps: list[int], units: list[int]) -> int:
        if len(comps) == 1:
            return -comps[0] - 1
        half = len(comps) // 2
        node = len(self.total)
        self.total.append(sum(units[c] for c in comps))
        self.left_total.append(sum(units[c] for c in comps[:half]))
        self.children.append((0, 0))
        self.children[node] = (self._build(comps[:half], units), self._build(comps[half:], units))
        return node

    def _left(self, node: int, k: int) -> int:
        a, al = self.total[node], self.left_total[node]
        return (k * al + a // 2) // a

    def counts(self, k: int) -> list[int]:
        """N_c(k): each component's slots among the first k (plain ints, exact for any k)."""
        out = [0] * self.n
        stack = [(self.root, k)]
        while stack:
            node, m = stack.pop()
            if node < 0:
                out[-node - 1] += m
                continue
            left = self._left(node, m)
            stack.append((self.children[node][0], left))
            stack.append((self.children[node][1], m - left))
        return out

    def locate(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(component, draw number within the epoch) of each slot (uint64), by walking all of them down at once."""
        t = slots.astype(np.uint64, copy=True)
        node = np.full(t.shape, self.root, dtype=np.int64)
        if self.root < 0:
            return -node - 1, t
        total = np.array(self.total, dtype=np.uint64)
        left_total = np.array(self.left_total, dtype=np.uint64)
        kids = np.array(self.children, dtype=np.int64)
        one = np.uint64(1)
        for _ in range(self.depth):
            inner = node >= 0
            if not inner.any():
                break
            idx = node[inner]
            a, al, x = total[idx], left_total[idx], t[inner]
            half = a // np.uint64(2)
            # F(x) = floor((x * A_L + A // 2) / A), split as x = q * A + r so that nothing exceeds 2**63.
            f0 = (x // a) * al + ((x % a) * al + half) // a
            x1 = x + one
            f1 = (x1 // a) * al + ((x1 % a) * al + half) // a
            go_left = f1 > f0
            t[inner] = np.where(go_left, f0, x - f0)
            node[inner] = np.where(go_left, kids[idx, 0], kids[idx, 1])
        return -node - 1, t


class MixtureSampler(RankIterator):
    """Indices into a concatenation of weighted components, for one rank; resumable anywhere (module docstring).

    `sizes`: each component's rows, in concatenation order; `weights`: its
    weight (>= 0, normalized here); `by`: "samples" or "tokens" (then
    `tokens_per_row`: each component's mean loss-valid tokens per row);
    `num_samples`: the epoch's length in positions (all ranks together),
    default: Cerebras' mixture epoch (module docstring).
    """

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], *, by: str = "samples",
                 tokens_per_row: Optional[Sequence[float]] = None, num_samples: Optional[int] = None, seed: int = 0,
                 rank: int = 0, world_size: int = 1, drop_last: bool = True) -> None:
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, (Sequence, np.ndarray)):
            raise ValueError(f"sizes must be a sequence of ints, got {sizes!r}")
        sizes = tuple(check_int(f"sizes[{c}]", n) for c, n in enumerate(sizes))
        weights = _check_numbers("weights", weights)
        if by not in BY:
            raise ValueError(f"by must be 'samples' or 'tokens', got {by!r}")
        if by == "tokens":
            if tokens_per_row is None:
                raise ValueError("by='tokens' needs tokens_per_row: each component's mean loss-valid tokens per row")
            tokens_per_row = _check_numbers("tokens_per_row", tokens_per_row)
        elif tokens_per_row is not None:
            raise ValueError("tokens_per_row is used only with by='tokens'")
        if len(weights) != len(sizes):
            raise ValueError(f"{len(weights)} weights for {len(sizes)} components")
        for c, n in enumerate(sizes):
            if n < 0:
                raise ValueError(f"sizes[{c}] must be >= 0, got {n}")
            if n == 0 and weights[c] > 0:
                raise ValueError(f"component {c} has weight {weights[c]} but no rows")
        if sum(sizes) >= MAX_ROWS:
            raise ValueError(f"the components hold {sum(sizes)} rows; at most 2**63 - 1 can be indexed")
        seed, rank, world_size = check_int("seed", seed), check_int("rank", rank), check_int("world_size", world_size)
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if num_samples is not None:
            num_samples = check_int("num_samples", num_samples)
            if not 0 <= num_samples < MAX_ROWS:
                raise ValueError(f"num_samples must be in [0, 2**63 - 1], got {num_samples}")
        self.sizes, self.weights, self.by, self.tokens_per_row = sizes, weights, by, tokens_per_row
        self.num_samples, self.seed, self.rank, self.world_size = num_samples, seed, rank, world_size
        self.drop_last = bool(drop_last)

        raw = _raw_shares(weights, tokens_per_row)
        units = _quantize(raw)
        self._tree = _Tree(units)
        self.probabilities = tuple(u / _SCALE for u in units)  # the scheduled shares of the samples
        self._offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.uint64)
        self.epoch_length = num_samples if num_samples is not None else self._cover_length(weights)
        self.epoch_draws = tuple(self._tree.counts(self.epoch_length))  # N_c(L): the same every epoch
        length = self.epoch_length
        self._count = length // world_size if self.drop_last else max(0, -(-(length - rank) // world_size))
        self.epoch = 0
        self.taken = 0
        self._loaded = False  # the next __iter__ starts at `taken` even at the epoch's end (resume rule)
        self._set_keys()

    def _cover_length(self, weights: tuple[float, ...]) -> int:
        """The shortest L whose slots hold n_c draws of each covered component (module docstring, the epoch)."""
        total = sum(weights)
        drawn = [c for c in self._tree.components]
        covered = [c for c in drawn if weights[c] / total > COVER_SHARE] or drawn
        need = [(c, self.sizes[c]) for c in covered]

        def enough(length: int) -> bool:
            counts = self._tree.counts(length)
            return all(counts[c] >= n for c, n in need)

        high = 1
        while not enough(high):  # N_c is nondecreasing: double, then bisect
            high *= 2
            if high >= 2 * MAX_ROWS:
                raise ValueError("the mixture's epoch would exceed 2**63 positions: give num_samples")
        low = high // 2  # not enough (or 0)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if enough(mid) else (mid, high)
        if high >= MAX_ROWS:
            raise ValueError("the mixture's epoch would exceed 2**63 - 1 positions: give num_samples")
        return high

    def _set_keys(self) -> None:
        # Block b's round keys are the b-th outputs of splitmix64 streams seeded by blake2b of (seed, epoch):
        # computed for a whole batch of blocks at once, in uint64 arithmetic.
        self._block_base = [np.uint64(k & _MASK64) for k in _keys(self.seed, self.epoch, "blocks")]
        self._row_keys: dict = {}

    def _new_epoch(self) -> None:
        self._set_keys()

    # ------------------------------------------------------------ the order

    def _slots(self, positions: np.ndarray) -> np.ndarray:
        """The epoch's slot of each position: shuffled within its block of BLOCK (module docstring, step 2)."""
        blocks = positions >> np.uint64(_BLOCK_BITS)
        inside = positions & np.uint64(BLOCK - 1)
        out = np.empty_like(positions)
        last = self.epoch_length // BLOCK  # the partial block, if the epoch has one
        full = blocks < np.uint64(last)
        with np.errstate(over="ignore"):
            if full.any():
                stream = (blocks[full] + np.uint64(1)) * _GOLDEN
                keys = [_mix64(base + stream) for base in self._block_base]
                out[full] = _feistel(inside[full], _BLOCK_BITS, keys)
            if not full.all():
                size = self.epoch_length - last * BLOCK
                stream = np.uint64(last + 1) * _GOLDEN
                keys = [int(_mix64(np.array([base + stream]))[0]) for base in self._block_base]
                out[~full] = permute(inside[~full], size, keys)
        return (blocks << np.uint64(_BLOCK_BITS)) | out

    def _indices(self, positions: np.ndarray) -> np.ndarray:
        comps, draws = self._tree.locate(self._slots(positions))
        out = np.empty_like(positions)
        for c in np.unique(comps).tolist():
            mine = comps == c
            n = self.sizes[c]
            # Draw numbers count from epoch 0, so a component's cycles run on across epochs (step 3).
            first = self.epoch * self.epoch_draws[c]
            base, start = divmod(first, n)
            x = draws[mine] + np.uint64(start)  # < 2**64: both terms are below 2**63
            rows = x % np.uint64(n)
            cycles = x // np.uint64(n)
            got = np.empty_like(rows)
            for cycle in np.unique(cycles).tolist():
                here = cycles == cycle
                got[here] = permute(rows[here], n, self._cycle_keys(c, base + cycle))
            out[mine] = got + self._offsets[c]
        return out

    def _cycle_keys(self, component: int, cycle: int) -> tuple[int, ...]:
        key = (component, cycle)
        keys = self._row_keys.get(key)
        if keys is None:
            if len(self._row_keys) > 64:
                self._row_keys.clear()
            keys = self._row_keys[key] = _keys(self.seed, "rows", component, cycle)
        return keys

    def index_at(self, position: int) -> int:
        """The index at `position` of this epoch's order, shared by all ranks (rank r's k-th is at r + k * world_size)."""
        position = check_int("position", position)
        if not 0 <= position < self.epoch_length:
            raise ValueError(f"position must be in [0, {self.epoch_length}), got {position}")
        return int(self._indices(np.array([position], dtype=np.uint64))[0])

    def component_at(self, position: int) -> int:
        """The component drawn at `position` of this epoch's order."""
        position = check_int("position", position)
        if not 0 <= position < self.epoch_length:
            raise ValueError(f"position must be in [0, {self.epoch_length}), got {position}")
        comps, _ = self._tree.locate(self._slots(np.array([position], dtype=np.uint64)))
        return int(comps[0])

    def draws_before(self, position: int) -> tuple[int, ...]:
        """Each component's draws among this epoch's positions [0, position): exact, in O(BLOCK) work."""
        position = check_int("position", position)
        if not 0 <= position <= self.epoch_length:
            raise ValueError(f"position must be in [0, {self.epoch_length}], got {position}")
        start = position - position % BLOCK
        counts = self._tree.counts(start)
        if position > start:
            comps, _ = self._tree.locate(self._slots(np.arange(start, position, dtype=np.uint64)))
            for c, k in zip(*np.unique(comps, return_counts=True)):
                counts[int(c)] += int(k)
        return tuple(counts)

    # ------------------------------------------------------------ iteration and state

    STATE_VERSION = STATE_VERSION

    def _settings(self) -> dict:
        return {"sizes": list(self.sizes), "weights": list(self.weights), "by": self.by,
                "tokens_per_row": None if self.tokens_per_row is None else list(self.tokens_per_row),
                "num_samples": self.num_samples, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "drop_last": self.drop_last}

    def __repr__(self) -> str:
        shares = ", ".join(f"{p:.4g}" for p in self.probabilities)
        return (f"MixtureSampler(by={self.by!r}, sizes={list(self.sizes)}, sample shares [{shares}], "
                f"epoch of {self.epoch_length}, rank {self.rank} of {self.world_size})")
