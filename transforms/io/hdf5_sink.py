"""WriteHdf5Shards: packed groups -> committed `.h5` shards of exact sizes.

    blocks ──(group, rows, key-range histogram)──► Layout (side input)
       │
       └─► (file index, Piece) ─GroupByKey─► order by global position ─► write temp ─► rename ─► ShardResult

One GroupByKey, keyed by output file (sharding.Layout explains how a row's
file is known before any sorting). Only compact rows (real tokens + loss
run), or references to rows stored on local disk, cross it; the writer
rebuilds mask and labels. A retried bundle writes the same rows to a fresh
temporary name and renames it over the same final name: same bytes, never a
duplicate or a truncated file.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.core.compact import CompactRows, concat_compact, expand_rows
from transforms.core.detok import DetokCounter
from transforms.core.records import CompactBlock
from transforms.core.sharding import Layout, range_histogram, row_keys, shard_name
from transforms.core.stats import real_lengths, row_stats
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io import fs
from transforms.io.hdf5_format import WRITE_BATCH_ROWS, iter_shard, shard_n_examples, write_shard_batches
from transforms.io.spill import load_spilled
from transforms.core.timing import TIME_PREFIX

__all__ = ["WriteHdf5Shards", "ShardResult", "RowFormat"]


@dataclasses.dataclass(frozen=True)
class RowFormat:
    """What the writer needs to rebuild full rows from compact ones."""

    max_seq_length: int
    pad_id: int
    inverted_mask: bool
    trailing_eos_input: bool  # Summarization and FIM rows end their real input with an untrained EOS


@dataclasses.dataclass(frozen=True)
class ShardResult:
    index: int
    name: str
    counters: dict  # recounted from the committed file


@dataclasses.dataclass
class _Piece:
    group_name: str
    group_sort_key: tuple
    rows: np.ndarray  # indices within the group
    inline: Optional[CompactRows]  # aligned with `rows`
    stored: Optional[object]  # or a spill reference holding the whole group


def _meta(block: CompactBlock, shuffle_seed: Optional[int]):
    hist = None
    if shuffle_seed is not None:
        hist = range_histogram(row_keys(shuffle_seed, block.group.name, np.arange(block.n_rows)))
    return block.group.sort_key, block.group.name, block.n_rows, hist


def _make_layout(metas: list, shuffle_seed, files_per_record: int, num_output_files) -> Layout:
    return Layout.create(metas, shuffle_seed=shuffle_seed, files_per_record=files_per_record,
                         num_output_files=num_output_files)


def _route(block: CompactBlock, layout: Layout):
    for f, rows in layout.route(block.group.name, block.n_rows):
        inline = block.rows.take(rows) if block.rows is not None else None
        yield f, _Piece(block.group.name, block.group.sort_key, rows, inline, block.stored)


class _FileRows:
    """The rows of one output file in global position order, fetched batch by batch from their sources.

    Only the order (two small integer arrays) is held for the whole file; the
    tokens stay where they are (inline in the pieces, or in stored files) until
    their batch is written, so memory does not grow with files_per_record.
    """

    def __init__(self, pieces: list, layout: Layout, index: int):
        names = [p.group_name for p in pieces for _ in range(len(p.rows))]
        sort_keys = [p.group_sort_key for p in pieces for _ in range(len(p.rows))]
        rows = np.concatenate([p.rows for p in pieces]) if pieces else np.zeros(0, np.int64)
        positions = layout.positions(names, sort_keys, rows.tolist())
        lo, hi = layout.files.starts[index], layout.files.starts[index + 1]
        self._sources, source_of, local, kept = [], [], [], []
        start = 0
        for p in pieces:
            pos = positions[start:start + len(p.rows)]
            start += len(p.rows)
            mine = np.flatnonzero((pos >= lo) & (pos < hi))
            if not len(mine):
                continue
            self._sources.append(p.inline if p.inline is not None else load_spilled(p.stored))
            source_of.append(np.full(len(mine), len(self._sources) - 1, dtype=np.int32))
            local.append(mine if p.inline is not None else p.rows[mine])
            kept.append(pos[mine])
        order = np.argsort(np.concatenate(kept)) if kept else np.zeros(0, np.int64)
        if len(order) != hi - lo:
            raise RuntimeError(f"shard {index}: {len(order)} rows, expected {hi - lo}")
        self._source = np.concatenate(source_of)[order] if kept else np.zeros(0, np.int32)
        self._local = np.concatenate(local)[order] if kept else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self._source)

    def batch(self, lo: int, hi: int) -> CompactRows:
        """Rows lo..hi (positions within the file) as CompactRows, in order."""
        source, local = self._source[lo:hi], self._local[lo:hi]
        parts, where = [], []
        for s in np.unique(source).tolist():
            k = np.flatnonzero(source == s)
            parts.append(self._sources[s].take(local[k]))
            where.append(k)
        merged = concat_compact(parts)
        return merged.take(np.argsort(np.concatenate(where))) if parts else merged


class _WriteShardFn(beam.DoFn):
    def __init__(self, output_dir: str, output_name: str, row_format: RowFormat, tokenizer_files: TokenizerFiles,
                 keep_existing: bool):
        self._output_dir = output_dir
        self._output_name = output_name
        self._format = row_format
        self._tokenizer_files = tokenizer_files
        self._keep_existing = keep_existing
        self._written = beam.metrics.Metrics.counter("write", "sequences")

    def setup(self):
        self._detok = DetokCounter(shared_tokenizer(self._tokenizer_files))

    def process(self, element, layout: Layout):
        index, pieces = element
        name = shard_name(self._output_name, index)
        final = fs.join(self._output_dir, name)
        if self._keep_existing and fs.exists(final):
            # Committed by an earlier attempt of this same job (checked at start-up): keep it.
            counters = Counter()
            for _, data in iter_shard(final, WRITE_BATCH_ROWS):
                counters.update(self._count(data))
            counters["num_sequences"] = shard_n_examples(final)
            yield ShardResult(index, name, dict(counters))
            return
        started = time.perf_counter()
        rows = _FileRows(list(pieces), layout, index)
        fmt = self._format
        counters: Counter = Counter()
        counters[TIME_PREFIX + "shuffle"] = int((time.perf_counter() - started) * 1000)
        started = time.perf_counter()

        def batches():
            for i in range(0, len(rows), WRITE_BATCH_ROWS):
                batch = expand_rows(rows.batch(i, min(i + WRITE_BATCH_ROWS, len(rows))),
                                    msl=fmt.max_seq_length, pad_id=fmt.pad_id, inverted_mask=fmt.inverted_mask)
                counters.update(self._count(batch))  # counted on exactly the rows written
                yield batch

        tmp = os.path.join(fs.local_scratch_dir(self._output_dir), fs.unique_temp_name(name))
        write_shard_batches(tmp, len(rows), fmt.max_seq_length, batches())
        counters["num_sequences"] = shard_n_examples(tmp)  # n_examples as the file says it
        fs.commit_local_file(tmp, final)
        counters[TIME_PREFIX + "write"] = int((time.perf_counter() - started) * 1000)
        self._written.inc(counters["num_sequences"])
        yield ShardResult(index, name, dict(counters))

    def _count(self, data: np.ndarray) -> Counter:
        fmt = self._format
        counters = row_stats(data, fmt.inverted_mask, fmt.trailing_eos_input)
        del counters["num_sequences"]
        lengths = real_lengths(data, fmt.inverted_mask, fmt.trailing_eos_input)
        chars, nbytes = self._detok.count([data[i, 0, :n] for i, n in enumerate(lengths)])
        counters["detokenized_chars"] = chars
        counters["detokenized_bytes"] = nbytes
        return counters


class WriteHdf5Shards(beam.PTransform):
    """PCollection[CompactBlock] -> PCollection[ShardResult], one per committed file."""

    def __init__(self, *, output_dir: str, output_name: str, files_per_record: int, num_output_files=None,
                 shuffle_seed: Optional[int] = None, row_format: RowFormat, tokenizer_files: TokenizerFiles,
                 keep_existing: bool = False):
        super().__init__()
        self._files_per_record = files_per_record
        self._num_output_files = num_output_files
        self._shuffle_seed = shuffle_seed
        self._fn = _WriteShardFn(output_dir, output_name, row_format, tokenizer_files, keep_existing)

    def expand(self, blocks):
        layout = (
            blocks
            | "GroupMeta" >> beam.Map(_meta, self._shuffle_seed)
            | "AllGroupMeta" >> beam.combiners.ToList()
            | "Layout" >> beam.Map(_make_layout, self._shuffle_seed, self._files_per_record, self._num_output_files)
        )
        return (
            blocks
            | "RouteToFiles" >> beam.FlatMap(_route, beam.pvalue.AsSingleton(layout))
            # (file index, _Piece)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(layout))
        )
