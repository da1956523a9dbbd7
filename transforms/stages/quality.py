"""FilterQuality: the records that fail a quality filter (Gopher's, ...) removed, each counted for the rule that
removed it and listed (issue #47).

    DocBatch ─Filter (each record's words split once, every filter asked in turn)─► the batch without them
                                                                                └─► REMOVED (node, filter, rule)
        ─CoGroupByKey file (its units' line counts)─► OUT/filtered/quality/<file>.jsonl

A record's verdict is a function of its text alone, so the stage needs no grouping to decide; only its listing
groups, by file. The pure logic is transforms/core/quality.py's.
"""

from __future__ import annotations

import dataclasses
import time

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.decontam import record_texts
from transforms.core.dedup import node_of
from transforms.core.quality import COUNTER_PREFIX, LISTING_DIR, STEP, verdict, words_of
from transforms.core.records import DocBatch
from transforms.core.timing import TIME_PREFIX
from transforms.stages.removal import ListRecords

__all__ = ["FilterQuality"]

REMOVED = "removed"


class _Filter(beam.DoFn):
    """A DocBatch -> the batch without the records a filter removes (each counted for its filter's rule), and
    REMOVED (node, listing fields) for each of those."""

    def __init__(self, filters: tuple, json_values: tuple):
        self._filters = filters
        self._json_values = json_values

    def setup(self):
        words_of("")  # (spaCy loaded once per worker, before the first batch's clock starts)

    def process(self, batch):
        start = time.perf_counter()
        stats, source = batch.stats, batch.group.source
        kept, removed = [], []
        for doc in batch.docs:
            found = verdict(self._filters, "\n".join(record_texts(doc.values, self._json_values)))
            if found is None:
                kept.append(doc)
                continue
            name, rule = found
            stats.add(f"dropped.{rule}", 1, source)
            stats.add(f"{COUNTER_PREFIX}{name}.{rule}", 1, source)
            removed.append((node_of(batch.group, doc.member or "", doc.index),
                            {"step": STEP, "reason": rule, "filter": name}))
        stats.totals[TIME_PREFIX + STEP] += int((time.perf_counter() - start) * 1000)
        yield dataclasses.replace(batch, docs=kept) if removed else batch
        for pair in removed:
            yield pvalue.TaggedOutput(REMOVED, pair)


class FilterQuality(beam.PTransform):
    """PCollection[DocBatch] -> (the batches without the records removed; a singleton summary (the filters'
    settings, the records listed) for data_params.json's `quality`).

    `filters`: the filters (transforms.core.quality.filter_config), asked in this order; `json_values`: per value
    of a record, whether the job reads it as JSON (its strings are the text); `dead_letters`: the reader's
    DeadLetterPart PCollection (the listing's lines)."""

    def __init__(self, filters: tuple, json_values: tuple, output_dir: str, dead_letters):
        super().__init__()
        self._filters = tuple(filters)
        self._json_values = tuple(json_values)
        self._output_dir = output_dir
        self._dead_letters = dead_letters

    def expand(self, docs):
        found = docs | "Filter" >> beam.ParDo(_Filter(self._filters, self._json_values)).with_output_types(
            DocBatch).with_outputs(REMOVED, main="docs")
        listed = found[REMOVED] | "List" >> ListRecords(self._output_dir, LISTING_DIR, self._dead_letters)
        settings = {f.name: dataclasses.asdict(f) for f in self._filters}
        return found.docs, listed | "Summary" >> beam.Map(lambda n: {"settings": settings, "listed": n})
