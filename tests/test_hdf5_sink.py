"""The HDF5 sink without a pipeline: EncodeRows' DoFn, the routing of pieces, and the writers, called directly.

The rule the files are checked against is stated here independently of the sink and of Layout's routing:
groups in (file index, slice index) order, rows in group order; with a shuffle seed, every row's key is
`row_keys(seed, group name, index)` (transforms/core/sharding.py) and the output order is the order of
(key, group, index); files of `files_per_record` rows each but the last (or `num_output_files` files whose
sizes differ by at most one, larger first). Every row below carries its identity, so each file is read back
and compared row by row with where that rule puts each row.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import types
import uuid
import zlib
from collections import defaultdict

import apache_beam as beam
import h5py
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import ROOT, assert_dataloader_rules
from transforms.core.encoded import EncodedRows
from transforms.core.records import EncodedBlock, GroupId, PerPart, RowBlock, WindowBlock
from transforms.core.sharding import Layout, row_keys, shard_name
from transforms.core.stats import H5_ROWS, Stats
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import build_tokenizer
from transforms.io import hdf5_sink
from transforms.io.hdf5_format import compress_chunk, encode_batches, write_shard
from transforms.io.hdf5_sink import (FileRows, RowFormat, ShardResult, _inline_piece, _piece_rows, _piece_source,
                                     route_pieces)
from transforms.io.spill import read_spilled, spill_group
from transforms.io.tokenizer_files import read_tokenizer_files
from transforms.io.vsl_chunks import compress_vsl_row
from transforms.stages import hdf5_sink as sink_stage
from transforms.stages.hdf5_sink import EncodeRows, WriteHdf5Shards, _EncodeFn, _make_layouts, _meta, _WriteShardFn

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
PAD = 50256


# ---------------------------------------------------------------- rows that say who they are


def _group(file_index: int, slice_index: int = 0, part=None) -> GroupId:
    return GroupId(file_index, slice_index, f"/in/f{file_index}.jsonl", f"f{file_index}.jsonl", part)


def _tagged_rows(group: GroupId, n: int, msl: int = 6, features: int = 3) -> np.ndarray:
    """Rows whose first two values are (file index * 1000 + slice index, row index); the rest random."""
    rng = np.random.default_rng(group.file_index * 7919 + group.slice_index)
    rows = rng.integers(0, 1 << 30, (n, features, msl)).astype(np.int32)
    rows[:, 0, 0] = group.file_index * 1000 + group.slice_index
    rows[:, 0, 1] = np.arange(n)
    return rows


def _identity(row: np.ndarray) -> tuple[int, int, int]:
    tag, index = int(row[0, 0]), int(row[0, 1])
    return tag // 1000, tag % 1000, index


def _block(group: GroupId, n: int, msl: int = 6, features: int = 3) -> EncodedBlock:
    rows = _tagged_rows(group, n, msl, features)
    return EncodedBlock(group, n, rows=encode_batches([rows], threads=1), stats=Stats())


def _expected_files(groups: dict, seed, files_per_record: int, num_output_files=None) -> list[list[tuple]]:
    """Where each row must land: {GroupId: rows} -> per file, the (file index, slice index, row index) of its
    rows in order. The rule of the module docstring, computed without Layout."""
    ordered = sorted(groups, key=lambda g: (g.file_index, g.slice_index))
    rows = [(k, i) for k, g in enumerate(ordered) for i in range(groups[g])]
    if seed is not None:
        keys = [row_keys(seed, g.name, np.arange(groups[g])).tolist() for g in ordered]
        rows.sort(key=lambda r: (keys[r[0]][r[1]], r[0], r[1]))
    total = len(rows)
    if num_output_files:
        n = min(num_output_files, total)
        sizes = [total // n + (1 if i < total % n else 0) for i in range(n)]
    else:
        sizes = [files_per_record] * (total // files_per_record) + ([total % files_per_record] if total %
                                                                    files_per_record else [])
    out, at = [], 0
    for size in sizes:
        out.append([(ordered[k].file_index, ordered[k].slice_index, i) for k, i in rows[at:at + size]])
        at += size
    return out


def _read_files(directory, name: str = "examples") -> list[np.ndarray]:
    files = sorted(directory.glob(f"{name}_*.h5"))
    assert [f.name for f in files] == [shard_name(name, i) for i in range(len(files))]
    out = []
    for f in files:
        with h5py.File(f, "r") as h:
            out.append(h["data"][()])
    return out


def _write(blocks: list, output_dir, *, seed, files_per_record: int, num_output_files=None, parts=(None,),
           msl=6, features: int = 3, keep_existing: bool = False, shuffle_pieces: int = 0) -> list:
    """The sink's steps after the encoder, as the composite wires them: layouts from every group's metadata,
    pieces routed to files, grouped by file (pieces in any order), each file written."""
    layouts = _make_layouts([_meta(b) for b in blocks], parts, seed, files_per_record, num_output_files)
    by_file = defaultdict(list)
    for b in blocks:
        for key, piece in route_pieces(b, layouts):
            by_file[key].append(piece)
    fn = _WriteShardFn(output_dir, "examples", msl, features, 4, keep_existing)
    results = []
    for key in sorted(by_file, key=lambda k: (-1 if k[0] is None else k[0], k[1])):
        pieces = list(by_file[key])
        random.Random(shuffle_pieces).shuffle(pieces)
        results += list(fn.process((key, pieces), layouts))
    return results


def _check_files(directory, groups: dict, seed, files_per_record: int, num_output_files=None) -> list:
    expected = _expected_files(groups, seed, files_per_record, num_output_files)
    files = _read_files(directory)
    got = [[_identity(r) for r in rows] for rows in files]
    assert got == expected
    # and each row is the very row of its group
    for rows in files:
        for r in rows:
            f, s, i = _identity(r)
            assert np.array_equal(r, _tagged_rows(_group(f, s), groups[_group(f, s)], r.shape[1], r.shape[0])[i])
    return files


# ---------------------------------------------------------------- pieces


def test_an_inline_piece_is_plain_values_and_reads_back():
    chunks = [b"a", b"bcd", b"", b"efgh"]
    rows = np.array([9, 2, 70000, 5], dtype=np.int64)
    piece = _inline_piece(3, rows, EncodedRows.from_chunks(chunks))
    assert [type(v) for v in piece] == [int, bytes, bytes, bytes]  # what Beam encodes without pickling
    assert piece[0] == 3 and len(piece[1]) == 4 * 4 and len(piece[2]) == 4 * 4  # 4 bytes per row index, length
    got = _piece_rows(piece)
    assert got.dtype == np.int64 and got.tolist() == [9, 2, 70000, 5]
    source, own = _piece_source(piece)
    assert own is True  # the piece's own rows, in its order
    assert [bytes(source.chunk(i)) for i in range(4)] == chunks
    assert source.offsets.tolist() == [0, 1, 4, 4, 8]


@pytest.mark.parametrize("seed", [None, 5])
def test_a_groups_rows_cross_the_shuffle_in_pieces_of_bounded_bytes(tmp_path, monkeypatch, seed):
    """A piece is one record of the runner's shuffle: at most PIECE_BYTES of chunks, or one row larger alone
    (Flink's batch GroupByKey must hold a record whole in a sort buffer). Every row reaches each file the rule
    sends it to once, in the route's order, and the files are what the rule says."""
    groups = {_group(i): n for i, n in enumerate([40, 3, 25])}
    blocks = [_block(g, n) for g, n in groups.items()]
    layouts = _make_layouts([_meta(b) for b in blocks], (None,), seed, 16, None)
    sizes = np.concatenate([np.diff(b.rows.offsets) for b in blocks])
    limit = int(np.median(sizes)) * 2  # a few rows a piece, and rows larger than half of it
    monkeypatch.setattr(hdf5_sink, "PIECE_BYTES", limit)
    n_pieces = n_reached = 0
    for b in blocks:
        g = layouts[None].group_of(b.group.sort_key)
        got = defaultdict(list)
        pieces = list(route_pieces(b, layouts))
        for (_, f), piece in pieces:
            lengths = np.frombuffer(piece[2], dtype="<u4")
            assert piece[0] == g and (lengths.sum() <= limit or len(lengths) == 1)
            got[f] += _piece_rows(piece).tolist()
        assert dict(got) == {f: index.tolist() for f, index in layouts[None].route(g)}
        n_pieces, n_reached = n_pieces + len(pieces), n_reached + len(got)
    assert n_pieces > n_reached  # some group's rows for a file took several pieces
    _write(blocks, str(tmp_path), seed=seed, files_per_record=16, shuffle_pieces=3)
    _check_files(tmp_path, groups, seed, 16)


def test_a_stored_piece_refers_to_the_whole_group(tmp_path):
    chunks = [bytes([i]) * (i + 1) for i in range(6)]
    ref = spill_group(str(tmp_path), _group(1), EncodedRows.from_chunks(chunks), Stats())
    piece = (1, np.array([4, 0], dtype="<u4").tobytes(), ref)
    assert _piece_rows(piece).tolist() == [4, 0]
    source, own = _piece_source(piece)
    assert own is False  # every row of the group: a piece's rows are found by their index
    assert [bytes(source.chunk(i)) for i in range(6)] == chunks


# ---------------------------------------------------------------- the layout's inputs


def test_meta_and_layouts_per_output(tmp_path):
    a, b = _block(_group(2, 1, part=0), 5), _block(_group(0, 3, part=1), 4)
    assert _meta(a) == (0, ((2, 1), "f2.jsonl#1@0", 5))
    layouts = _make_layouts([_meta(a), _meta(b)], (0, 1, 2), 7, 3, None)
    assert sorted(layouts) == [0, 1, 2]
    assert [layouts[p].files.total for p in (0, 1, 2)] == [5, 4, 0]  # an output without groups: no file
    assert layouts[0].files.starts == (0, 3, 5) and layouts[0].shuffle_seed == 7
    assert layouts[1].group_of((0, 3)) == 0
    single = _make_layouts([_meta(_block(_group(0), 5))], (None,), None, 2, 2)
    assert list(single) == [None] and single[None].files.starts == (0, 3, 5) and single[None].shuffle_seed is None


# ---------------------------------------------------------------- writing: rows land where the rule says


@pytest.mark.parametrize("seed", [None, 0, 11])
def test_rows_land_where_the_rule_puts_them(tmp_path, seed):
    groups = {_group(3): 17, _group(0, 2): 9, _group(0, 0): 23, _group(5): 1, _group(1): 30}
    blocks = [_block(g, n) for g, n in groups.items()]
    results = _write(blocks, str(tmp_path), seed=seed, files_per_record=8, shuffle_pieces=seed or 0)
    files = _check_files(tmp_path, groups, seed, 8)
    assert [r.index for r in results] == list(range(len(files))) and len(files) == 10
    assert [r.name for r in results] == [shard_name("examples", i) for i in range(10)]
    assert [r.num_sequences for r in results] == [len(f) for f in files] == [8] * 10
    assert all(r.part is None and set(r.seconds) == {"shuffle", "write"} for r in results)
    for i in range(10):
        assert assert_dataloader_rules(str(tmp_path / shard_name("examples", i))) == 8


def test_a_shuffled_write_batch_places_every_row_by_its_position(tmp_path, monkeypatch):
    """Files written a few rows at a time: each batch gathers rows of many groups, which must be put back
    in position order (a batch placed by its permutation instead of the inverse fails here)."""
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 7)
    groups = {_group(i): n for i, n in enumerate([40, 3, 25, 60, 11, 38])}
    blocks = [_block(g, n) for g, n in groups.items()]
    _write(blocks, str(tmp_path), seed=123, files_per_record=50, shuffle_pieces=5)
    _check_files(tmp_path, groups, 123, 50)


def test_a_given_number_of_files(tmp_path):
    groups = {_group(0): 10, _group(1): 7, _group(2): 6}
    _write([_block(g, n) for g, n in groups.items()], str(tmp_path), seed=4, files_per_record=1000,
           num_output_files=4)
    files = _check_files(tmp_path, groups, 4, 1000, 4)
    assert [len(f) for f in files] == [6, 6, 6, 5]


def test_rows_of_stored_groups_local_and_remote(tmp_path, monkeypatch):
    """Stored groups: local ones are referred to by the pieces; remote ones are read once per group where
    they are routed when shuffled (their rows then travel inline), and referred to otherwise."""
    groups = {_group(i): n for i, n in enumerate([21, 5, 14, 9])}
    local, remote = str(tmp_path / "groups"), f"memory://sink-{uuid.uuid4().hex[:8]}/groups"
    reads = []
    monkeypatch.setattr(hdf5_sink, "read_spilled", lambda ref: reads.append(ref) or read_spilled(ref))
    for seed in (None, 0):
        for directory, kind in ((local, "local"), (remote, "remote")):
            blocks = []
            for g, n in groups.items():
                ref = spill_group(directory, g, encode_batches([_tagged_rows(g, n)]), Stats())
                blocks.append(EncodedBlock(g, n, stored=ref, stats=Stats()))
            layouts = _make_layouts([_meta(b) for b in blocks], (None,), seed, 6, None)
            reads.clear()
            pieces = [p for b in blocks for _, p in route_pieces(b, layouts)]
            inline = kind == "remote" and seed is not None
            assert all(len(p) == (4 if inline else 3) for p in pieces), (kind, seed)
            assert len(reads) == (len(groups) if inline else 0)
            out = tmp_path / f"out-{kind}-{seed}"
            out.mkdir()
            _write(blocks, str(out), seed=seed, files_per_record=6, shuffle_pieces=3)
            _check_files(out, groups, seed, 6)


def test_outputs_of_a_split_job_are_written_apart(tmp_path):
    dirs = (tmp_path / "a", tmp_path / "b")
    for d in dirs:
        d.mkdir()
    groups = {0: {_group(0, part=0): 7, _group(1, part=0): 4}, 1: {_group(0, part=1): 5, _group(2, part=1): 6}}
    msl = {0: 4, 1: 9}
    blocks = [_block(g, n, msl[part]) for part, gs in groups.items() for g, n in gs.items()]
    results = _write(blocks, PerPart(tuple(str(d) for d in dirs)), seed=2, files_per_record=3, parts=(0, 1),
                     msl=PerPart((4, 9)))
    assert [(r.part, r.index, r.num_sequences) for r in results] == \
        [(0, 0, 3), (0, 1, 3), (0, 2, 3), (0, 3, 2), (1, 0, 3), (1, 1, 3), (1, 2, 3), (1, 3, 2)]
    for part, d in enumerate(dirs):
        expected = _expected_files({dataclasses.replace(g, part=None): n for g, n in groups[part].items()}, None, 3)
        ordered = sorted(groups[part], key=lambda g: g.sort_key)
        keys = [row_keys(2, g.name, np.arange(groups[part][g])).tolist() for g in ordered]
        rows = sorted(((k, i) for k, g in enumerate(ordered) for i in range(groups[part][g])),
                      key=lambda r: (keys[r[0]][r[1]], r[0], r[1]))
        flat = [(ordered[k].file_index, ordered[k].slice_index, i) for k, i in rows]
        files = _read_files(d)
        assert [len(f) for f in files] == [len(e) for e in expected]
        assert [_identity(r) for f in files for r in f] == flat  # the part's own keys (its groups' names)
        assert all(f.shape[1:] == (3, msl[part]) for f in files)


def test_a_file_committed_by_an_earlier_attempt_is_kept(tmp_path):
    groups = {_group(0): 5}
    block = _block(_group(0), 5)
    write_shard(str(tmp_path / shard_name("examples", 0)), _tagged_rows(_group(9), 3))  # not these rows
    (kept,) = _write([block], str(tmp_path), seed=None, files_per_record=5, keep_existing=True)
    assert kept == ShardResult(0, shard_name("examples", 0), 3, {}, None)
    assert [_identity(r)[0] for r in _read_files(tmp_path)[0]] == [9, 9, 9]  # untouched
    (written,) = _write([block], str(tmp_path), seed=None, files_per_record=5, keep_existing=False)
    assert written.num_sequences == 5
    _check_files(tmp_path, groups, None, 5)
    (tmp_path / shard_name("examples", 0)).unlink()
    (again,) = _write([block], str(tmp_path), seed=None, files_per_record=5, keep_existing=True)  # none yet
    assert again.num_sequences == 5 and again.seconds
    assert not list(tmp_path.glob("*.partial")) and not list((tmp_path / ".tmp").glob("*"))


def test_a_split_job_keeps_files_of_its_own_output(tmp_path):
    dirs = (tmp_path / "a", tmp_path / "b")
    for d in dirs:
        d.mkdir()
    write_shard(str(dirs[1] / shard_name("examples", 0)), _tagged_rows(_group(9), 2, msl=5))
    blocks = [_block(_group(0, part=0), 2, 5), _block(_group(0, part=1), 4, 5)]
    results = _write(blocks, PerPart(tuple(str(d) for d in dirs)), seed=None, files_per_record=10, parts=(0, 1),
                     msl=5, keep_existing=True)
    assert [(r.part, r.num_sequences, bool(r.seconds)) for r in results] == [(0, 2, True), (1, 2, False)]


def test_rows_of_five_features(tmp_path):
    groups = {_group(0): 4, _group(1): 3}
    _write([_block(g, n, 6, features=5) for g, n in groups.items()], str(tmp_path), seed=1, files_per_record=5,
           features=5)
    files = _check_files(tmp_path, groups, 1, 5)
    assert [f.shape for f in files] == [(5, 5, 6), (2, 5, 6)]
    assert assert_dataloader_rules(str(tmp_path / shard_name("examples", 0)), features=5) == 5


def test_a_file_is_built_under_a_temporary_name_for_it(tmp_path, monkeypatch):
    commits = []
    real = sink_stage.fs.commit_local_file
    monkeypatch.setattr(sink_stage.fs, "commit_local_file", lambda tmp, final: commits.append((tmp, final)) or
                        real(tmp, final))
    _write([_block(_group(0), 3)], str(tmp_path), seed=None, files_per_record=2)
    assert [final for _, final in commits] == [str(tmp_path / shard_name("examples", i)) for i in (0, 1)]
    for tmp, final in commits:
        # in the scratch space beside the output, named for the file it becomes (a leftover says which)
        assert tmp.startswith(str(tmp_path / ".tmp") + "/")
        assert tmp.rsplit("/", 1)[1].startswith(shard_name("examples", 0 if final.endswith("0.h5") else 1) + ".")
        assert not tmp.endswith(".h5")


def test_seconds_spent_on_a_file(tmp_path, monkeypatch):
    clock = iter([10.0, 11.5, 12.0, 15.25])
    monkeypatch.setattr(sink_stage, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    (result,) = _write([_block(_group(0), 3)], str(tmp_path), seed=None, files_per_record=5)
    assert result.seconds == {"shuffle": 1.5, "write": 3.25}


def test_a_file_missing_rows_is_refused(tmp_path):
    blocks = [_block(_group(0), 6), _block(_group(1), 6)]
    layouts = _make_layouts([_meta(b) for b in blocks], (None,), None, 4, None)  # a piece: rows of its file only
    layout: Layout = layouts[None]
    pieces = defaultdict(list)
    for b in blocks:
        for (part, f), p in route_pieces(b, layouts):
            pieces[f].append(p)
    for f, ps in pieces.items():
        assert len(FileRows(ps, layout, f)) == layout.files.size(f)
        mine = layout.files.size(f)
        with pytest.raises(RuntimeError, match=rf"^shard {f}: {mine - len(_piece_rows(ps[0]))} rows, "
                                               rf"expected {mine}$"):
            FileRows(ps[1:], layout, f)
    with pytest.raises(RuntimeError, match=r"^shard 0: 0 rows, expected 4$"):
        FileRows([], layout, 0)
    shuffled = _make_layouts([_meta(b) for b in blocks], (None,), 5, 4, None)[None]
    with pytest.raises(RuntimeError, match=r"^shard 1: 0 rows, expected 4$"):
        FileRows([], shuffled, 1)


def test_file_rows_are_fetched_batch_by_batch_in_position_order(tmp_path):
    groups = {_group(0): 9, _group(1): 8, _group(2): 7}
    blocks = [_block(g, n) for g, n in groups.items()]
    layouts = _make_layouts([_meta(b) for b in blocks], (None,), 3, 24, None)
    ((_, f),) = {k for b in blocks for k, _ in route_pieces(b, layouts)}
    pieces = [p for b in blocks for _, p in route_pieces(b, layouts)]
    rows = FileRows(pieces[::-1], layouts[None], f)
    (expected,) = _expected_files(groups, 3, 24)
    chunks = [rows.batch(lo, min(lo + 5, 24)) for lo in range(0, 24, 5)]
    assert [len(c) for c in chunks] == [5, 5, 5, 5, 4]
    got = [np.frombuffer(zlib.decompress(bytes(c.chunk(k))), "<i4").reshape(3, 6) for c in chunks
           for k in range(len(c))]
    assert [_identity(r) for r in got] == expected
    assert len(rows.batch(3, 3)) == 0


# ---------------------------------------------------------------- EncodeRows' DoFn


@pytest.fixture(scope="module")
def gpt2():
    files = read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                 encoder_file=str(GPT2 / "encoder.json"))
    return files, build_tokenizer(files)


def _lm_rows(lengths: list[int], msl: int, *, inverted: bool = False, trailing_eos: bool = False,
             seed: int = 0) -> np.ndarray:
    """Rows of real inputs of these lengths then padding; the loss on every real position but, with
    `trailing_eos`, the last (an EOS input whose label is padding)."""
    rng = np.random.default_rng(seed)
    rows = np.full((len(lengths), 3, msl), PAD, dtype=np.int32)
    rows[:, 1, :] = 0
    for i, n in enumerate(lengths):
        tokens = rng.integers(0, 50000, n + 1)
        rows[i, 0, :n] = tokens[:n]
        trained = n - 1 if trailing_eos else n
        rows[i, 2, :trained] = tokens[1:trained + 1]
        rows[i, 1, :trained] = 1
    if inverted:
        rows[:, 1, :] ^= 1
    return rows


def _counts(rows: np.ndarray, real: list[int], tok) -> dict:
    """The row statistics, by hand: `real` is each row's number of real inputs, as built."""
    n, _, msl = rows.shape
    texts = [tok.decode(r[0, :k].tolist()) for r, k in zip(rows, real)]
    return {"num_sequences": n, "num_tokens": n * msl, "non_pad_tokens": sum(real),
            "num_pad_tokens": n * msl - sum(real), "detokenized_chars": sum(len(t) for t in texts),
            "detokenized_bytes": sum(len(t.encode("utf-8")) for t in texts)}


def _encode(fn: _EncodeFn, block):
    fn.setup()
    (out,) = list(fn.process(block))
    return out


@pytest.mark.parametrize("inverted,trailing_eos", [(False, False), (True, False), (False, True), (True, True)])
def test_encode_fn_compresses_and_counts_what_the_files_will_hold(gpt2, inverted, trailing_eos):
    files, tok = gpt2
    lengths = [12, 2, 16, 5, 3]  # a row trains at least one position
    rows = _lm_rows(lengths, 16, inverted=inverted, trailing_eos=trailing_eos)
    stats = Stats()
    stats.add("docs_read", 4)
    group = _group(4)
    fn = _EncodeFn(RowFormat(16, PAD, inverted, trailing_eos), files, 7, 1)
    out = _encode(fn, RowBlock(group, rows, stats))
    assert out.group == group and out.n_rows == 5 and out.stored is None
    assert [bytes(out.rows.chunk(i)) for i in range(5)] == [compress_chunk(r, 7) for r in rows]
    trained = [n - 1 if trailing_eos else n for n in lengths]
    written = out.stats.with_prefix(H5_ROWS)
    assert written == {**_counts(rows, lengths, tok), "loss_valid_tokens": sum(trained),
                       "num_masked_tokens": 5 * 16 - sum(trained)}
    assert out.stats["docs_read"] == 4  # the group's other counts go on with it


def test_encode_fn_counts_both_sides_of_a_dpo_row(gpt2):
    files, tok = gpt2
    chosen, rejected = _lm_rows([6, 3], 8, seed=1), _lm_rows([2, 8], 8, seed=2)
    rows = np.concatenate([chosen, rejected], axis=1)  # [n, 6, msl]
    fn = _EncodeFn(RowFormat(8, PAD, False, False, sides=2), files, 4, 1)
    out = _encode(fn, RowBlock(_group(0), rows))
    both = np.concatenate([chosen, rejected])
    written = out.stats.with_prefix(H5_ROWS)
    assert written == {**_counts(both, [6, 3, 2, 8], tok), "num_sequences": 2, "loss_valid_tokens": 19,
                       "num_masked_tokens": 32 - 19}
    assert [bytes(out.rows.chunk(i)) for i in range(2)] == [compress_chunk(r) for r in rows]


class _Windows:
    """What WindowBlock holds, reduced to what the sink asks of it: rows built a batch at a time."""

    def __init__(self, rows, segments=None):
        self._rows = rows
        self.asked = []
        if segments is not None:  # per row lo..hi, its segments' lengths (PackedRows.segment_lengths)
            self.vsl_segments = lambda lo, hi: [segments[r] for r in range(lo, hi)]

    def __len__(self):
        return len(self._rows)

    def rows_between(self, lo, hi):
        self.asked.append((lo, hi))
        return self._rows[lo:hi]


def test_encode_fn_builds_window_rows_a_batch_at_a_time(gpt2, monkeypatch):
    files, tok = gpt2
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 3)
    lengths = [4, 8, 8, 1, 6, 7, 3]
    rows = _lm_rows(lengths, 8, seed=3)
    windows = _Windows(rows)
    out = _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 2), WindowBlock(_group(1), windows))
    assert windows.asked == [(0, 3), (3, 6), (6, 7)]
    assert [bytes(out.rows.chunk(i)) for i in range(7)] == [compress_chunk(r) for r in rows]
    assert out.stats.with_prefix(H5_ROWS)["detokenized_chars"] == _counts(rows, lengths, tok)["detokenized_chars"]
    assert out.stats.with_prefix(H5_ROWS)["num_sequences"] == 7
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 2)  # a RowBlock's rows, a batch at a time
    out = _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 2), RowBlock(_group(1), rows))
    assert [bytes(out.rows.chunk(i)) for i in range(7)] == [compress_chunk(r) for r in rows]
    assert out.stats.with_prefix(H5_ROWS)["non_pad_tokens"] == sum(lengths)


def _vsl_row(lengths: list[int], msl: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = np.zeros((5, msl), dtype=np.int32)
    row[[0, 2]] = PAD
    at = 0
    for n in lengths:
        row[0, at:at + n] = rng.integers(0, 50000, n)
        row[2, at:at + n] = rng.integers(0, 50000, n)
        row[1, at:at + n] = 1
        row[3, at:at + n] = np.arange(n)[::-1]
        row[4, at:at + n] = np.arange(n)
        at += n
    return row


def test_encode_fn_takes_vsl_rows_with_their_segments(gpt2, monkeypatch):
    files, _ = gpt2
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 2)
    layouts = [[10], [4, 6], [3], [2, 2, 2], [1]]
    rows = np.stack([_vsl_row(lengths, 10, i) for i, lengths in enumerate(layouts)])
    out = _encode(_EncodeFn(RowFormat(10, PAD, False, False), files, 6, 1),
                  WindowBlock(_group(0), _Windows(rows, layouts)))
    assert [bytes(out.rows.chunk(i)) for i in range(5)] == [compress_vsl_row(r, s, 6) for r, s in zip(rows, layouts)]
    assert out.stats.with_prefix(H5_ROWS)["num_segments"] == 8


def test_encode_fn_refuses_other_blocks(gpt2):
    fn = _EncodeFn(RowFormat(8, PAD, False, False), gpt2[0], 4, 1)
    fn.setup()
    with pytest.raises(TypeError, match=r"^EncodeRows takes WindowBlock or RowBlock, got EncodedBlock$"):
        list(fn.process(_block(_group(0), 1)))


def test_encode_fn_takes_the_format_of_the_groups_output(gpt2):
    files, _ = gpt2
    formats = PerPart((RowFormat(8, PAD, False, False), RowFormat(8, PAD, True, False)))
    rows = _lm_rows([5, 3], 8, inverted=True)
    out = _encode(_EncodeFn(formats, files, 4, 1), RowBlock(_group(0, part=1), rows))
    assert out.stats.with_prefix(H5_ROWS)["loss_valid_tokens"] == 8  # mask 0 is the loss: output 1's format


def test_encode_fn_time_and_an_empty_group(gpt2, monkeypatch):
    files, _ = gpt2
    clock = iter([100.0, 101.25])
    monkeypatch.setattr(sink_stage, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    stats = Stats()
    stats.totals[TIME_PREFIX + "encode"] = 500  # an earlier stage's encode time on this group adds up
    out = _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1),
                  RowBlock(_group(0), np.zeros((0, 3, 8), np.int32), stats))
    assert out.n_rows == 0 and len(out.rows) == 0
    assert out.stats.totals[TIME_PREFIX + "encode"] == 500 + 1250  # milliseconds
    assert out.stats.with_prefix(H5_ROWS) == {}


def test_encode_fn_reports_its_rows_to_the_progress_bar(gpt2, monkeypatch):
    files, _ = gpt2
    settled, counted = [], []
    monkeypatch.setattr(sink_stage.progress, "settle", lambda key, fraction, **kw: settled.append((key, fraction)))
    monkeypatch.setattr(sink_stage.progress, "count", lambda name, n=1: counted.append((name, n)))
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 2)
    group = _group(6, 2)
    _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1), RowBlock(group, _lm_rows([3] * 5, 8)))
    assert counted == [("sequences", 2), ("sequences", 2), ("sequences", 1)]
    assert {key for key, _ in settled} == {group.name}
    # after each batch, the share of the group's rows compressed; then the whole group
    assert [f for _, f in settled] == [0.4, 0.8, 1.0, 1.0]
    settled.clear()
    _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1), RowBlock(group, _lm_rows([3], 8)))
    assert [f for _, f in settled] == [1.0, 1.0]  # one row: all of it after its batch
    settled.clear()
    _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1), RowBlock(group, np.zeros((0, 3, 8), np.int32)))
    assert settled == [(group.name, 1.0)]  # a group without rows is done too


def test_encode_fn_compresses_on_the_process_share_of_cores(gpt2, monkeypatch):
    """The compression pool gets the cores the runner gives this process, at the job's gzip level."""
    files, _ = gpt2
    calls = []
    real = sink_stage.encode_batches

    def recording(batches, **kw):
        calls.append((kw["threads"], kw["level"]))
        return real(batches, **kw)

    monkeypatch.setattr(sink_stage, "encode_batches", recording)
    monkeypatch.setattr(sink_stage, "process_threads", lambda cpus: {None: 8, 3: 3}[cpus])
    for cpus in (3, None):
        _encode(_EncodeFn(RowFormat(8, PAD, False, False), files, 2, cpus), RowBlock(_group(0), _lm_rows([3], 8)))
    assert calls == [(3, 2), (8, 2)]


def test_encode_rows_gives_its_dofn_the_cores_per_process(gpt2, monkeypatch):
    asked = []
    monkeypatch.setattr(sink_stage, "process_threads", lambda cpus: asked.append(cpus) or 1)
    EncodeRows(RowFormat(8, PAD, False, False), gpt2[0], process_cpus=3)
    EncodeRows(RowFormat(8, PAD, False, False), gpt2[0])
    assert asked == [3, None]


def test_encode_fn_tells_the_bar_when_it_works(gpt2, monkeypatch):
    """The bar shares time among the stages at work (transforms/io/progress.py): the encoder's work on a group is
    one stretch of "encode", from before its first row to after the group is settled."""
    files, _ = gpt2
    calls = []
    monkeypatch.setattr(sink_stage.progress, "begin", lambda stage: calls.append(("begin", stage)))
    monkeypatch.setattr(sink_stage.progress, "end", lambda stage, nbytes=0: calls.append(("end", stage, nbytes)))
    monkeypatch.setattr(sink_stage.progress, "settle", lambda key, fraction, **kw: calls.append(("settle", fraction)))
    monkeypatch.setattr(sink_stage, "WRITE_BATCH_ROWS", 2)
    fn = _EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1)
    _encode(fn, RowBlock(_group(0), _lm_rows([3] * 3, 8)))
    assert calls == [("begin", "encode"), ("settle", 2 / 3), ("settle", 1.0), ("settle", 1.0), ("end", "encode", 0)]


def test_the_composites_tell_the_bar_their_compressor_and_row_width(gpt2, monkeypatch):
    """Before anything is measured, the bar's prior for encoding is this machine's time with the job's compressor
    on rows of the job's width: the sink says both when the job graph is built."""
    told = []
    monkeypatch.setattr(sink_stage.progress, "compressor", lambda compress: told.append(("compressor", compress)))
    monkeypatch.setattr(sink_stage.progress, "row_width", lambda features: told.append(("row_width", features)))
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    rows = p | beam.Create([RowBlock(_group(0), _lm_rows([3], 8))])
    _ = rows | EncodeRows(RowFormat(8, PAD, False, False), gpt2[0], gzip_level=6) | WriteHdf5Shards(
        output_dir="unused", output_name="x", files_per_record=5, max_seq_length=8, features=5)
    shutil.rmtree(p.local_tempdir, ignore_errors=True)  # built, never run: Beam removes it only when a pipeline runs
    ((kind, codec), width) = told
    assert kind == "compressor" and width == ("row_width", 5)
    data = np.arange(300, dtype="<i4").tobytes()
    assert codec.compress()(data) == zlib.compress(data, 6)  # a bare level is zlib at that level, as the encoder uses


def test_encode_fn_builds_its_detokenizer_once(gpt2, monkeypatch):
    files, _ = gpt2
    built = []
    real = sink_stage.DetokCounter
    monkeypatch.setattr(sink_stage, "DetokCounter", lambda tok: built.append(tok) or real(tok))
    fn = _EncodeFn(RowFormat(8, PAD, False, False), files, 4, 1)
    fn.setup()
    for _ in range(3):
        list(fn.process(RowBlock(_group(0), _lm_rows([3], 8))))
    assert len(built) == 1


# ---------------------------------------------------------------- the composites, in a pipeline


def test_the_composites_in_a_pipeline(gpt2, tmp_path):
    files, tok = gpt2
    groups = {_group(2): 9, _group(0): 14, _group(1, 1): 6}
    blocks = [RowBlock(g, _tagged_rows_lm(g, n)) for g, n in groups.items()]
    write_shard(str(tmp_path / shard_name("examples", 1)), _tagged_rows(_group(9), 3, msl=8))  # an earlier job's
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    encoded = (p | beam.Create(blocks, reshuffle=False)
               | EncodeRows(RowFormat(8, PAD, False, False), files, gzip_level=6, process_cpus=1))
    # the encoder says what it outputs, which is how Beam's registry finds the batches' coder
    # (transforms/stages/coders.py)
    assert encoded.element_type is EncodedBlock
    shards = encoded | WriteHdf5Shards(output_dir=str(tmp_path), output_name="examples", files_per_record=10,
                                       shuffle_seed=9, max_seq_length=8, gzip_level=6)
    assert_that(shards | beam.Map(lambda r: (r.index, r.name, r.num_sequences, r.part)),
                equal_to([(0, shard_name("examples", 0), 10, None), (1, shard_name("examples", 1), 10, None),
                          (2, shard_name("examples", 2), 9, None)]))
    result = p.run()
    result.wait_until_finish()
    _check_lm_files(tmp_path, groups, 9, 10)  # the file found there is replaced: not a resumed job
    with h5py.File(tmp_path / shard_name("examples", 0), "r") as f:
        assert f["data"].compression_opts == 6
        assert f["data"].id.read_direct_chunk((0, 0, 0))[1] == compress_chunk(f["data"][0], 6)
    (counter,) = result.metrics().query(MetricsFilter().with_name("sequences").with_namespace("write"))["counters"]
    assert counter.committed == 29


def test_the_writer_composite_for_a_split_job(tmp_path):
    dirs = (tmp_path / "a", tmp_path / "b")
    dirs[1].mkdir()
    write_shard(str(dirs[1] / shard_name("x", 0)), _tagged_rows(_group(9), 2, msl=7))  # committed before: kept
    blocks = [_block(_group(0, part=0), 3, 4), _block(_group(1, part=0), 2, 4), _block(_group(0, part=1), 5, 7)]
    p = beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))
    shards = (p | beam.Create(blocks, reshuffle=False)
              | WriteHdf5Shards(output_dir=PerPart(tuple(str(d) for d in dirs)), output_name="x",
                                files_per_record=4, max_seq_length=PerPart((4, 7)), num_output_files=2,
                                keep_existing=True))
    assert_that(shards | beam.Map(lambda r: (r.part, r.index, r.num_sequences)),
                equal_to([(0, 0, 3), (0, 1, 2), (1, 0, 2), (1, 1, 2)]))
    p.run().wait_until_finish()
    for d, shape in zip(dirs, [(3, 4), (3, 7)]):
        with h5py.File(d / shard_name("x", 0), "r") as f:
            assert f["data"].shape[1:] == shape


def _tagged_rows_lm(group: GroupId, n: int, msl: int = 8) -> np.ndarray:
    """LM rows (decodable ids) whose first two inputs say who they are."""
    rows = _lm_rows([msl] * n, msl, seed=group.file_index * 10 + group.slice_index)
    rows[:, 0, 0] = group.file_index * 1000 + group.slice_index
    rows[:, 0, 1] = np.arange(n)
    return rows


def _check_lm_files(directory, groups: dict, seed, files_per_record: int) -> None:
    expected = _expected_files(groups, seed, files_per_record)
    got = [[_identity(r) for r in rows] for rows in _read_files(directory)]
    assert got == expected
