"""ReadCorpus: input files -> one DocBatch per packing group, plus dead letters.

A packing group is a whole file, or a fixed slice of a large file (the first
documents adding up to `group_bytes` of text, then the next, ...). The slice
boundaries depend only on the file's content, so the packing does too.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.records import BadRecord, DocBatch, Document, GroupId, InputFile
from transforms.core.stats import Stats
from transforms.io.readers import read_records

__all__ = ["ReadCorpus", "DOCS", "DEAD_LETTERS"]

DOCS = "docs"
DEAD_LETTERS = "dead_letters"


class _ReadFileFn(beam.DoFn):
    def __init__(self, keys: tuple, join_keys: bool, group_bytes: int):
        self._keys = keys
        self._join_keys = join_keys
        self._group_bytes = group_bytes
        self._docs = beam.metrics.Metrics.counter("read", "documents")
        self._bad = beam.metrics.Metrics.counter("read", "bad_records")
        self._bytes = beam.metrics.Metrics.counter("read", "text_bytes")

    def process(self, f: InputFile):
        slice_index, docs, size = 0, [], 0
        stats = Stats()
        for record in read_records(f.path, self._keys):
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
            if size >= self._group_bytes:
                yield DocBatch(GroupId(f.index, slice_index, f.path, f.relpath), docs, stats)
                slice_index, docs, size, stats = slice_index + 1, [], 0, Stats()
        # Always emit the last group, even empty: it carries the file's counts.
        if docs or slice_index == 0 or stats.totals:
            yield DocBatch(GroupId(f.index, slice_index, f.path, f.relpath), docs, stats)


class ReadCorpus(beam.PTransform):
    """PCollection[InputFile] -> {DOCS: DocBatch, DEAD_LETTERS: BadRecord}."""

    def __init__(self, *, keys: tuple, join_keys: bool, group_bytes: int):
        super().__init__()
        self._fn = _ReadFileFn(keys, join_keys, group_bytes)

    def expand(self, files):
        return (
            files
            # Spread files over workers: Create emits them in one bundle.
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTERS, main=DOCS)
        )
