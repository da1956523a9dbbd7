"""Tests for transforms.core.sharding: file sizes, cutting row blocks at file boundaries, group offsets."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.sharding import FileLayout, group_offsets, shard_name

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


# ---------------------------------------------------------------- group_offsets


@SETTINGS
@given(st.lists(st.tuples(st.tuples(st.integers(0, 20), st.integers(0, 5)), st.integers(0, 50)),
                unique_by=lambda t: t[0], max_size=20),
       st.randoms(use_true_random=False))
def test_group_offsets_follow_sort_key(groups, rnd):
    counts = [(key, f"group-{i}", n) for i, (key, n) in enumerate(groups)]
    shuffled = list(counts)
    rnd.shuffle(shuffled)
    offsets, total = group_offsets(shuffled)
    assert total == sum(n for _, _, n in counts)
    assert set(offsets) == {name for _, name, _ in counts}
    pos = 0
    for key, name, n in sorted(counts, key=lambda t: t[0]):
        assert offsets[name] == pos
        pos += n
    assert group_offsets(counts) == (offsets, total)  # input order does not matter


def test_group_offsets_example():
    counts = [((1, 0), "b0", 3), ((0, 1), "a1", 2), ((0, 0), "a0", 5), ((1, 1), "b1", 0), ((2, 0), "c", 1)]
    offsets, total = group_offsets(counts)
    assert offsets == {"a0": 0, "a1": 5, "b0": 7, "b1": 10, "c": 10}
    assert total == 11
    assert group_offsets([]) == ({}, 0)


def test_shard_name():
    assert shard_name("examples", 0) == "examples_00000.h5"
    assert shard_name("x", 123) == "x_00123.h5"
    names = [shard_name("examples", i) for i in range(200)]
    shuffled = list(names)
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled) == names
