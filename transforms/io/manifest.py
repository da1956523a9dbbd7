"""The files written after every shard: dead letters, then data_params.json last.

data_params.json is the completion marker: it is written only once every
shard is committed, so its presence means the dataset is complete.
"""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam

from transforms.core.records import BadRecord
from transforms.core.stats import (Stats, check_accounting, h5_stats_section, input_section, merge,
                                   post_process_section)
from transforms.io import fs

__all__ = ["WriteDeadLetters", "WriteDatasetParams", "MergeStats", "PARAMS_FILE", "DEAD_LETTER_DIR"]

PARAMS_FILE = "data_params.json"
DEAD_LETTER_DIR = "dead_letter"
DEAD_LETTER_FILE = "bad_records.jsonl"


class MergeStats(beam.CombineFn):
    """Stats values summed into one; associative and commutative."""

    def create_accumulator(self):
        return Stats()

    def add_input(self, acc, stats):
        return acc.merge_from(stats)

    def merge_accumulators(self, accs):
        return merge(accs)

    def extract_output(self, acc):
        return acc


def _write_dead_letters(records: list, output_dir: str) -> int:
    if not records:
        return 0
    records = sorted(records, key=lambda r: (r.source, r.member or "", r.line if r.line is not None else -1))
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    fs.makedirs(fs.join(output_dir, DEAD_LETTER_DIR))
    fs.write_text_atomic(fs.join(output_dir, DEAD_LETTER_DIR, DEAD_LETTER_FILE), lines)
    return len(records)


class WriteDeadLetters(beam.PTransform):
    """PCollection[BadRecord] -> PCollection[int] (one element: records written)."""

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    def expand(self, records):
        return (records
                | "AllBadRecords" >> beam.combiners.ToList()
                | "WriteDeadLetters" >> beam.Map(_write_dead_letters, self._output_dir))


def build_params(shards: list, stats: Stats, sections: dict, *, eos_id: int, pad_id: int, vocab_size: int,
                 extra: dict) -> dict:
    written = Counter()
    for shard in shards:
        written.update(shard.counters)
    params = {k: dict(v) for k, v in sections.items()}
    params["post-process"] = post_process_section(stats, written, eos_id=eos_id, pad_id=pad_id,
                                                  vocab_size=vocab_size)
    params["h5_dataset_stats"] = h5_stats_section(written)
    params["input"] = input_section(stats)
    params["files"] = {s.name: s.counters["num_sequences"] for s in sorted(shards, key=lambda s: s.index)}
    params.update(extra)
    if stats["groups_resumed"]:
        params["run"] = {**params.get("run", {}), "groups_resumed": stats["groups_resumed"]}
    problems = check_accounting(params["input"])
    if problems:
        raise RuntimeError("document accounting does not add up: " + "; ".join(problems))
    return params


def _finalize(shards: list, stats: Stats, dead_letters: int, output_dir: str, sections: dict, ids: dict,
              extra: dict) -> dict:
    params = build_params(shards, stats, sections, extra=extra, **ids)
    fs.write_text_atomic(fs.join(output_dir, PARAMS_FILE), json.dumps(params, indent=4, sort_keys=True) + "\n")
    fs.remove_tree(fs.join(output_dir, fs.TMP_DIR))
    return params


class WriteDatasetParams(beam.PTransform):
    """PCollection[ShardResult] (+ stats, dead-letter count) -> the params dict, after writing it."""

    def __init__(self, *, output_dir: str, sections: dict, eos_id: int, pad_id: int, vocab_size: int,
                 stats, dead_letters, extra: dict):
        super().__init__()
        self._output_dir = output_dir
        self._sections = sections
        self._ids = {"eos_id": eos_id, "pad_id": pad_id, "vocab_size": vocab_size}
        self._stats = stats
        self._dead_letters = dead_letters
        self._extra = extra

    def expand(self, shards):
        return (
            shards
            | "AllShards" >> beam.combiners.ToList()
            | "WriteParams" >> beam.Map(
                _finalize,
                beam.pvalue.AsSingleton(self._stats),
                beam.pvalue.AsSingleton(self._dead_letters),
                self._output_dir, self._sections, self._ids, self._extra)
        )
