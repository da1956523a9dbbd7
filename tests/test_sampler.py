"""ResumableSampler: permutations, rank shares, resume at any step, pinned orders, shuffle quality, O(1) memory.

The statistical tests use fixed seeds, so they are deterministic; each bound
is set where a uniform random permutation would break it with probability
about 1e-6 or less, so a failure means structure in the order, not bad luck.
"""

from __future__ import annotations

import ast
import json
import math
import tracemalloc
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core import sampler as sampler_module
from transforms.core.sampler import ResumableSampler, epoch_keys, permute

SIZES = [1, 2, 3, 4, 5, 7, 8, 16, 1000, 1024, 1025, 7919]  # 7919 is prime; 1024/1025: no walk / longest walks


def order(n: int, seed: int = 0, epoch: int = 0, **kwargs) -> list[int]:
    s = ResumableSampler(n, seed=seed, **kwargs)
    s.set_epoch(epoch)
    return list(s)


def _reference_permute(position: int, n: int, keys) -> int:
    """The documented algorithm in plain Python ints (masked to 64 bits), independent of numpy's typing rules."""
    mask, bits = (1 << 64) - 1, max(2, (n - 1).bit_length())

    def encrypt(x: int) -> int:
        high, low = bits // 2, bits - bits // 2
        for key in keys:
            right = x & ((1 << low) - 1)
            z = ((right ^ key) + 0x9E3779B97F4A7C15) & mask
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            z ^= z >> 31
            x = (right << high) | ((x >> low) ^ (z & ((1 << high) - 1)))
            high, low = low, high
        return x

    x = encrypt(position)
    while x >= n:
        x = encrypt(x)
    return x


# ---------------------------------------------------------------- permutations


@pytest.mark.parametrize("n", SIZES)
def test_every_epoch_is_a_permutation(n):
    for epoch in range(3):
        assert sorted(order(n, seed=5, epoch=epoch)) == list(range(n))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 3000), seed=st.integers(-(2**70), 2**70), epoch=st.integers(0, 10**6))
def test_permutation_for_any_size_and_seed(n, seed, epoch):
    got = order(n, seed=seed, epoch=epoch)
    assert sorted(got) == list(range(n))
    assert all(type(i) is int for i in got[:5])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 2**63), seed=st.integers(0, 2**64), epoch=st.integers(0, 1000), data=st.data())
def test_numpy_matches_plain_int_reference(n, seed, epoch, data):
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8))
    keys = epoch_keys(seed, epoch)
    assert permute(positions, n, keys).tolist() == [_reference_permute(p, n, keys) for p in positions]


def test_index_at_is_random_access_into_the_order():
    s = ResumableSampler(1025, seed=3, rank=2, world_size=3, drop_last=False)
    s.set_epoch(4)
    mine = list(s)
    assert mine == [s.index_at(2 + 3 * k) for k in range(len(mine))]
    assert order(1025, seed=3, epoch=4) == [s.index_at(p) for p in range(1025)]
    with pytest.raises(ValueError):
        s.index_at(1025)


def test_no_shuffle_is_file_order():
    assert order(10, shuffle=False, epoch=3) == list(range(10))
    assert order(10, shuffle=False, rank=1, world_size=3, drop_last=False) == [1, 4, 7]


def test_no_rows_yields_nothing():
    s = ResumableSampler(0)
    assert len(s) == 0 and list(s) == [] and list(s) == []
    assert order(3, world_size=4) == [] and order(3, rank=3, world_size=4, drop_last=False) == []


# ---------------------------------------------------------------- ranks


@pytest.mark.parametrize("n", [0, 1, 5, 7, 1000, 1025])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_are_disjoint_and_cover_the_rows(n, world_size, drop_last):
    shares = []
    for rank in range(world_size):
        s = ResumableSampler(n, seed=11, rank=rank, world_size=world_size, drop_last=drop_last)
        s.set_epoch(2)
        shares.append(list(s))
        assert len(shares[-1]) == len(s)
    rows = [i for share in shares for i in share]
    assert len(rows) == len(set(rows))  # disjoint
    counts = {len(share) for share in shares}
    if drop_last:
        assert counts == {n // world_size}
        assert len(rows) == n - n % world_size
    else:
        assert sorted(rows) == list(range(n))
        assert max(counts) - min(counts) <= 1


# ---------------------------------------------------------------- orders differ


def test_epochs_and_seeds_give_unrelated_orders():
    # Positions where two orders agree: about Poisson(1) for independent uniform permutations; P(>= 10) ~ 1e-7.
    n = 1000
    orders = [order(n, seed=0, epoch=e) for e in range(5)] + [order(n, seed=s, epoch=0) for s in (1, 2, 2**40)]
    for i, a in enumerate(orders):
        for b in orders[i + 1:]:
            assert sum(x == y for x, y in zip(a, b)) < 10


# ---------------------------------------------------------------- resume


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 2000), world_size=st.integers(1, 8), epoch=st.integers(0, 20), seed=st.integers(0, 2**32),
       shuffle=st.booleans(), drop_last=st.booleans(), data=st.data())
def test_resume_after_any_step_equals_an_uninterrupted_run(n, world_size, epoch, seed, shuffle, drop_last, data):
    rank = data.draw(st.integers(0, world_size - 1), label="rank")
    settings_ = dict(seed=seed, shuffle=shuffle, rank=rank, world_size=world_size, drop_last=drop_last)
    full = order(n, epoch=epoch, **settings_)
    k = data.draw(st.integers(0, len(full)), label="k")

    first = ResumableSampler(n, **settings_)
    first.set_epoch(epoch)
    assert list(islice(iter(first), k)) == full[:k]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["taken"] == k and state["epoch"] == epoch

    fresh = ResumableSampler(n, **settings_)
    fresh.load_state_dict(state)
    fresh.set_epoch(epoch)  # what a training loop does after loading: keeps the position
    assert list(fresh) == full[k:]  # empty when the saved run had finished the epoch
    assert list(fresh) == full  # that pass reached the end: the next starts over
    # The interrupted sampler itself continues the same way, unless its pass had already taken everything.
    assert list(first) == (full[k:] if k < len(full) else full)


def test_state_dict_is_plain_json():
    s = ResumableSampler(100, seed=3, rank=1, world_size=2)
    next(iter(s))
    state = s.state_dict()
    assert state == {"version": 1, "num_rows": 100, "seed": 3, "shuffle": True, "rank": 1, "world_size": 2,
                     "drop_last": True, "epoch": 0, "taken": 1}
    assert json.loads(json.dumps(state)) == state


def test_state_at_an_epoch_end_and_set_epoch():
    s = ResumableSampler(50, seed=1)
    s.set_epoch(1)
    it = iter(s)
    assert list(islice(it, 10)) == order(50, seed=1, epoch=1)[:10]
    s.set_epoch(1)  # same epoch: nothing changes
    assert s.taken == 10
    s.set_epoch(2)  # another epoch: from its start
    assert s.taken == 0 and list(s) == order(50, seed=1, epoch=2)
    state = s.state_dict()
    assert state["taken"] == 50
    fresh = ResumableSampler(50, seed=1)
    fresh.load_state_dict(state)
    assert list(fresh) == []  # the saved run had finished epoch 2
    assert list(fresh) == list(s) == order(50, seed=1, epoch=2)  # passes after a finished one start over
    it = iter(s)
    next(it)
    assert list(s) == order(50, seed=1, epoch=2)[1:]  # a pass that stopped early is continued


BASE = dict(num_rows=100, seed=3, shuffle=True, rank=1, world_size=4, drop_last=True)
OTHER = dict(num_rows=101, seed=4, shuffle=False, rank=2, world_size=3, drop_last=False)


@pytest.mark.parametrize("field", sorted(OTHER))
def test_load_with_a_different_setting_names_it(field):
    state = ResumableSampler(**BASE).state_dict()
    state[field] = OTHER[field]
    with pytest.raises(ValueError, match=field):
        ResumableSampler(**BASE).load_state_dict(state)


@pytest.mark.parametrize("field, value", [("shuffle", 1), ("version", 2), ("taken", 26), ("taken", -1),
                                          ("epoch", -1), ("taken", None)])
def test_load_rejects_bad_states(field, value):
    state = ResumableSampler(**BASE).state_dict()
    state[field] = value
    with pytest.raises(ValueError, match=field):
        ResumableSampler(**BASE).load_state_dict(state)
    del state[field]
    with pytest.raises(ValueError, match=field):
        ResumableSampler(**BASE).load_state_dict(state)


@pytest.mark.parametrize("kwargs, field", [
    (dict(num_rows=-1), "num_rows"), (dict(num_rows=2.0), "num_rows"), (dict(num_rows=2**63 + 1), "num_rows"),
    (dict(num_rows=10, world_size=0), "world_size"),
    (dict(num_rows=10, rank=-1), "rank"), (dict(num_rows=10, rank=2, world_size=2), "rank"),
])
def test_arguments_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ResumableSampler(**kwargs)
    with pytest.raises(ValueError, match="epoch"):
        ResumableSampler(10).set_epoch(-1)


# ---------------------------------------------------------------- pinned orders


def test_orders_are_pinned():
    """A change of algorithm, key derivation or arithmetic changes these: it would silently reorder resumed runs."""
    s = ResumableSampler(1000, seed=0)
    s.set_epoch(0)
    assert list(islice(s, 20)) == [340, 698, 562, 429, 939, 879, 88, 789, 39, 497,
                                   27, 288, 459, 890, 688, 64, 197, 11, 542, 702]
    s = ResumableSampler(10**9, seed=7, rank=1, world_size=4)
    s.set_epoch(3)
    assert list(islice(s, 20)) == [315717158, 897120866, 180979377, 803883089, 263873504, 361502685, 821989483,
                                   941458142, 869645493, 657599713, 619652547, 13594108, 64720731, 587421029,
                                   98664548, 449238797, 81142445, 261472330, 45274773, 1837753]


# ---------------------------------------------------------------- shuffle quality


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [10_000, 2**14 + 1])  # 2**14 + 1: the domain is nearly twice n, the most cycle-walking
def test_order_is_not_structured(n, seed):
    idx = np.array(order(n, seed=seed), dtype=np.float64)
    pos = np.arange(n, dtype=np.float64)
    # Position and row uncorrelated: r has standard deviation 1 / sqrt(n) = 0.01 under a uniform permutation,
    # so |r| >= 0.05 is a 5-sigma event (~6e-7). Pearson on positions and rows is also Spearman here (both are ranks).
    assert abs(np.corrcoef(pos, idx)[0, 1]) < 0.05
    # Neighbouring positions holding neighbouring rows: about Poisson(2) for a uniform permutation; P(>= 20) ~ 1e-11.
    assert np.sum(np.abs(np.diff(idx)) == 1) < 20
    # Rows close by in the order are not close in the file: each block of 100 positions spreads over the rows
    # (mean gap between its sorted rows about n / 100; a structured order would concentrate them).
    blocks = np.sort(idx[: n // 100 * 100].reshape(-1, 100), axis=1)
    assert np.all(blocks[:, -1] - blocks[:, 0] > n / 2)  # a block within half the file: P < 100 * 2**-99


def _chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper gamma Q(df / 2, x / 2) by its finite series, in logs."""
    h = x / 2
    if h <= 0:
        return 1.0
    if df % 2 == 0:
        base, powers = 0.0, [(i, i + 1) for i in range(df // 2)]  # e^-h h^i / Gamma(i + 1)
    else:
        base, powers = math.erfc(math.sqrt(h)), [(i - 0.5, i + 0.5) for i in range(1, (df + 1) // 2)]
    return base + sum(math.exp(p * math.log(h) - math.lgamma(g) - h) for p, g in powers)


# Tiny domains, whose Feistel halves have 1 or 2 bits: 5 and 6 cycle-walk in 8, 8 and 16 fill theirs.
# With 6 rounds, 5, 6 and 8 fail here (p < 1e-6); hence ROUNDS = 12.
@pytest.mark.parametrize("n", [5, 6, 8, 16])
def test_small_orders_are_uniform_over_keys(n):
    """Over many keys, the (first, second) rows are uniform over the n (n - 1) ordered pairs.

    A Pearson chi-square with n (n - 1) - 1 degrees of freedom; a uniform permutation family exceeds the
    bound with probability 1e-6.
    """
    keys, cells = 2400, n * (n - 1)
    counts = np.zeros((n, n), dtype=np.int64)
    for seed in range(keys):
        first, second = permute([0, 1], n, epoch_keys(seed, 0)).tolist()
        counts[first, second] += 1
    observed = counts[~np.eye(n, dtype=bool)]
    expected = keys / cells
    assert _chi2_sf(float(np.sum((observed - expected) ** 2) / expected), cells - 1) > 1e-6


# ---------------------------------------------------------------- memory and purity


def test_memory_does_not_grow_with_rows():
    tracemalloc.start()
    try:
        s = ResumableSampler(10**9, seed=1, rank=3, world_size=8)
        s.set_epoch(2)
        got = list(islice(s, 5000))
        s.load_state_dict(s.state_dict())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(set(got)) == 5000
    assert peak < 3 * 2**20  # one batch of positions and its ints; a permutation of 1e9 rows would be 8 GB


def test_module_is_pure():
    tree = ast.parse(Path(sampler_module.__file__).read_text())
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"apache_beam", "h5py", "torch", "grain"}


# ---------------------------------------------------------------- exact rules (what mutation testing asked for)


@pytest.mark.parametrize("make, message", [
    (lambda: ResumableSampler("x"), "num_rows must be an int, got 'x'"),
    (lambda: ResumableSampler(True), "num_rows must be an int, got True"),
    (lambda: ResumableSampler(10, seed=1.5), "seed must be an int, got 1.5"),
    (lambda: ResumableSampler(10, rank="0"), "rank must be an int, got '0'"),
    (lambda: ResumableSampler(10, world_size=None), "world_size must be an int, got None"),
    (lambda: ResumableSampler(2**63), f"num_rows must be in [0, 2**63 - 1], got {2**63}"),
    (lambda: ResumableSampler(10).set_epoch("1"), "epoch must be an int, got '1'"),
    (lambda: ResumableSampler(10).index_at(10), "position must be in [0, 10), got 10"),
    (lambda: permute([3], 0, epoch_keys(0, 0)), "num_rows must be in [1, 2**63], got 0"),
    (lambda: permute([0, 5], 5, epoch_keys(0, 0)), "positions must be in [0, 5), got 5"),
])
def test_errors_name_the_argument_and_the_value(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


@pytest.mark.parametrize("field, value", [("epoch", "1"), ("taken", "2")])
def test_a_state_with_a_value_of_the_wrong_type_names_it(field, value):
    state = {**ResumableSampler(10).state_dict(), field: value}
    with pytest.raises(ValueError) as err:
        ResumableSampler(10).load_state_dict(state)
    assert str(err.value) == f"{field} must be an int, got {value!r}"


def test_the_largest_size_and_positions_near_it_are_exact():
    """Positions beyond 2**53 stay exact (uint64 arithmetic, never a float on the way)."""
    assert len(ResumableSampler(2**63 - 1)) == 2**63 - 1
    s = ResumableSampler(2**63 - 1, seed=3, rank=2, world_size=3)
    state = {**s.state_dict(), "taken": len(s) - 2}
    s.load_state_dict(state)
    tail = list(iter(s))  # list(s) would preallocate len(s) slots
    keys = epoch_keys(3, 0)
    positions = np.array([2 + 3 * (len(s) - 2), 2 + 3 * (len(s) - 1)], dtype=np.uint64)
    assert tail == permute(positions, 2**63 - 1, keys).tolist() == [s.index_at(int(p)) for p in positions]


def test_one_position_and_the_defaults():
    keys = epoch_keys(0, 0)
    one = permute(7, 100, keys)
    assert one.shape == (1,) and one.dtype == np.uint64 and one[0] == permute([7], 100, keys)[0]
    assert list(ResumableSampler(100)) == list(ResumableSampler(100, seed=0, shuffle=True, rank=0, world_size=1))
    # The smallest domains are pinned too (a domain of at least 2 bits: both halves mix).
    assert [list(ResumableSampler(n)) for n in (2, 3, 4)] == [[1, 0], [1, 2, 0], [1, 2, 0, 3]]
    assert list(ResumableSampler(4, seed=5)) == [1, 0, 2, 3]


def test_the_permutation_takes_every_size_up_to_2_63():
    keys = epoch_keys(1, 2)
    assert 0 <= int(permute([0], 2**63, keys)[0]) < 2**63
    with pytest.raises(ValueError, match=r"^num_rows must be in \[1, 2\*\*63\], got 9223372036854775809$"):
        permute([0], 2**63 + 1, keys)
