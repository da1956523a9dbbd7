"""Is the global shuffle a uniform permutation? Tests a broken shuffle key would fail.

The output order of a shuffled run is the order of the rows' keys
(`row_keys`: from the shuffle seed, the group's name and the row's index in
its group), read here through the real `Layout` as the writers use it. Three
ways to break the key that a rank correlation cannot see:

- the group's name left out of the key: row i of every group gets the same
  key, so the i-th rows of all groups land side by side;
- the row index left out: a group's rows share one key and land in one run;
- one key for everything: the output is the input order.

Each test measures how tightly some rows cluster (the span of their output
positions) and compares it with the span a uniform permutation gives. The
chance that a uniform permutation clusters as tightly is computed exactly
(`span_probability`), so each assertion has a stated false-alarm rate; the
seeds are fixed, so the suite is deterministic.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from transforms.core.sharding import Layout, row_keys

GROUPS, ROWS = 40, 250  # 10 000 rows
N = GROUPS * ROWS
FALSE_ALARM = Fraction(1, 10**9)  # per checked set of rows


def span_probability(n: int, k: int, span: int) -> Fraction:
    """P(max - min <= span) for the positions of k given items in a uniform permutation of n.

    The k positions are a uniform k-subset of range(n); a subset with max - min
    exactly d has its two ends fixed (n - d places) and k - 2 inner positions
    among the d - 1 between them.
    """
    if k < 2:
        return Fraction(1)
    ways = sum((n - d) * comb(d - 1, k - 2) for d in range(k - 1, min(span, n - 1) + 1))
    return Fraction(ways, comb(n, k))


def tightest_allowed(n: int, k: int) -> int:
    """The largest span a uniform permutation stays within with probability at most FALSE_ALARM."""
    bound = FALSE_ALARM * comb(n, k)
    ways, inner = 0, 1  # inner = comb(d - 1, k - 2), kept up to date as d grows
    for d in range(k - 1, n):
        if d > k - 1:
            inner = inner * (d - 1) // (d - k + 1)
        ways += (n - d) * inner
        if ways > bound:
            return d - 1
    return n - 1


def output_positions(shuffle_seed: int) -> np.ndarray:
    """positions[g, r]: where row r of group g lands, through the real layout."""
    metas = [((g, 0), f"corpus/part-{g:03d}.jsonl#0", ROWS) for g in range(GROUPS)]
    layout = Layout.create(metas, shuffle_seed=shuffle_seed, files_per_record=1_000, num_output_files=None)
    groups = np.repeat(np.arange(GROUPS), ROWS)
    rows = np.tile(np.arange(ROWS), GROUPS)
    positions = layout.positions(groups, rows).reshape(GROUPS, ROWS)
    assert sorted(positions.ravel().tolist()) == list(range(N))  # a permutation
    return positions


def test_span_probability_is_exact_on_a_small_case():
    # All 3-subsets of range(6), counted by hand against the formula.
    from itertools import combinations

    for span in range(2, 6):
        brute = sum(1 for c in combinations(range(6), 3) if c[-1] - c[0] <= span)
        assert span_probability(6, 3, span) == Fraction(brute, comb(6, 3))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_rows_of_the_same_index_in_different_groups_are_not_together(seed):
    """Caught: the group's name left out of the key (row i of every group side by side)."""
    positions = output_positions(seed)
    limit = tightest_allowed(N, GROUPS)
    for r in range(0, ROWS, 25):  # 10 sets of rows: false alarm at most 10 x 1e-9 per seed
        column = positions[:, r]
        assert column.max() - column.min() > limit, f"row {r} of every group within {limit + 1} positions"


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_rows_of_a_group_are_spread_out(seed):
    """Caught: the row index left out of the key, or one key for all (a group's rows in one run)."""
    positions = output_positions(seed)
    limit = tightest_allowed(N, ROWS)
    for g in range(0, GROUPS, 4):  # 10 groups
        row = positions[g]
        assert row.max() - row.min() > limit, f"group {g} within {limit + 1} positions"


def test_tightest_allowed_agrees_with_span_probability():
    for n, k in ((200, 5), (500, 12)):
        limit = tightest_allowed(n, k)
        assert span_probability(n, k, limit) <= FALSE_ALARM < span_probability(n, k, limit + 1)


def test_the_limits_are_far_from_what_broken_keys_give():
    # A broken key puts the rows side by side (a span of k - 1); a uniform shuffle spreads k rows over
    # (n + 1)(k - 1)/(k + 1) positions on average. The limits sit far from the first, below the second.
    for k in (GROUPS, ROWS):
        limit = tightest_allowed(N, k)
        assert 10 * (k - 1) < limit < (N + 1) * (k - 1) / (k + 1)


def test_keys_are_stable_across_versions():
    """The shuffled order of a seed is part of what a dataset is: the same seed, the same order, in any version.

    These values are the keys this code has always given; a change to the key
    function changes every shuffled dataset, and must be a deliberate one.
    """
    keys = row_keys(0, "corpus/part-000.jsonl#0", np.arange(3)).tolist()
    assert keys == [6643899017379913691, 12533004714720301367, 11763891002493384196]
    assert row_keys(1, "corpus/part-000.jsonl#0", np.arange(3)).tolist() != keys
    assert row_keys(0, "corpus/part-001.jsonl#0", np.arange(3)).tolist() != keys

