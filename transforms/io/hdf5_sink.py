"""The HDF5 sink: EncodeRows before the shuffle, WriteHdf5Shards after it.

    rows ─EncodeRows─► EncodedBlock (one compressed chunk per row, + row statistics)
       │
       ├─(group sort key, name, rows)──► Layout (side input: O(groups + key ranges), never O(rows))
       │
       └─► (file index, piece) ─GroupByKey─► order by global position ─► write temp ─► rename ─► ShardResult

Rows are compressed where they are made, in parallel with everything else,
so only their final chunks (smaller than their tokens) cross the shuffle and
a writer just places bytes: at scale a file's writer is one worker, and it
must not be the one doing the compression. One GroupByKey, keyed by output
file (sharding.Layout explains how a row's file is known before any
sorting). A retried bundle writes the same chunks to a fresh temporary name
and renames it over the same final name: same bytes, never a duplicate or a
truncated file.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.core.detok import DetokCounter
from transforms.core.encoded import EncodedRows, runs_within
from transforms.core.memory import release_free_memory
from transforms.core.records import EncodedBlock, PerPart, RowBlock, WindowBlock, for_group, for_part
from transforms.core.sharding import Layout, shard_name
from transforms.core.stats import H5_ROWS, PROGRESS_BYTES, real_lengths, row_stats
from transforms.core.threads import process_threads
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io import fs, progress
from transforms.io.coders import BatchCoder  # noqa: F401 - registers the batches' coder
from transforms.io.compressors import as_codec
from transforms.io.hdf5_format import GZIP_LEVEL, WRITE_BATCH_ROWS, encode_batches, shard_n_examples, write_chunks
from transforms.io.job_progress import PROGRESS_COUNTER, PROGRESS_NAMESPACE
from transforms.io.spill import load_spilled, read_spilled

__all__ = ["EncodeRows", "WriteHdf5Shards", "ShardResult", "RowFormat"]


@dataclasses.dataclass(frozen=True)
class RowFormat:
    """What EncodeRows needs to count rows (which positions are real, which carry loss)."""

    max_seq_length: int
    pad_id: int
    inverted_mask: bool
    trailing_eos_input: bool  # Summarization, FIM and DPO rows end their real input with an untrained EOS
    sides: int = 1  # DPO: a row is two sequences (chosen, rejected) of 3 features each, counted both
    # Chat with Cerebras 2.10's loss span: untrained template text may follow the last trained position.
    untrained_tail: bool = False

    @property
    def untrained_tail_pad(self) -> Optional[int]:
        """What `real_lengths` takes: the pad id when untrained labels may end the real part."""
        return self.pad_id if self.untrained_tail else None


@dataclasses.dataclass(frozen=True)
class ShardResult:
    index: int
    name: str
    num_sequences: int  # n_examples, as the committed file says it
    seconds: dict  # stage -> seconds spent on this file
    part: Optional[int] = None  # a split job: the output the file belongs to


# A piece is the rows of one group bound for one file, as plain values (Beam encodes a tuple of
# ints and bytes natively: a few bytes of overhead, where a pickled object costs hundreds, and a
# shuffled group sends a piece of one or two rows to nearly every file):
#   (group number, row indices as uint32 bytes, chunk lengths as uint32 bytes, chunks back to back)
#   (group number, row indices as uint32 bytes, spill reference)  when the group's rows are stored
_ROW_DTYPE = np.dtype("<u4")
# A piece crosses the runner's shuffle as one record, so its chunks are cut into pieces of at most this many
# bytes (a row larger alone is a piece of its own): Flink's batch GroupByKey sorts records in memory buffers a
# record must fit, and failed on the bench corpus, where one group's rows for one file were one ~30 MB record
# ("Cannot write record to fresh sort buffer. Record too large."). A file's writer takes any number of pieces
# of a group: rows are placed by (group, row).
PIECE_BYTES = 1 << 20
# VSL rows built a batch at a time are [n, 5, msl]: 1,024 of them at msl 2048 are 40 MiB, over glibc's largest mmap
# threshold (32 MiB), so every batch was mapped afresh and its pages faulted in (~6 us a row, as much as building
# the row). 512 rows (20 MiB, under the 24 MiB of 1,024 LMData rows) reuse the heap's pages from batch to batch.
VSL_BATCH_ROWS = WRITE_BATCH_ROWS // 2


def _inline_piece(group: int, rows: np.ndarray, encoded: EncodedRows) -> tuple:
    lengths = np.diff(encoded.offsets).astype(_ROW_DTYPE)
    return group, rows.astype(_ROW_DTYPE).tobytes(), lengths.tobytes(), encoded.data.tobytes()


def _piece_rows(piece: tuple) -> np.ndarray:
    return np.frombuffer(piece[1], dtype=_ROW_DTYPE).astype(np.int64)


def _piece_source(piece: tuple) -> tuple[EncodedRows, bool]:
    """(the rows a piece refers to, whether they are the piece's own rows in order, not the whole group)."""
    if len(piece) == 3:
        return load_spilled(piece[2]), False
    lengths = np.frombuffer(piece[2], dtype=_ROW_DTYPE)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return EncodedRows(np.frombuffer(piece[3], dtype=np.uint8), offsets), True


class _EncodeFn(beam.DoFn):
    def __init__(self, row_format: RowFormat, tokenizer_files: TokenizerFiles, gzip_level: int,
                 process_cpus: Optional[int]):
        self._format = row_format
        self._tokenizer_files = tokenizer_files
        self._level = gzip_level
        self._threads = process_threads(process_cpus)
        # What a launcher follows a remote job's progress by (transforms/io/job_progress.py).
        self._progress = beam.metrics.Metrics.counter(PROGRESS_NAMESPACE, PROGRESS_COUNTER)

    def setup(self):
        self._detok = None

    def process(self, block):
        started = time.perf_counter()
        progress.begin("encode")
        if self._detok is None:
            # Built on first use, not in setup(): by then the tokenizer is busy with the next group.
            self._detok = DetokCounter(shared_tokenizer(self._tokenizer_files.load()))
        fmt = for_group(self._format, block.group)
        stats = block.stats

        encoded_rows = 0

        def count(rows: np.ndarray) -> None:
            nonlocal encoded_rows
            encoded_rows += len(rows)
            progress.settle(block.group.name, encoded_rows / max(len(block), 1))
            progress.count("sequences", len(rows))
            # Counted on exactly the rows that are compressed, so on exactly what the files hold.
            n = len(rows)
            if fmt.sides > 1:  # DPO: the sides one after another, each a 3-feature sequence
                rows = np.concatenate(np.split(rows, fmt.sides, axis=1))
            lengths = real_lengths(rows, fmt.inverted_mask, fmt.trailing_eos_input, fmt.untrained_tail_pad)
            counters = row_stats(rows, fmt.inverted_mask, fmt.trailing_eos_input, lengths=lengths)
            counters["num_sequences"] = n  # examples, whatever the sides
            counters["detokenized_chars"], counters["detokenized_bytes"] = self._detok.count_rows(rows[:, 0, :],
                                                                                                 lengths)
            for key, value in counters.items():
                stats.totals[H5_ROWS + key] += int(value)

        encoded = encode_batches(self._batches(block), on_batch=count, level=self._level, threads=self._threads)
        release_free_memory()  # the batches of full rows and the chunk list
        stats.totals[TIME_PREFIX + "encode"] += int((time.perf_counter() - started) * 1000)
        progress.settle(block.group.name, 1.0)  # all of it, even for a group without rows
        progress.end("encode")
        self._progress.inc(stats[PROGRESS_BYTES])
        yield EncodedBlock(block.group, len(encoded), rows=encoded, stats=stats)

    @staticmethod
    def _batches(block):
        if isinstance(block, WindowBlock):
            segments = getattr(block.windows, "vsl_segments", None)  # VSL: chunks made of ramp pieces
            step = WRITE_BATCH_ROWS if segments is None else VSL_BATCH_ROWS
            for i in range(0, len(block), step):
                hi = min(i + step, len(block))
                rows = block.windows.rows_between(i, hi)
                yield rows if segments is None else (rows, segments(i, hi))
        elif isinstance(block, RowBlock):
            for i in range(0, len(block.rows), WRITE_BATCH_ROWS):
                yield block.rows[i:i + WRITE_BATCH_ROWS]
        else:
            raise TypeError(f"EncodeRows takes WindowBlock or RowBlock, got {type(block).__name__}")


class EncodeRows(beam.PTransform):
    """PCollection[WindowBlock | RowBlock] -> PCollection[EncodedBlock], before the shuffle.

    Each row becomes the compressed chunk the sink will store (zlib at
    `gzip_level`: WriteHdf5Shards must be given the same level), and the rows'
    statistics (h5_dataset_stats, post-process token counts) are added to the
    block's stats under `H5_ROWS`.
    """

    def __init__(self, row_format: RowFormat, tokenizer_files: TokenizerFiles, *, gzip_level: int = GZIP_LEVEL,
                 process_cpus: Optional[int] = None):
        """process_cpus: cores one worker process gets (None: all of this machine's)."""
        super().__init__()
        self._fn = _EncodeFn(row_format, tokenizer_files, gzip_level, process_cpus)

    def expand(self, blocks):
        progress.compressor(as_codec(self._fn._level))  # the bar's unit of cost before it is measured
        # EncodedBlock: sized for Beam's metrics without pickling (transforms.io.coders).
        return blocks | "Encode" >> beam.ParDo(self._fn).with_output_types(EncodedBlock)


def _meta(block: EncodedBlock) -> tuple:
    return block.group.part, (block.group.sort_key, block.group.name, block.n_rows)


def _make_layouts(metas: list, parts: tuple, shuffle_seed, files_per_record: int, num_output_files) -> dict:
    """Every output's layout, from its groups' metadata: output part -> Layout."""
    by_part: dict = {part: [] for part in parts}
    for part, meta in metas:
        by_part[part].append(meta)
    return {part: Layout.create(m, shuffle_seed=shuffle_seed, files_per_record=files_per_record,
                                num_output_files=num_output_files) for part, m in by_part.items()}


def _route(block: EncodedBlock, layouts: dict):
    part = block.group.part
    layout = layouts[part]
    group = layout.group_of(block.group.sort_key)
    routes = layout.route(group)
    rows = block.rows
    if rows is None and not block.stored.local and layout.shuffle_seed is not None:
        # Stored in a bucket and shuffled: the group reaches nearly every file with a row or two, so it is
        # read once here and its rows travel with the pieces, rather than every writer fetching a few.
        rows = read_spilled(block.stored)
    for f, index in routes:
        if rows is not None:
            mine = rows.take(index)
            for lo, hi in runs_within(np.diff(mine.offsets), PIECE_BYTES):
                yield (part, f), _inline_piece(group, index[lo:hi], mine.between(lo, hi))
        else:
            yield (part, f), (group, index.astype(_ROW_DTYPE).tobytes(), block.stored)


class _FileRows:
    """The rows of one output file in global position order, fetched batch by batch from their sources.

    Only the order (two small integer arrays) is held for the whole file; the
    chunks stay where they are (inline in the pieces, or in stored files) until
    their batch is written, so memory does not grow with files_per_record.
    """

    def __init__(self, pieces: list, layout: Layout, index: int):
        rows = [_piece_rows(p) for p in pieces]
        groups = np.concatenate([np.full(len(r), p[0], dtype=np.int64) for p, r in zip(pieces, rows)]) \
            if pieces else np.zeros(0, np.int64)
        positions = layout.positions(groups, np.concatenate(rows) if rows else np.zeros(0, np.int64))
        lo, hi = layout.files.starts[index], layout.files.starts[index + 1]
        self._sources, source_of, local, kept = [], [], [], []
        start = 0
        for p, r in zip(pieces, rows):
            pos = positions[start:start + len(r)]
            start += len(r)
            mine = np.flatnonzero((pos >= lo) & (pos < hi))
            if not len(mine):
                continue
            source, own = _piece_source(p)
            self._sources.append(source)
            source_of.append(np.full(len(mine), len(self._sources) - 1, dtype=np.int32))
            local.append(mine if own else r[mine])
            kept.append(pos[mine])
        order = np.argsort(np.concatenate(kept)) if kept else np.zeros(0, np.int64)
        if len(order) != hi - lo:
            raise RuntimeError(f"shard {index}: {len(order)} rows, expected {hi - lo}")
        self._source = np.concatenate(source_of)[order] if kept else np.zeros(0, np.int32)
        self._local = np.concatenate(local)[order] if kept else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self._source)

    def batch(self, lo: int, hi: int) -> EncodedRows:
        """Rows lo..hi (positions within the file), in order."""
        source, local = self._source[lo:hi], self._local[lo:hi]
        parts, where = [], []
        for s in np.unique(source).tolist():
            k = np.flatnonzero(source == s)
            parts.append(self._sources[s].take(local[k]))
            where.append(k)
        merged = EncodedRows.concat(parts)
        return merged.take(np.argsort(np.concatenate(where))) if parts else merged


class _WriteShardFn(beam.DoFn):
    def __init__(self, output_dir: str, output_name: str, max_seq_length: int, features: int, gzip_level: int,
                 keep_existing: bool):
        self._output_dir = output_dir
        self._output_name = output_name
        self._msl = max_seq_length
        self._features = features
        self._level = gzip_level
        self._keep_existing = keep_existing
        self._written = beam.metrics.Metrics.counter("write", "sequences")

    def process(self, element, layouts: dict):
        (part, index), pieces = element
        output_dir, msl = for_part(self._output_dir, part), for_part(self._msl, part)
        name = shard_name(self._output_name, index)
        final = fs.join(output_dir, name)
        if self._keep_existing and fs.exists(final):
            # Committed by an earlier attempt of this same job (checked at start-up): keep it.
            yield ShardResult(index, name, shard_n_examples(final), {}, part)
            return
        started = time.perf_counter()
        rows = _FileRows(list(pieces), layouts[part], index)
        seconds = {"shuffle": time.perf_counter() - started}
        started = time.perf_counter()

        def chunks():
            for i in range(0, len(rows), WRITE_BATCH_ROWS):
                batch = rows.batch(i, min(i + WRITE_BATCH_ROWS, len(rows)))
                for k in range(len(batch)):
                    yield batch.chunk(k)

        tmp = os.path.join(fs.local_scratch_dir(output_dir), fs.unique_temp_name(name))
        write_chunks(tmp, len(rows), msl, chunks(), level=self._level, features=self._features)
        n = shard_n_examples(tmp)  # n_examples as the file says it
        fs.commit_local_file(tmp, final)
        seconds["write"] = time.perf_counter() - started
        self._written.inc(n)
        yield ShardResult(index, name, n, seconds, part)


class WriteHdf5Shards(beam.PTransform):
    """PCollection[EncodedBlock] -> PCollection[ShardResult], one per committed file."""

    def __init__(self, *, output_dir: str | PerPart, output_name: str, files_per_record: int, num_output_files=None,
                 shuffle_seed: Optional[int] = None, max_seq_length: int | PerPart, features: int = 3,
                 gzip_level: int = GZIP_LEVEL, keep_existing: bool = False):
        """features: rows are [features, max_seq_length] (3; VSL 5; DPO 6).

        A split job's outputs share the transform: `output_dir` and `max_seq_length` are then PerPart, every
        output has its own layout and files, and a ShardResult names its output (`part`).
        """
        super().__init__()
        self._parts = tuple(range(len(output_dir.values))) if isinstance(output_dir, PerPart) else (None,)
        self._files_per_record = files_per_record
        self._num_output_files = num_output_files
        self._shuffle_seed = shuffle_seed
        self._fn = _WriteShardFn(output_dir, output_name, max_seq_length, features, gzip_level, keep_existing)

    def expand(self, blocks):
        progress.row_width(self._fn._features)  # the bar's cost of compressing rows before it is measured
        layout = (
            blocks
            | "GroupMeta" >> beam.Map(_meta)
            | "AllGroupMeta" >> beam.combiners.ToList()
            | "Layout" >> beam.Map(_make_layouts, self._parts, self._shuffle_seed, self._files_per_record,
                                   self._num_output_files)
        )
        return (
            blocks
            | "RouteToFiles" >> beam.FlatMap(_route, beam.pvalue.AsSingleton(layout))
            # ((output part, file index), _Piece)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(layout))
        )
