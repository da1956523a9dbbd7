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
truncated file. The pieces, a file's rows put back in order, and the file
format are transforms/io/hdf5_sink.py's and transforms/io/hdf5_format.py's.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.core.detok import DetokCounter
from transforms.core.memory import release_free_memory
from transforms.core.records import EncodedBlock, PerPart, RowBlock, WindowBlock, for_group, for_part
from transforms.core.sharding import Layout, shard_name
from transforms.core.stats import H5_ROWS, PROGRESS_BYTES, real_lengths, row_stats
from transforms.core.threads import process_threads
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io import fs, progress
from transforms.io.compressors import as_codec
from transforms.io.hdf5_format import GZIP_LEVEL, WRITE_BATCH_ROWS, encode_batches, shard_n_examples, write_chunks
from transforms.io.hdf5_sink import FileRows, RowFormat, ShardResult, route_pieces
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["EncodeRows", "WriteHdf5Shards", "PROGRESS_NAMESPACE", "PROGRESS_COUNTER"]

# The Beam counter EncodeRows counts each block's input bytes on storage in (transforms.core.stats.PROGRESS_BYTES):
# what a launcher follows a job running elsewhere by (pipelines/job_progress.py).
PROGRESS_NAMESPACE = "progress"
PROGRESS_COUNTER = "input_bytes_encoded"
# VSL rows built a batch at a time are [n, 5, msl]: 1,024 of them at msl 2048 are 40 MiB, over glibc's largest mmap
# threshold (32 MiB), so every batch was mapped afresh and its pages faulted in (~6 us a row, as much as building
# the row). 512 rows (20 MiB, under the 24 MiB of 1,024 LMData rows) reuse the heap's pages from batch to batch.
VSL_BATCH_ROWS = WRITE_BATCH_ROWS // 2


class _EncodeFn(beam.DoFn):
    def __init__(self, row_format: RowFormat, tokenizer_files: TokenizerFiles, gzip_level: int,
                 process_cpus: Optional[int]):
        self._format = row_format
        self._tokenizer_files = tokenizer_files
        self._level = gzip_level
        self._threads = process_threads(process_cpus)
        # What a launcher follows a remote job's progress by (pipelines/job_progress.py).
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
        # EncodedBlock: sized for Beam's metrics without pickling (transforms.stages.coders).
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
        rows = FileRows(list(pieces), layouts[part], index)
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
            | "RouteToFiles" >> beam.FlatMap(route_pieces, beam.pvalue.AsSingleton(layout))
            # ((output part, file index), _Piece)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(layout))
        )
