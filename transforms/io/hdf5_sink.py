"""WriteHdf5Shards: packed rows -> committed `.h5` shards of exact sizes.

    blocks ──(group, rows)──► layout (side input: first global position of every group)
       │
       └─► (file index, (position in file, rows)) ─GroupByKey─► write temp ─► rename ─► ShardResult

One GroupByKey, keyed by output file: a file's rows meet on one worker, are
put in position order and written once. A retried bundle writes the same
rows to a fresh temporary name and renames it over the same final name, so
the result is the same bytes, never a duplicate or a truncated file.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import apache_beam as beam
import h5py
import numpy as np

from transforms.core.records import RowBlock
from transforms.core.sharding import FileLayout, group_offsets, shard_name
from transforms.core.stats import real_lengths, row_stats
from transforms.core.tokenizer import TokenizerFiles, build_tokenizer
from transforms.io import fs
from transforms.io.hdf5_format import write_shard

__all__ = ["WriteHdf5Shards", "ShardResult", "Layout"]


@dataclasses.dataclass(frozen=True)
class Layout:
    offsets: dict  # group name -> first global position
    files: FileLayout


@dataclasses.dataclass(frozen=True)
class ShardResult:
    index: int
    name: str
    counters: dict  # recounted from the committed file


def _make_layout(counts: list, files_per_record: int, num_output_files) -> Layout:
    offsets, total = group_offsets(counts)
    return Layout(offsets, FileLayout.create(total, files_per_record=files_per_record,
                                             num_output_files=num_output_files))


def _assign_to_files(block: RowBlock, layout: Layout):
    start = layout.offsets[block.group.name]
    for f, lo, hi in layout.files.split(start, len(block)):
        yield f, (start + lo - layout.files.starts[f], block.rows[lo:hi])


class _WriteShardFn(beam.DoFn):
    def __init__(self, output_dir: str, output_name: str, inverted_mask: bool, trailing_eos_input: bool,
                 tokenizer_files: TokenizerFiles):
        self._output_dir = output_dir
        self._output_name = output_name
        self._inverted_mask = inverted_mask
        self._trailing_eos_input = trailing_eos_input
        self._tokenizer_files = tokenizer_files
        self._tokenizer = None
        self._written = beam.metrics.Metrics.counter("write", "sequences")

    def setup(self):
        self._tokenizer = build_tokenizer(self._tokenizer_files)

    def process(self, element, layout: Layout):
        index, pieces = element
        pieces = sorted(pieces, key=lambda p: p[0])
        rows = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros((0, 3, 0), np.int32)
        expected = layout.files.size(index)
        positions = [p[0] for p in pieces]
        if len(rows) != expected or positions[0] != 0:
            raise RuntimeError(f"shard {index}: got {len(rows)} rows at {positions[:3]}..., expected {expected}")
        name = shard_name(self._output_name, index)
        final = fs.join(self._output_dir, name)
        tmp = os.path.join(fs.local_scratch_dir(self._output_dir), fs.unique_temp_name(name))
        write_shard(tmp, rows)
        counters = self._recount(tmp)
        fs.commit_local_file(tmp, final)
        self._written.inc(counters["num_sequences"])
        yield ShardResult(index, name, dict(counters))

    def _recount(self, path: str) -> Counter:
        """Statistics of the file as written, read back from it."""
        with h5py.File(path, "r") as f:
            data = f["data"][()]
            n_attr = int(f.attrs["n_examples"])
        if n_attr != data.shape[0]:
            raise RuntimeError(f"{path}: n_examples {n_attr} != rows {data.shape[0]}")
        counters = row_stats(data, self._inverted_mask, self._trailing_eos_input)
        lengths = real_lengths(data, self._inverted_mask, self._trailing_eos_input)
        texts = self._tokenizer.decode_batch([data[i, 0, :n].tolist() for i, n in enumerate(lengths)])
        counters["detokenized_chars"] = sum(len(t) for t in texts)
        counters["detokenized_bytes"] = sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts)
        return counters


class WriteHdf5Shards(beam.PTransform):
    """PCollection[RowBlock] -> PCollection[ShardResult], one per committed file."""

    def __init__(self, *, output_dir: str, output_name: str, files_per_record: int, num_output_files=None,
                 inverted_mask: bool, trailing_eos_input: bool = False, tokenizer_files: TokenizerFiles):
        super().__init__()
        self._files_per_record = files_per_record
        self._num_output_files = num_output_files
        self._fn = _WriteShardFn(output_dir, output_name, inverted_mask, trailing_eos_input, tokenizer_files)

    def expand(self, blocks):
        layout = (
            blocks
            | "GroupSizes" >> beam.Map(lambda b: (b.group.sort_key, b.group.name, len(b)))
            | "AllGroupSizes" >> beam.combiners.ToList()
            | "Layout" >> beam.Map(_make_layout, self._files_per_record, self._num_output_files)
        )
        return (
            blocks
            | "AssignToFiles" >> beam.FlatMap(_assign_to_files, beam.pvalue.AsSingleton(layout))
            # (file index, (position in file, rows))
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(layout))
        )
