"""ReadCorpus: input files -> one DocBatch per packing group, plus dead-letter parts.

    InputFile ─PlanUnits─► WorkUnit ─Reshuffle─► ReadUnits ─► DocBatch (one per packing group) ─┐
                                                          └─► DeadLetterPart                    │
    a large file read in order (distributed runners only):                                      ├─► Flatten
               WorkUnit ─Reshuffle─► ReadLargeFiles ─► DocBatch ─Reshuffle─────────────────────┘
                                                   └─► DeadLetterPart

A large .jsonl or .parquet file (and a .txt read a line a record) is
planned as several work units that workers read in parallel
(transforms.core.units says how its packing groups are fixed; the files,
the units and the records are transforms/io/read_corpus.py's). A file
that can only be read in order (a compressed stream, a tar) is read by
one worker, which cuts it into packing groups of
`group_bytes` of text. When such a file is larger than `fan_out_bytes` on
storage, its groups are handed to other workers through a Reshuffle as they
are read, so tokenizing it does not wait on one core; smaller files are
tokenized where they are read, which costs no shuffle (see `FAN_OUT_BYTES`).

The large files' units are read by a step of their own, parted from the
others at the units (a few small records), not at their groups, and the
groups handed on pass one step of the SDK's (`Arrived`) between the
Reshuffle and the Flatten. Each is what a real engine needs:
- Beam's Java fuser (the Flink, Spark and Samza job servers) runs a Reshuffle
  as a runner transform and walks through it: a Flatten reached straight from
  a Reshuffle is kept as a runner transform, while the read's stage, which
  produces its other input, fuses the same Flatten and so never materializes
  that input ("PCollectionNodes [...] were consumed but never produced"; the
  family of apache/beam#34647 and #21325). With a ParDo after the Reshuffle
  the Flatten is fused into both producing stages.
- Groups split off one output and rejoined (a tagged output of the read, or
  the read's one output both reshuffled and flattened) make a diamond that
  Flink's pipelined batch exchanges deadlock on once groups fill the network
  buffers: the bench corpus with every group handed on hung for ten minutes
  (FLINK-10672). Parted at the units, no producer of groups feeds two branches.
"""

from __future__ import annotations

import time
from typing import Optional

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.records import BYTES, ROWS, BadRecord, DocBatch, Document, GroupId, SkippedRecord, WorkUnit
from transforms.core.stats import Stats
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress
from transforms.io.read_corpus import (GROUP_END, DeadLetterParts, ProgressShares, plan_units, read_input_manifest,
                                       unit_records)
from transforms.io.readers import StreamPosition
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["ReadCorpus", "ReadInputManifest", "DOCS", "DEAD_LETTERS"]

DOCS = "docs"
DEAD_LETTERS = "dead_letters"


class ReadInputManifest(beam.PTransform):
    """PBegin -> PCollection[InputFile]: the files listed by `write_input_manifest`, read on a worker."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, pbegin):
        return (pbegin
                | "ManifestPath" >> beam.Create([self._path])
                | "ListInputFiles" >> beam.FlatMap(read_input_manifest))


class _ReadUnitFn(beam.DoFn):
    def __init__(self, keys: tuple, join_keys: bool, group_bytes: int, max_record_bytes: int, check=None,
                 txt_lines: bool = False):
        self._keys = keys
        self._txt_lines = txt_lines
        self._join_keys = join_keys
        self._check = check
        self._group_bytes = group_bytes
        self._max_record_bytes = max_record_bytes
        self._docs = beam.metrics.Metrics.counter("read", "documents")
        self._bad = beam.metrics.Metrics.counter("read", "bad_records")
        self._bytes = beam.metrics.Metrics.counter("read", "text_bytes")
        self._fanned_out = beam.metrics.Metrics.counter("read", "groups_fanned_out")

    def process(self, unit: WorkUnit):
        # The progress bar's read stage: reading each group, not the work downstream while this is suspended.
        yield from progress.working_through("read", self._read(unit), _progress_bytes)

    def _read(self, unit: WorkUnit):
        f = unit.file
        letters = DeadLetterParts(unit)
        position = StreamPosition()
        progress_of = ProgressShares(unit, position)
        lines = 0
        docs, stats, size = [], Stats(), 0  # the group being read
        started = time.perf_counter()  # reading time only: downstream work runs while we are suspended

        def group(k: int, last: bool) -> DocBatch:
            nonlocal docs, stats, size, started
            out = DocBatch(GroupId(f.index, k, f.path, f.relpath), docs, stats, progress_of(k, last))
            out.stats.totals[TIME_PREFIX + "read"] += int((time.perf_counter() - started) * 1000)
            progress.count("bad", sum(v for key, v in stats.totals.items() if key.startswith("bad.")))
            docs, stats, size, started = [], Stats(), 0, time.perf_counter()
            if unit.fan_out:
                self._fanned_out.inc()
            return out

        k = unit.first_group
        # The check runs in the reader, which still holds the record's raw bytes for its dead letter.
        for at, record in unit_records(unit, self._keys, self._max_record_bytes, position, self._check,
                                       self._txt_lines):
            if at is not None:
                k = at
            if record is GROUP_END:
                yield group(k, last=k == unit.end_group - 1)
                continue
            lines += 1
            stats.add("docs_read", 1, f.path)
            if type(record) is BadRecord:
                stats.add(f"bad.{record.reason}", 1, f.path)
                self._bad.inc()
                part = letters.add(record)
                if part is not None:
                    yield pvalue.TaggedOutput(DEAD_LETTERS, part)
                continue
            if type(record) is SkippedRecord:  # nothing in it to hand on: good, and dropped here
                stats.add("docs_good", 1, f.path)
                stats.add(f"dropped.{record.reason}", 1, f.path)
                continue
            if self._join_keys and len(record.values) > 1:
                record = Document(record.index, ("\n\n".join(record.values),), record.member)
            doc_bytes = sum(len(v) for v in record.values)  # chars: a cheap proxy for bytes
            stats.add("docs_good", 1, f.path)
            self._docs.inc()
            self._bytes.inc(doc_bytes)
            docs.append(record)
            size += doc_bytes
            if unit.kind not in (BYTES, ROWS) and size >= self._group_bytes:
                yield group(k, last=False)
                k += 1
        if unit.kind not in (BYTES, ROWS) and (docs or k == 0 or stats.totals):
            # Always the last group, even empty: it may carry the file's counts.
            yield group(k, last=True)
        elif unit.kind not in (BYTES, ROWS):
            # The file ended right after a full group: its remaining bytes are that group's.
            progress.advance(progress_of(k, last=True))
        part = letters.finish(lines)
        if part is not None:
            yield pvalue.TaggedOutput(DEAD_LETTERS, part)


def _progress_bytes(output) -> int:
    """The input's bytes a group read stands for (its share; 0 for a dead-letter part)."""
    return getattr(getattr(output, "value", output), "progress_bytes", 0)


class ReadCorpus(beam.PTransform):
    """PCollection[InputFile] -> {DOCS: DocBatch, DEAD_LETTERS: DeadLetterPart}."""

    def __init__(self, *, keys: tuple, join_keys: bool, group_bytes: int, max_record_bytes: int = 256 << 20,
                 unit_groups: int, fan_out_bytes: Optional[int] = None, check=None, txt_lines: bool = False):
        """unit_groups: packing groups per work unit of a .jsonl/.parquet file (who reads what, not the output).

        fan_out_bytes: a file read in order and larger than this on storage hands its groups
        to other workers (None: never; locally a Reshuffle would only hold them in memory).

        check: a picklable callable, values -> None for a usable record, or (reason, detail) for one that is
        bad although it parsed (a conversation with an unknown role): it is dead-lettered in file order with
        the readers' own bad records, and counted as bad, never as read and then lost.

        txt_lines: a .txt file is a record per line (Cerebras 2.10's reading), split into work units as a .jsonl
        is; its blank lines count as read and dropped (`blank_line`). Else a .txt file is one document.
        """
        super().__init__()
        self._keys = keys
        self._group_bytes = group_bytes
        self._unit_groups = unit_groups
        self._fan_out_bytes = fan_out_bytes
        self._txt_lines = txt_lines
        self._fn = _ReadUnitFn(keys, join_keys, group_bytes, max_record_bytes, check, txt_lines)

    def expand(self, files):
        units = (
            files
            # Spread files over workers: they arrive in one bundle.
            | "SpreadFiles" >> beam.Reshuffle()
            | "PlanUnits" >> beam.FlatMap(plan_units, self._keys, self._group_bytes, self._unit_groups,
                                          self._fan_out_bytes, self._txt_lines)
        )
        if self._fan_out_bytes is None:
            read = self._read(units, "SpreadUnits", "ReadUnits")
            return {DOCS: read[DOCS], DEAD_LETTERS: read[DEAD_LETTERS]}
        parts = units | "LargeFilesApart" >> beam.Partition(_read_apart, 2)
        here = self._read(parts[0], "SpreadUnits", "ReadUnits")
        large = self._read(parts[1], "SpreadLargeFiles", "ReadLargeFiles")
        # Typed again after each step, which would otherwise say Any: Beam would pickle every group.
        handed_on = (large[DOCS]
                     | "FanOutGroups" >> beam.Reshuffle().with_output_types(DocBatch)
                     # A step of the SDK's between the Reshuffle and the Flatten: see the module's docstring.
                     | "Arrived" >> beam.Map(_arrived).with_output_types(DocBatch))
        docs = (here[DOCS], handed_on) | "AllGroups" >> beam.Flatten().with_output_types(DocBatch)
        dead = (here[DEAD_LETTERS], large[DEAD_LETTERS]) | "AllDeadLetters" >> beam.Flatten()
        return {DOCS: docs, DEAD_LETTERS: dead}

    def _read(self, units, spread: str, read: str):
        return (units
                | spread >> beam.Reshuffle()
                # DocBatch: sized for Beam's metrics without pickling (transforms.stages.coders).
                | read >> beam.ParDo(self._fn).with_output_types(DocBatch).with_outputs(DEAD_LETTERS, main=DOCS))


def _arrived(batch: DocBatch) -> DocBatch:
    return batch


def _read_apart(unit: WorkUnit, n: int) -> int:
    """1 for a unit whose groups are handed on (a large file read in order), 0 for the others."""
    return int(unit.fan_out)
