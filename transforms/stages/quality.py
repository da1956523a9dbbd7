"""FilterQuality: the records that fail a quality filter (Gopher's, ...) removed, each counted for the rule that
removed it and listed; the records a filter cuts lines out of (C4's) kept with what is left of their text, counted
and listed too (issue #47).

    DocBatch ─Filter (each record's words split once, every filter asked in turn)─► the batch without them, the
                                                                                    cut ones' texts replaced
                                                                                └─► REMOVED (node, filter, rule)
        ─CoGroupByKey file (its units' line counts)─► OUT/filtered/quality/<file>.jsonl

A record's verdict is a function of its text alone, so the stage needs no grouping to decide; only its listing
groups, by file (transforms.stages.removal.FilterRecords). The pure logic is transforms/core/quality.py's.
"""

from __future__ import annotations

import dataclasses

from transforms.core.decontam import record_texts
from transforms.core.quality import COUNTER_PREFIX, CUT_PREFIX, CUT_REASON, LISTING_DIR, STEP, judge, words_of
from transforms.stages.removal import Cut, FilterRecords, RecordFilter

__all__ = ["FilterQuality"]


class _Filter(RecordFilter):
    """A record a filter removes, counted dropped.<its rule> and <filter>.<rule>; a record a filter cuts, counted
    with its lines per rule and its characters removed."""

    step = STEP

    def __init__(self, filters: tuple, json_values: tuple):
        self._filters = filters
        self._json_values = json_values

    def setup(self):
        words_of("")  # (spaCy loaded once per worker, before the first batch's clock starts)

    def decide(self, doc, stats, source: str):
        text = "\n".join(record_texts(doc.values, self._json_values))
        found = judge(self._filters, text)
        if found.removed is not None:
            name, rule = found.removed
            stats.add(f"dropped.{rule}", 1, source)
            stats.add(f"{COUNTER_PREFIX}{name}.{rule}", 1, source)
            return {"step": STEP, "reason": rule, "filter": name}
        if found.text is None:
            return None
        # (Only a record of one text value is cut: the settings refuse a filter that cuts for any other.)
        lines: dict = {}
        for name, cut in found.cuts:
            stats.add(f"{CUT_PREFIX}{name}.documents")
            stats.add(f"{CUT_PREFIX}{name}.characters", len(text) - len(found.text))
            for rule, n in cut.items():
                stats.add(f"{CUT_PREFIX}{name}.lines.{rule}", n)
                lines[rule] = lines.get(rule, 0) + n
        stats.add(f"{CUT_PREFIX}documents")
        return Cut(dataclasses.replace(doc, values=(found.text,)), {
            "step": STEP, "reason": CUT_REASON, "filter": ",".join(name for name, _ in found.cuts),
            "lines": lines, "characters_removed": len(text) - len(found.text)})


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
