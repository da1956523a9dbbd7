"""IdentifyLanguage: each record's language found (fastText's lid.176, as datatrove asks it), counted per
language, and the records not in the languages asked for removed and listed (issue #47).

    DocBatch ─Identify (the model, loaded once per worker)─► the batch without the records removed
                                                         └─► REMOVED (node, language, score)
        ─CoGroupByKey file (its units' line counts)─► OUT/filtered/language/<file>.jsonl

A record's language is a function of its text alone, so the stage needs no grouping to decide; only its
listing groups, by file. The pure logic is transforms/core/langid.py's.
"""

from __future__ import annotations

import dataclasses
import time
import apache_beam as beam
from apache_beam import pvalue

from transforms.core.decontam import record_texts
from transforms.core.dedup import node_of
from transforms.core.langid import (COUNTER_PREFIX, LISTING_DIR, MODEL, STEP, LangIdConfig, decide,
                                    listing_fields, load_model, scores_of, texts_of)
from transforms.core.records import DocBatch
from transforms.core.timing import TIME_PREFIX
from transforms.stages.removal import ListRecords

__all__ = ["IdentifyLanguage"]

REMOVED = "removed"


class _Identify(beam.DoFn):
    """A DocBatch -> the batch without the records whose language is not asked for (each counted), and REMOVED
    (node, listing fields) for each of those."""

    def __init__(self, config: LangIdConfig, json_values: tuple):
        self._config = config
        self._json_values = json_values
        self._model = None

    def setup(self):
        self._model = load_model()

    def process(self, batch):
        start = time.perf_counter()
        cfg, stats, source = self._config, batch.stats, batch.group.source
        kept, removed = [], []
        for doc in batch.docs:
            lang, score, keep = decide(scores_of(self._model, texts_of(record_texts(doc.values, self._json_values))),
                                       cfg)
            # Per language in total only: per source, a file's counters would be as many as its languages.
            stats.add(f"{COUNTER_PREFIX}documents.{lang}")
            stats.add(f"{COUNTER_PREFIX}score_milli.{lang}", round(score * 1000))
            if score <= cfg.threshold:
                stats.add(f"{COUNTER_PREFIX}low.{lang}")
            if keep:
                kept.append(doc)
            else:
                removed.append((node_of(batch.group, doc.member or "", doc.index), listing_fields(lang, score)))
        if removed:
            stats.add(f"dropped.{STEP}", len(removed), source)
            stats.add(f"{COUNTER_PREFIX}removed", len(removed), source)
        stats.totals[TIME_PREFIX + "language"] += int((time.perf_counter() - start) * 1000)
        yield dataclasses.replace(batch, docs=kept) if removed else batch
        for pair in removed:
            yield pvalue.TaggedOutput(REMOVED, pair)


class IdentifyLanguage(beam.PTransform):
    """PCollection[DocBatch] -> (the batches without the records removed; a singleton summary (the settings, the
    records listed) for data_params.json's `language`).

    `json_values`: per value of a record, whether the job reads it as JSON (its strings are the text);
    `dead_letters`: the reader's DeadLetterPart PCollection (the listing's lines)."""

    def __init__(self, config: LangIdConfig, json_values: tuple, output_dir: str, dead_letters):
        super().__init__()
        self._config = config
        self._json_values = tuple(json_values)
        self._output_dir = output_dir
        self._dead_letters = dead_letters

    def expand(self, docs):
        found = docs | "Identify" >> beam.ParDo(_Identify(self._config, self._json_values)).with_output_types(
            DocBatch).with_outputs(REMOVED, main="docs")
        listed = found[REMOVED] | "List" >> ListRecords(self._output_dir, LISTING_DIR, self._dead_letters)
        cfg = self._config
        settings = {"model": MODEL, "languages": list(cfg.languages) if cfg.languages else None,
                    "threshold": cfg.threshold}
        return found.docs, listed | "Summary" >> beam.Map(lambda n: {"settings": settings, "listed": n})
