"""FilterQuality: the records that fail a quality filter (Gopher's, ...) removed, each counted for the rule that
removed it and listed (issue #47).

    DocBatch ─Filter (each record's words split once, every filter asked in turn)─► the batch without them
                                                                                └─► REMOVED (node, filter, rule)
        ─CoGroupByKey file (its units' line counts)─► OUT/filtered/quality/<file>.jsonl

A record's verdict is a function of its text alone, so the stage needs no grouping to decide; only its listing
groups, by file (transforms.stages.removal.FilterRecords). The pure logic is transforms/core/quality.py's.
"""

from __future__ import annotations

import dataclasses

from transforms.core.decontam import record_texts
from transforms.core.quality import COUNTER_PREFIX, LISTING_DIR, STEP, verdict, words_of
from transforms.stages.removal import FilterRecords, RecordFilter

__all__ = ["FilterQuality"]


class _Filter(RecordFilter):
    """A record a filter removes, counted dropped.<its rule> and <filter>.<rule>."""

    step = STEP

    def __init__(self, filters: tuple, json_values: tuple):
        self._filters = filters
        self._json_values = json_values

    def setup(self):
        words_of("")  # (spaCy loaded once per worker, before the first batch's clock starts)

    def decide(self, doc, stats, source: str):
        found = verdict(self._filters, "\n".join(record_texts(doc.values, self._json_values)))
        if found is None:
            return None
        name, rule = found
        stats.add(f"dropped.{rule}", 1, source)
        stats.add(f"{COUNTER_PREFIX}{name}.{rule}", 1, source)
        return {"step": STEP, "reason": rule, "filter": name}


class FilterQuality(FilterRecords):
    """PCollection[DocBatch] -> (the batches without the records removed; a singleton summary (the filters'
    settings, the records listed) for data_params.json's `quality`).

    `filters`: the filters (transforms.core.quality.filter_config), asked in this order; `json_values`: per value
    of a record, whether the job reads it as JSON (its strings are the text); `dead_letters`: the reader's
    DeadLetterPart PCollection (the listing's lines)."""

    def __init__(self, filters: tuple, json_values: tuple, output_dir: str, dead_letters):
        filters = tuple(filters)
        super().__init__(_Filter(filters, tuple(json_values)), output_dir, LISTING_DIR, dead_letters,
                         {f.name: dataclasses.asdict(f) for f in filters})
