"""The group store between packing and writing (transforms/io/spill.py) and its Beam side
(transforms/stages/intermediate.py).

The rules, from the store's description: a group's rows, offsets and a `.json` marker written last (the marker
means the group is complete); local files written under a temporary name and renamed, objects uploaded whole;
a stored group is found again only by the same group; rows come back byte for byte, in the order asked,
whether read whole, memory-mapped or by byte range. On resume, a group is skipped only when every share of it
is stored, and its statistics are the stored ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import types
import uuid
from collections import Counter

import apache_beam as beam
import fsspec
import numpy as np
import pytest
from apache_beam import pvalue
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.core.encoded import EncodedRows
from transforms.core.records import DocBatch, EncodedBlock, GroupId
from transforms.core.splits import Output, SplitPlan
from transforms.core.stats import Stats
from transforms.core.timing import TIME_PREFIX
from transforms.io import fs, progress, spill
from transforms.io.spill import SpillRef, find_spilled, load_spilled, read_spilled, spill_group
from transforms.stages import intermediate
from transforms.stages.intermediate import STORED, SkipStoredGroups, StoreGroups, _SkipFn, _StoreFn


def _chunks(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(rng.integers(1, 40)), dtype=np.uint8).tobytes() for _ in range(n)]


def _stats(source: str, **counts) -> Stats:
    stats = Stats()
    for name, value in counts.items():
        stats.add(name, value, source)
    return stats


def _rows_of(rows) -> list[bytes]:
    return [bytes(rows.chunk(i)) for i in range(len(rows))]


def _memory_dir() -> str:
    return f"memory://spill-{uuid.uuid4().hex[:8]}/out/.tmp/groups"


GROUP = GroupId(3, 1, "/data/a.jsonl", "a.jsonl")


# ---------------------------------------------------------------- spill.py, local


def test_a_local_group_round_trips_and_is_committed_by_its_marker(tmp_path):
    directory = str(tmp_path / "groups" / "deeper")  # made as needed
    chunks = _chunks(30)
    stats = _stats(GROUP.source, docs_read=7, docs_good=6)
    stats.totals["h5.num_sequences"] += 30  # a total without a source
    ref = spill_group(directory, GROUP, EncodedRows.from_chunks(chunks), stats)
    assert ref.local and ref.directory == directory
    names = sorted(os.listdir(directory))
    assert names == sorted(ref.key + s for s in (".chunks.npy", ".offsets.npy", ".json"))  # nothing left over
    assert ref.path(".json") == os.path.join(directory, ref.key + ".json")

    meta = json.loads(open(ref.path(".json"), encoding="utf-8").read())
    assert meta["group"] == dataclasses.asdict(GROUP) and meta["rows"] == 30

    found = find_spilled(directory, GROUP)
    assert found is not None
    found_ref, n_rows, found_stats = found
    assert found_ref == ref and n_rows == 30
    assert found_stats.totals == stats.totals and isinstance(found_stats.totals, Counter)
    assert found_stats.sources == stats.sources and isinstance(found_stats.sources[GROUP.source], Counter)
    assert found_stats["docs_missing"] == 0  # a Counter: a name never counted reads 0

    whole = read_spilled(ref)
    assert _rows_of(whole) == chunks and not isinstance(whole.data, np.memmap)
    mapped = load_spilled(ref)
    assert isinstance(mapped.data, np.memmap)  # local: the writers map the chunks, they do not read them all
    for index in ([4], [0, 1, 2], [29, 3, 3, 17], list(range(30))[::-1], []):
        got = mapped.take(np.array(index, dtype=np.int64))
        assert _rows_of(got) == [chunks[i] for i in index]


def test_a_retried_group_writes_the_same_marker(tmp_path):
    """The marker's bytes depend on the group and its counts, not on the order the counts were made in."""
    one, two = Stats(), Stats()
    for name, value in [("docs_read", 3), ("bad.json", 1), ("h5.num_sequences", 2)]:
        one.add(name, value, GROUP.source)
    for name, value in [("h5.num_sequences", 2), ("bad.json", 1), ("docs_read", 3)]:
        two.add(name, value, GROUP.source)
    rows = EncodedRows.from_chunks(_chunks(2))
    a = spill_group(str(tmp_path / "a"), GROUP, rows, one)
    b = spill_group(str(tmp_path / "b"), GROUP, rows, two)
    marker = open(a.path(".json"), "rb").read()
    assert marker == open(b.path(".json"), "rb").read()
    assert marker.decode("utf-8") == json.dumps(json.loads(marker), sort_keys=True)


def test_a_group_is_found_only_as_itself(tmp_path):
    directory = str(tmp_path)
    ref = spill_group(directory, GROUP, EncodedRows.from_chunks(_chunks(3)), Stats())
    assert find_spilled(directory, GroupId(3, 2, GROUP.source, GROUP.relpath)) is None  # another slice: no marker
    # The same name (the key) for another group: the marker's identity must match, not only the key.
    moved = GroupId(4, 1, "/elsewhere/a.jsonl", "a.jsonl")
    assert moved.name == GROUP.name and find_spilled(directory, moved) is None
    assert find_spilled(directory, dataclasses.replace(GROUP, part=0)) is None
    assert find_spilled(str(tmp_path / "nowhere"), GROUP) is None
    os.remove(ref.path(".json"))  # arrays without a marker: an attempt that did not finish
    assert find_spilled(directory, GROUP) is None


def test_groups_get_distinct_keys_that_depend_only_on_their_name(tmp_path):
    names = [GroupId(0, s, "/a/x.jsonl", rel, part) for s in range(3) for rel in ("x.jsonl", "y/x.jsonl", "é.jsonl")
             for part in (None, 0, 1)]
    keys = {spill._key(g) for g in names}
    assert len(keys) == len(names)
    assert all(len(k) == 24 and set(k) <= set("0123456789abcdef") for k in keys)  # short file names
    assert spill._key(GroupId(0, 0, "/a/x.jsonl", "x.jsonl")) == spill._key(GroupId(9, 0, "gs://b/x.jsonl", "x.jsonl"))


def test_a_local_file_appears_whole_under_its_name(tmp_path, monkeypatch):
    """Written under a temporary name in the same directory, then renamed: never a partial final file."""
    seen = []
    real = os.replace

    def replace(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), dst, open(src, "rb").read()))
        assert not os.path.exists(dst)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    path = str(tmp_path / "k.json")
    spill._put(path, lambda f: f.write(b"complete"))
    ((where, tmp_name, dst, data),) = seen
    assert where == str(tmp_path) and tmp_name != "k.json" and tmp_name.startswith("k.json") and dst == path
    assert data == b"complete" and open(path, "rb").read() == b"complete"
    assert os.listdir(tmp_path) == ["k.json"]


# ---------------------------------------------------------------- spill.py, on an object store


def test_an_object_is_uploaded_whole_and_no_local_copy_is_left(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uploads = []
    memory = fsspec.filesystem("memory")
    real = type(memory).put_file

    def put_file(self, lpath, rpath, **kw):
        uploads.append((os.path.dirname(lpath), lpath.endswith(fs.PARTIAL_SUFFIX), open(lpath, "rb").read()))
        return real(self, lpath, rpath, **kw)

    monkeypatch.setattr(type(memory), "put_file", put_file)
    directory = _memory_dir()
    path = fs.join(directory, "k.json")
    spill._put(path, lambda f: f.write(b"complete"))
    assert uploads == [(str(tmp_path), True, b"complete")]
    assert fs.read_bytes(path) == b"complete"
    assert os.listdir(tmp_path) == []  # the local copy is removed

    def failing(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        spill._put(fs.join(directory, "other.json"), failing)
    assert os.listdir(tmp_path) == [] and not fs.exists(fs.join(directory, "other.json"))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_failed_atomic_write_leaves_nothing(tmp_path, monkeypatch, where):
    """fs.atomic_write, which spill and every other whole-or-nothing writer use: a write that raises leaves
    neither a final file nor a temporary one (remote: committed by a server-side copy, spill's aside)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    directory = str(tmp_path / "out") if where == "local" else _memory_dir()
    fs.makedirs(directory)

    def failing(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        fs.atomic_write(fs.join(directory, "k.json"), failing)
    assert fs.listdir_names(directory) == [] and os.listdir(tmp_path / "scratch") == []
    fs.atomic_write(fs.join(directory, "k.json"), lambda f: f.write(b"whole"))
    assert fs.read_bytes(fs.join(directory, "k.json")) == b"whole" and os.listdir(tmp_path / "scratch") == []


def test_a_remote_group_round_trips_and_is_read_by_range(monkeypatch):
    directory = _memory_dir()
    chunks = _chunks(50, seed=1)
    stats = _stats("memory://in/a.jsonl", docs_read=3)
    ref = spill_group(directory, GROUP, EncodedRows.from_chunks(chunks), stats)
    assert not ref.local
    found = find_spilled(directory, GROUP)
    assert found is not None and found[1] == 50 and found[2].totals == stats.totals

    whole = read_spilled(ref)
    assert _rows_of(whole) == chunks
    stored = load_spilled(ref)
    assert len(stored) == 50

    reads = []
    real_open = spill.fsspec.open

    class Counting:
        def __init__(self, f):
            self._f = f

        def __enter__(self):
            self._inner = self._f.__enter__()
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

        def seek(self, pos):
            return self._inner.seek(pos)

        def read(self, n=-1):
            reads.append(n)
            return self._inner.read(n)

    monkeypatch.setattr(spill.fsspec, "open", lambda *a, **k: Counting(real_open(*a, **k)))
    for index in ([5], [0, 1, 2, 3], [49, 2, 3, 4, 17], list(range(50))[::-1], list(range(10, 20)), []):
        reads.clear()
        got = stored.take(np.array(index, dtype=np.int64))
        assert _rows_of(got) == [chunks[i] for i in index]
        runs = sum(1 for k, i in enumerate(index) if k == 0 or i != index[k - 1] + 1)
        assert len(reads) == runs  # one range read per run of consecutive rows
        assert sum(reads) == sum(len(chunks[i]) for i in index)  # only the rows' bytes
    got = stored.take([7, 8])  # a plain list is an index too
    assert _rows_of(got) == chunks[7:9]
    # No row: the same empty rows a local store gives, which join any other rows
    local = EncodedRows.from_chunks(chunks).take(np.zeros(0, np.int64))
    for empty in (stored.take(np.zeros(0, np.int64)), stored.take([])):
        assert empty.data.dtype == local.data.dtype == np.uint8 and len(empty.data) == 0
        assert empty.offsets.dtype == local.offsets.dtype and empty.offsets.tolist() == [0]
        joined = EncodedRows.concat([empty, stored.take([3])])
        assert joined.data.dtype == np.uint8 and _rows_of(joined) == [chunks[3]]


def test_a_remote_chunks_file_in_npy_format_2_is_read(monkeypatch):
    """np.save writes format 2.0 when a header outgrows 1.0's: the byte ranges must start after either header."""
    directory = _memory_dir()
    chunks = _chunks(6, seed=2)
    rows = EncodedRows.from_chunks(chunks)
    ref = spill_group(directory, GROUP, rows, Stats())
    with fsspec.open(ref.path(".chunks.npy"), "wb") as f:
        np.lib.format.write_array(f, np.asarray(rows.data), version=(2, 0))
    assert fs.read_bytes(ref.path(".chunks.npy"))[6:8] == b"\x02\x00"
    stored = load_spilled(ref)
    assert _rows_of(stored.take(np.array([5, 0, 1]))) == [chunks[5], chunks[0], chunks[1]]


# ---------------------------------------------------------------- stages/intermediate.py: the DoFns


class _Clock:
    """perf_counter that steps by the given seconds at each call."""

    def __init__(self, *values):
        self._values = list(values)

    def perf_counter(self):
        return self._values.pop(0)


def test_store_fn_stores_the_rows_and_passes_a_reference_on(tmp_path, monkeypatch):
    monkeypatch.setattr(intermediate, "time", types.SimpleNamespace(perf_counter=_Clock(10.0, 12.5).perf_counter))
    chunks = _chunks(4)
    stats = _stats(GROUP.source, docs_read=2)
    stats.totals[TIME_PREFIX + "shuffle"] = 1000  # earlier work on the same group adds up
    block = EncodedBlock(GROUP, 4, rows=EncodedRows.from_chunks(chunks), stats=stats)
    fn = _StoreFn(str(tmp_path))
    (out,) = list(fn.process(block))
    assert out.group == GROUP and out.n_rows == 4 and out.rows is None
    assert out.stored == SpillRef(str(tmp_path), spill._key(GROUP))
    assert _rows_of(read_spilled(out.stored)) == chunks
    assert out.stats.totals[TIME_PREFIX + "shuffle"] == 1000 + 2500  # milliseconds
    assert out.stats.totals["docs_read"] == 2
    _, n_rows, stored_stats = find_spilled(str(tmp_path), GROUP)
    assert n_rows == 4 and stored_stats.totals["docs_read"] == 2


def _batch(group: GroupId, progress_bytes: int = 0) -> DocBatch:
    return DocBatch(group, [], Stats(), progress_bytes)


def _tagged(outputs) -> tuple[list, list]:
    main = [o for o in outputs if not isinstance(o, pvalue.TaggedOutput)]
    stored = [o for o in outputs if isinstance(o, pvalue.TaggedOutput)]
    assert all(o.tag == STORED for o in stored)
    return main, [o.value for o in stored]


class _Advanced(list):
    """The bytes reported to the progress bar as needing no more work (progress.advance)."""

    @property
    def total(self) -> int:
        return sum(self)


@pytest.fixture
def bar(monkeypatch):
    advanced = _Advanced()
    monkeypatch.setattr(progress, "advance", advanced.append)
    return advanced


def test_skip_fn_without_splits(tmp_path, bar):
    directory = str(tmp_path)
    done, todo = GROUP, GroupId(3, 2, GROUP.source, GROUP.relpath)
    spill_group(directory, done, EncodedRows.from_chunks(_chunks(5)), _stats(done.source, docs_read=9))
    fn = _SkipFn(directory, None)
    main, stored = _tagged(list(fn.process(_batch(todo, 100))))
    assert len(main) == 1 and main[0].group == todo and stored == []
    assert bar.total == 0  # not done: nothing advanced
    main, stored = _tagged(list(fn.process(_batch(done, 300))))
    assert main == []
    (block,) = stored
    assert block.group == done and block.n_rows == 5 and block.rows is None
    assert block.stored == SpillRef(directory, spill._key(done))
    assert block.stats.totals["docs_read"] == 9  # what reading the group counted, as stored
    assert block.stats.totals["groups_resumed"] == 1
    assert bar == [300]  # its share of the input is done, once


def test_a_resumed_group_adds_to_its_stored_counts(tmp_path):
    """Counters only ever add (transforms/core/stats.py): the resumed group is one more, whatever was stored."""
    spill_group(str(tmp_path), GROUP, EncodedRows.from_chunks([]), _stats(GROUP.source, groups_resumed=2))
    _, (block,) = _tagged(list(_SkipFn(str(tmp_path), None).process(_batch(GROUP))))
    assert block.stats.totals["groups_resumed"] == 3


def _plan() -> SplitPlan:
    outputs = (Output("a", "train", 8, 0.5, False), Output("a", "test", 8, 0.5, False),
               Output("b", "train", 8, 1.0, False))
    return SplitPlan(outputs, ("a", "b"))


def test_skip_fn_with_splits_needs_every_share(tmp_path, bar):
    directory = str(tmp_path)
    plan = _plan()
    group = GroupId(0, 0, "/in/a/x.jsonl", "a/x.jsonl")
    parts = plan.parts_of(group.relpath)
    assert parts == [0, 1, 3]  # its subset's two outputs and the rest
    fn = _SkipFn(directory, plan)
    for k in parts[:-1]:  # every share but the last stored: not done
        spill_group(directory, dataclasses.replace(group, part=k), EncodedRows.from_chunks(_chunks(k + 1)),
                    _stats(group.source, docs_good=10 + k))
        main, stored = _tagged(list(fn.process(_batch(group, 50))))
        assert len(main) == 1 and main[0] is not None and stored == []
    assert bar.total == 0
    spill_group(directory, dataclasses.replace(group, part=3), EncodedRows.from_chunks([]),
                _stats(group.source, docs_read=20))
    main, stored = _tagged(list(fn.process(_batch(group, 50))))
    assert main == []
    assert [b.group.part for b in stored] == [0, 1, 3]
    assert [b.n_rows for b in stored] == [1, 2, 0]
    assert [b.stats.totals["docs_good"] for b in stored] == [10, 11, 0]
    assert [b.stats.totals["groups_resumed"] for b in stored] == [0, 0, 1]  # once per group, with the job's share
    assert bar == [50]  # once for the group, whatever its shares
    other = GroupId(1, 0, "/in/b/y.jsonl", "b/y.jsonl")  # another subset: its own output and the rest
    assert plan.parts_of(other.relpath) == [2, 3]
    main, stored = _tagged(list(fn.process(_batch(other, 7))))
    assert len(main) == 1 and stored == []


# ---------------------------------------------------------------- stages/intermediate.py: the composites


def _pipeline() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))


def test_the_composites_store_and_skip_groups(tmp_path):
    directory = str(tmp_path / "groups")
    groups = [GroupId(i, 0, f"/in/{i}.jsonl", f"{i}.jsonl") for i in range(3)]
    blocks = [EncodedBlock(g, 2, rows=EncodedRows.from_chunks(_chunks(2, seed=i)), stats=Stats())
              for i, g in enumerate(groups[:2])]
    p = _pipeline()
    stored = p | "Blocks" >> beam.Create(blocks) | StoreGroups(directory)
    assert_that(stored | beam.Map(lambda b: (b.group.file_index, b.n_rows, b.rows is None, b.stored.local)),
                equal_to([(0, 2, True, True), (1, 2, True, True)]))
    p.run().wait_until_finish()
    assert [find_spilled(directory, g) is not None for g in groups] == [True, True, False]

    p = _pipeline()
    skipped = p | "Batches" >> beam.Create([_batch(g) for g in groups]) | SkipStoredGroups(directory)
    assert_that(skipped.todo | "Todo" >> beam.Map(lambda b: b.group.file_index), equal_to([2]), label="todo")
    assert_that(skipped[STORED] | "Stored" >> beam.Map(lambda b: b.group.file_index), equal_to([0, 1]),
                label="stored")
    result = p.run()
    result.wait_until_finish()
    (counter,) = result.metrics().query(MetricsFilter().with_name("groups_skipped"))["counters"]
    assert counter.key.metric.namespace == "resume" and counter.committed == 2


def test_skip_stored_groups_of_a_split_job(tmp_path):
    directory = str(tmp_path)
    plan = _plan()
    group = GroupId(0, 0, "/in/a/x.jsonl", "a/x.jsonl")
    for k in plan.parts_of(group.relpath):
        spill_group(directory, dataclasses.replace(group, part=k), EncodedRows.from_chunks([]), Stats())
    p = _pipeline()
    skipped = p | beam.Create([_batch(group)]) | SkipStoredGroups(directory, plan)
    assert_that(skipped[STORED] | beam.Map(lambda b: b.group.part), equal_to([0, 1, 3]))
    p.run().wait_until_finish()
