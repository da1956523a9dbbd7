"""Tests for transforms.core.sharding: file sizes, cutting row blocks at file boundaries, where every row goes."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core import sharding
from transforms.core.sharding import FileLayout, Layout, range_bits, row_keys, shard_name

SETTINGS = settings(max_examples=300, deadline=None)


def sizes(layout: FileLayout) -> list[int]:
    return [layout.size(i) for i in range(layout.num_files)]


def check_starts(layout: FileLayout, total: int) -> None:
    assert layout.starts[0] == 0
    assert layout.total == total
    assert list(layout.starts) == sorted(layout.starts)
    assert len(layout.starts) == layout.num_files + 1


# ---------------------------------------------------------------- files_per_record


@SETTINGS
@given(total=st.integers(0, 5000), per_file=st.integers(1, 700))
def test_files_per_record(total, per_file):
    layout = FileLayout.create(total, files_per_record=per_file)
    check_starts(layout, total)
    s = sizes(layout)
    assert sum(s) == total
    if total == 0:
        assert layout.num_files == 0 and layout.starts == (0,)
        return
    assert all(x == per_file for x in s[:-1])
    assert 1 <= s[-1] <= per_file
    assert layout.num_files == -(-total // per_file)


def test_files_per_record_examples():
    assert sizes(FileLayout.create(10, files_per_record=3)) == [3, 3, 3, 1]
    assert sizes(FileLayout.create(9, files_per_record=3)) == [3, 3, 3]
    assert sizes(FileLayout.create(2, files_per_record=50000)) == [2]
    assert FileLayout.create(0, files_per_record=3).num_files == 0
    assert FileLayout.create(0, files_per_record=3, num_output_files=4).num_files == 0


# ---------------------------------------------------------------- num_output_files


@SETTINGS
@given(total=st.integers(0, 5000), n_files=st.integers(1, 300), per_file=st.integers(1, 50))
def test_num_output_files(total, n_files, per_file):
    layout = FileLayout.create(total, files_per_record=per_file, num_output_files=n_files)
    check_starts(layout, total)
    s = sizes(layout)
    assert sum(s) == total
    if total == 0:
        assert layout.num_files == 0
        return
    assert layout.num_files == min(n_files, total)  # never more files than rows
    assert min(s) >= 1  # never an empty file
    assert max(s) - min(s) <= 1  # sizes differ by at most one


def test_num_output_files_examples():
    assert sizes(FileLayout.create(10, files_per_record=2, num_output_files=3)) == [4, 3, 3]
    assert sizes(FileLayout.create(2, files_per_record=1, num_output_files=5)) == [1, 1]


# ---------------------------------------------------------------- file_of / split

layouts = st.one_of(
    st.builds(lambda t, f: FileLayout.create(t, files_per_record=f), st.integers(1, 400), st.integers(1, 60)),
    st.builds(lambda t, n: FileLayout.create(t, files_per_record=1, num_output_files=n),
              st.integers(1, 400), st.integers(1, 30)),
)


@SETTINGS
@given(layouts)
def test_file_of(layout):
    for f in range(layout.num_files):
        for pos in range(layout.starts[f], layout.starts[f + 1]):
            assert layout.file_of(pos) == f


@SETTINGS
@given(layouts, st.data())
def test_split_covers_every_position_once_within_file_bounds(layout, data):
    start = data.draw(st.integers(0, layout.total))
    count = data.draw(st.integers(0, layout.total - start))
    pieces = layout.split(start, count)
    covered = []
    for f, lo, hi in pieces:
        assert 0 <= f < layout.num_files
        assert lo < hi  # no empty piece
        assert layout.starts[f] <= start + lo and start + hi <= layout.starts[f + 1]
        covered.extend(range(lo, hi))
    assert covered == list(range(count))  # every block-relative position once, in order
    files = [f for f, _, _ in pieces]
    assert files == sorted(set(files))  # one piece per file, in file order


@SETTINGS
@given(layouts, st.data())
def test_split_of_consecutive_blocks_fills_every_file_exactly(layout, data):
    # Cut the whole range into random consecutive blocks: the pieces fill each file exactly.
    cuts = sorted(data.draw(st.lists(st.integers(0, layout.total), max_size=10)))
    bounds = [0] + cuts + [layout.total]
    filled = [0] * layout.num_files
    for a, b in zip(bounds, bounds[1:]):
        for f, lo, hi in layout.split(a, b - a):
            filled[f] += hi - lo
    assert filled == sizes(layout)


def test_split_example():
    layout = FileLayout.create(10, files_per_record=4)  # [0,4) [4,8) [8,10)
    assert layout.split(3, 6) == [(0, 0, 1), (1, 1, 5), (2, 5, 6)]
    assert layout.split(4, 4) == [(1, 0, 4)]
    assert layout.split(5, 0) == []


# ---------------------------------------------------------------- Layout: where every row goes


def _metas(counts: list[int], files_of_groups: int = 3) -> list[tuple]:
    """(sort key, name, rows) of groups spread over a few input files."""
    return [((i % files_of_groups, i // files_of_groups), f"f{i % files_of_groups}.jsonl#{i // files_of_groups}", n)
            for i, n in enumerate(counts)]


def _expected_order(metas: list, shuffle_seed) -> list[tuple[str, int]]:
    """Every row as (group name, row), in output order, stated directly from the rule."""
    rows = [(key, name, r) for key, name, n in metas for r in range(n)]
    if shuffle_seed is None:
        return [(name, r) for key, name, r in sorted(rows)]
    keyed = [(int(row_keys(shuffle_seed, name, np.array([r]))[0]), key, r, name) for key, name, r in rows]
    return [(name, r) for _, _, r, name in sorted(keyed)]


def _layout_files(layout: Layout, metas: list) -> list[list[tuple[str, int]]]:
    """What each file's writer ends up with: candidates from `route`, kept by `positions`, in order."""
    names = {key: name for key, name, _ in metas}
    candidates: dict = {}
    for key, name, n in metas:
        g = layout.group_of(key)
        assert layout.group_sort_key(g) == key
        for f, rows in layout.route(g):
            assert len(rows) and f < layout.files.num_files
            candidates.setdefault(f, []).append((g, rows))
    out = []
    for f in range(layout.files.num_files):
        pieces = candidates.get(f, [])
        groups = np.concatenate([np.full(len(r), g) for g, r in pieces])
        rows = np.concatenate([r for _, r in pieces])
        pos = layout.positions(groups, rows)
        lo, hi = layout.files.starts[f], layout.files.starts[f + 1]
        mine = np.flatnonzero((pos >= lo) & (pos < hi))
        assert sorted(pos[mine].tolist()) == list(range(lo, hi)), f"file {f} misses or repeats positions"
        ordered = mine[np.argsort(pos[mine])]
        out.append([(names[layout.group_sort_key(int(groups[i]))], int(rows[i])) for i in ordered])
    return out


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(0, 60), max_size=12), per_file=st.integers(1, 80),
       n_files=st.one_of(st.none(), st.integers(1, 9)), shuffle_seed=st.one_of(st.none(), st.integers(0, 3)),
       rnd=st.randoms(use_true_random=False))
def test_every_row_lands_once_where_the_rule_puts_it(counts, per_file, n_files, shuffle_seed, rnd):
    metas = _metas(counts)
    given_order = list(metas)
    rnd.shuffle(given_order)  # the order groups reach the layout does not matter
    layout = Layout.create(given_order, shuffle_seed=shuffle_seed, files_per_record=per_file,
                           num_output_files=n_files)
    assert layout.files == FileLayout.create(sum(counts), files_per_record=per_file, num_output_files=n_files)
    files = _layout_files(layout, metas)
    assert [row for f in files for row in f] == _expected_order(metas, shuffle_seed)
    assert [len(f) for f in files] == [layout.files.size(i) for i in range(layout.files.num_files)]


@pytest.mark.parametrize("max_bits", [0, 1, 3, 20])
def test_key_ranges_only_change_routing_never_the_output(monkeypatch, max_bits):
    metas = _metas([50, 7, 0, 33, 61, 2], files_of_groups=2)
    reference = _expected_order(metas, 4)
    monkeypatch.setattr(sharding, "MAX_RANGE_BITS", max_bits)
    layout = Layout.create(metas, shuffle_seed=4, files_per_record=17, num_output_files=None)
    assert layout.range_bits <= max_bits
    assert [row for f in _layout_files(layout, metas) for row in f] == reference


def test_unshuffled_positions_follow_the_sort_key():
    metas = [((1, 0), "b0", 3), ((0, 1), "a1", 2), ((0, 0), "a0", 5), ((1, 1), "b1", 0), ((2, 0), "c", 1)]
    layout = Layout.create(metas, shuffle_seed=None, files_per_record=4, num_output_files=None)
    starts = {name: int(layout.positions([layout.group_of(key)], [0])[0]) for key, name, _ in metas}
    assert starts == {"a0": 0, "a1": 5, "b0": 7, "b1": 10, "c": 10}
    assert layout.files.total == 11
    assert Layout.create([], shuffle_seed=None, files_per_record=4, num_output_files=None).files.num_files == 0
    with pytest.raises(KeyError):
        layout.group_of((3, 0))


def test_layout_size_does_not_grow_with_rows():
    """The side input every worker reads: O(groups + key ranges), whatever the number of rows."""
    def size(rows_per_group: int) -> int:
        metas = _metas([rows_per_group] * 200, files_of_groups=50)
        layout = Layout.create(metas, shuffle_seed=0, files_per_record=50_000, num_output_files=None)
        return len(pickle.dumps(layout))

    small, large = size(1_000), size(100_000)  # 200 k and 20 M rows
    assert large < 1 << 20
    assert large - small <= 8 << sharding.MAX_RANGE_BITS  # at most the key-range table grew


def test_sort_keys_are_checked():
    one = [((0, (1 << 24) - 1), "a#16777215", 1)]
    assert Layout.create(one, shuffle_seed=None, files_per_record=4, num_output_files=None).files.total == 1
    with pytest.raises(ValueError, match="more than 16777216 packing groups in one file"):
        Layout.create([((0, 1 << 24), "a#16777216", 1)], shuffle_seed=None, files_per_record=4,
                      num_output_files=None)
    for dup in ([((3, 1), "a#1", 2), ((3, 1), "b#1", 5)], [((3, 0), "a#0", 1), ((3, 1), "a#1", 2), ((3, 1), "b#1", 5)]):
        with pytest.raises(ValueError, match="^two packing groups share a sort key$"):
            Layout.create(dup, shuffle_seed=0, files_per_record=4, num_output_files=None)
    layout = Layout.create(_metas([3, 4]), shuffle_seed=None, files_per_record=4, num_output_files=None)
    with pytest.raises(KeyError, match=r"no packing group \(7, 0\) in the layout"):
        layout.group_of((7, 0))


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=8), per_file=st.integers(1, 30),
       shuffle_seed=st.one_of(st.none(), st.integers(0, 5)))
def test_route_sends_each_row_only_where_it_may_land(counts, per_file, shuffle_seed):
    """Without shuffle a row goes to its own file only; with shuffle, to the files its key range overlaps."""
    metas = _metas(counts)
    layout = Layout.create(metas, shuffle_seed=shuffle_seed, files_per_record=per_file, num_output_files=None)
    groups = np.concatenate([np.full(n, layout.group_of(key)) for key, _, n in metas])
    rows = np.concatenate([np.arange(n) for _, _, n in metas])
    where = layout.positions(groups, rows)  # every row's position, all rows at once
    file_of = np.searchsorted(np.asarray(layout.files.starts), where, side="right") - 1
    allowed = {}
    if shuffle_seed is None:
        for g, r, f in zip(groups.tolist(), rows.tolist(), file_of.tolist()):
            allowed[g, r] = {f}
    else:
        # A key range's rows hold consecutive positions: the files they span may all need the whole range.
        names = {layout.group_of(key): name for key, name, _ in metas}
        keys = np.array([row_keys(shuffle_seed, names[g], np.array([r]))[0]
                         for g, r in zip(groups.tolist(), rows.tolist())], dtype=np.uint64)
        ranges = layout._ranges(keys)
        spans = {}
        for r, f in zip(ranges.tolist(), file_of.tolist()):
            spans.setdefault(r, set()).add(f)
        full = {r: set(range(min(fs), max(fs) + 1)) for r, fs in spans.items()}
        for g, r, rng in zip(groups.tolist(), rows.tolist(), ranges.tolist()):
            allowed[g, r] = full[rng]
    sent = {}
    for key, _, _ in metas:
        g = layout.group_of(key)
        for f, routed in layout.route(g):
            assert len(routed) == len(set(routed.tolist())), "a row sent twice to one file"
            for r in routed.tolist():
                sent.setdefault((g, r), set()).add(f)
    assert sent == allowed


def test_range_counts_do_not_depend_on_how_rows_are_chunked(monkeypatch):
    metas = _metas([50, 7, 0, 33, 61, 2], files_of_groups=2)
    whole = Layout.create(metas, shuffle_seed=3, files_per_record=9, num_output_files=None)
    monkeypatch.setattr(sharding, "_KEY_CHUNK_ROWS", 5)  # many chunks, groups larger than a chunk
    chunked = Layout.create(metas, shuffle_seed=3, files_per_record=9, num_output_files=None)
    assert whole.range_bits == chunked.range_bits > 0
    assert np.array_equal(whole.range_starts, chunked.range_starts)
    sizes = []
    real = sharding._keys
    monkeypatch.setattr(sharding, "_keys", lambda bases, rows: sizes.append(len(rows)) or real(bases, rows))
    Layout.create(metas, shuffle_seed=3, files_per_record=9, num_output_files=None)
    # Memory stays bounded: a chunk holds at most _KEY_CHUNK_ROWS rows, or a single larger group.
    assert max(sizes) <= max(5, max(n for _, _, n in metas)) and sum(sizes) == sum(n for _, _, n in metas)
    assert len(sizes) > 3
    sizes.clear()
    small = _metas([3] * 20)  # groups smaller than a chunk are gathered, up to a chunk's size
    Layout.create(small, shuffle_seed=3, files_per_record=9, num_output_files=None)
    assert max(sizes) <= 5 and sum(sizes) == 60
    monkeypatch.setattr(sharding, "MAX_RANGE_BITS", 0)
    one_range = Layout.create(metas, shuffle_seed=3, files_per_record=9, num_output_files=None)
    assert one_range.range_starts.tolist() == [0, sum(n for _, _, n in metas)]


def test_range_bits():
    assert range_bits(0, 1) == 0
    assert range_bits(10_000, 5_000) == 4  # ranges of ~1024 rows, at most a quarter of a file
    assert range_bits(10_000, 40) == 10  # small files: ranges of ~10 rows
    assert range_bits(10**12, 10**6) == sharding.MAX_RANGE_BITS
    assert range_bits(100, 4) == 7  # files of 4 rows: ranges of one row
    assert range_bits(1025, 10) == 10  # a quarter of 10 rows is 2 (whole rows), not 2.5


def test_shard_name():
    assert shard_name("examples", 0) == "examples_00000.h5"
    assert shard_name("x", 123) == "x_00123.h5"
    names = [shard_name("examples", i) for i in range(200)]
    shuffled = list(names)
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled) == names
