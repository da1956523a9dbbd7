"""ReadCorpus: input files -> one DocBatch per packing group, plus dead letters.

A packing group is a whole file, or a fixed slice of a large file (the first
documents adding up to `group_bytes` of text, then the next, ...). The slice
boundaries depend only on the file's content, so the packing does too.
"""

from __future__ import annotations

import time
from typing import Optional

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.records import BadRecord, DocBatch, Document, GroupId, InputFile
from transforms.core.stats import Stats
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress
from transforms.io.readers import read_records

__all__ = ["ReadCorpus", "DOCS", "DEAD_LETTERS"]

DOCS = "docs"
DEAD_LETTERS = "dead_letters"
PROGRESS_STEP = 1 << 20  # text bytes between progress bar updates


class _ReadFileFn(beam.DoFn):
    def __init__(self, keys: tuple, join_keys: bool, group_bytes: int, max_record_bytes: int,
                 progress_total: Optional[int]):
        self._keys = keys
        self._max_record_bytes = max_record_bytes
        self._join_keys = join_keys
        self._group_bytes = group_bytes
        self._progress_total = progress_total  # None: no progress bar
        self._docs = beam.metrics.Metrics.counter("read", "documents")
        self._bad = beam.metrics.Metrics.counter("read", "bad_records")
        self._bytes = beam.metrics.Metrics.counter("read", "text_bytes")

    def _progress(self, nbytes: int) -> None:
        if self._progress_total and nbytes > 0:
            progress.advance(nbytes, self._progress_total)

    def teardown(self):
        if self._progress_total:
            progress.close()

    def process(self, f: InputFile):
        slice_index, docs, size = 0, [], 0
        stats = Stats()
        shown, pending = 0, 0  # progress shown for this file (file bytes), text read since
        started = time.perf_counter()  # reading time only: downstream work runs while we are suspended

        def batch() -> DocBatch:
            stats.totals[TIME_PREFIX + "read"] += int((time.perf_counter() - started) * 1000)
            return DocBatch(GroupId(f.index, slice_index, f.path, f.relpath), docs, stats)

        for record in read_records(f.path, self._keys, max_record_bytes=self._max_record_bytes):
            stats.add("docs_read", 1, f.path)
            if isinstance(record, BadRecord):
                stats.add(f"bad.{record.reason}", 1, f.path)
                self._bad.inc()
                yield pvalue.TaggedOutput(DEAD_LETTERS, record)
                continue
            if self._join_keys and len(record.values) > 1:
                record = Document(record.index, ("\n\n".join(record.values),), record.member)
            doc_bytes = sum(len(v) for v in record.values)  # chars: a cheap proxy for bytes
            stats.add("docs_good", 1, f.path)
            self._docs.inc()
            self._bytes.inc(doc_bytes)
            docs.append(record)
            size += doc_bytes
            pending += doc_bytes
            if pending >= PROGRESS_STEP and f.size:
                # Text and file sizes differ (compression): advance by text, never past the file.
                step = min(pending, f.size - shown)
                self._progress(step)
                shown, pending = shown + step, 0
            if size >= self._group_bytes:
                yield batch()
                slice_index, docs, size, stats = slice_index + 1, [], 0, Stats()
                started = time.perf_counter()
        # Always emit the last group, even empty: it carries the file's counts.
        if docs or slice_index == 0 or stats.totals:
            yield batch()
        self._progress(f.size - shown)


class ReadCorpus(beam.PTransform):
    """PCollection[InputFile] -> {DOCS: DocBatch, DEAD_LETTERS: BadRecord}."""

    def __init__(self, *, keys: tuple, join_keys: bool, group_bytes: int, max_record_bytes: int = 256 << 20,
                 progress_total: Optional[int] = None):
        """progress_total: input bytes, to draw a progress bar in this process (None: no bar)."""
        super().__init__()
        self._fn = _ReadFileFn(keys, join_keys, group_bytes, max_record_bytes, progress_total)

    def expand(self, files):
        return (
            files
            # Spread files over workers: Create emits them in one bundle.
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTERS, main=DOCS)
        )
