"""IdentifyLanguage: each record's language found (fastText's lid.176, as datatrove asks it), counted per
language, and the records not in the languages asked for removed and listed (issue #47).

    DocBatch ─Filter (the model, loaded once per worker)─► the batch without the records removed
                                                       └─► REMOVED (node, language, score)
        ─CoGroupByKey file (its units' line counts)─► OUT/filtered/language/<file>.jsonl

A record's language is a function of its text alone, so the stage needs no grouping to decide; only its
listing groups, by file (transforms.stages.removal.FilterRecords). The pure logic is transforms/core/langid.py's.
"""

from __future__ import annotations

from transforms.core.decontam import record_texts
from transforms.core.langid import (COUNTER_PREFIX, LISTING_DIR, MODEL, STEP, LangIdConfig, decide,
                                    listing_fields, load_model, scores_of, texts_of)
from transforms.stages.removal import FilterRecords, RecordFilter

__all__ = ["IdentifyLanguage"]


class _Identify(RecordFilter):
    """Each record's language counted (in total only: per source, a file's counters would be as many as its
    languages); a record not in the languages asked for removed, counted dropped.language."""

    step = STEP

    def __init__(self, config: LangIdConfig, json_values: tuple):
        self._config = config
        self._json_values = json_values
        self._model = None

    def setup(self):
        self._model = load_model()

    def decide(self, doc, stats, source: str):
        cfg = self._config
        lang, score, keep = decide(scores_of(self._model, texts_of(record_texts(doc.values, self._json_values))),
                                   cfg)
        stats.add(f"{COUNTER_PREFIX}documents.{lang}")
        stats.add(f"{COUNTER_PREFIX}score_milli.{lang}", round(score * 1000))
        if score <= cfg.threshold:
            stats.add(f"{COUNTER_PREFIX}low.{lang}")
        if keep:
            return None
        stats.add(f"dropped.{STEP}", 1, source)
        stats.add(f"{COUNTER_PREFIX}removed", 1, source)
        return listing_fields(lang, score)


class IdentifyLanguage(FilterRecords):
    """PCollection[DocBatch] -> (the batches without the records removed; a singleton summary (the settings, the
    records listed) for data_params.json's `language`).

    `json_values`: per value of a record, whether the job reads it as JSON (its strings are the text);
    `dead_letters`: the reader's DeadLetterPart PCollection (the listing's lines)."""

    def __init__(self, config: LangIdConfig, json_values: tuple, output_dir: str, dead_letters):
        settings = {"model": MODEL, "languages": list(config.languages) if config.languages else None,
                    "threshold": config.threshold}
        super().__init__(_Identify(config, tuple(json_values)), output_dir, LISTING_DIR, dead_letters, settings)
