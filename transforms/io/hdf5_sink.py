"""The HDF5 sink's storage side: the rows' format, the pieces a group's rows cross the shuffle in, and an output
file's rows put back in order from them.

    EncodedBlock ─route_pieces(layout)─► ((output part, file index), piece) for every file the group has rows in
    a file's pieces ─FileRows─► its rows' chunks in global position order, a batch at a time ─► ShardResult

A piece is plain values (Beam encodes a tuple of ints and bytes natively), and
holds a group's rows for one file either inline or as a reference to the
group's stored rows (transforms.io.spill). The Beam side (EncodeRows,
WriteHdf5Shards) is transforms/stages/hdf5_sink.py; the file format is
transforms.io.hdf5_format's.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from transforms.core.encoded import EncodedRows, runs_within
from transforms.core.records import EncodedBlock
from transforms.core.sharding import Layout
from transforms.io.spill import load_spilled, read_spilled

__all__ = ["ShardResult", "RowFormat", "PIECE_BYTES", "route_pieces", "FileRows"]


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


def route_pieces(block: EncodedBlock, layouts: dict):
    """((output part, file index), piece) for every file of its output's layout the group has rows in."""
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


class FileRows:
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
