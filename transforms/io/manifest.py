"""The files written after every shard: dead letters, then data_params.json last.

data_params.json is the completion marker: it is written only once every
shard is committed, so its presence means the dataset is complete.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import apache_beam as beam

from transforms.core.records import BadRecord
from transforms.core.stats import (H5_ROWS, ROWS_DROPPED, Stats, check_accounting, h5_stats_section, input_section,
                                   merge, post_process_section)
from transforms.core.timing import TIME_PREFIX
from transforms.io import fs

STAGES = ("read", "normalize", "tokenize", "pack", "fim", "encode", "shuffle", "write")

__all__ = ["WriteDeadLetters", "WriteDatasetParams", "MergeStats", "PARAMS_FILE", "DEAD_LETTER_DIR",
           "dead_letter_file_name"]

PARAMS_FILE = "data_params.json"
DEAD_LETTER_DIR = "dead_letter"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_TAIL = 100  # characters of the sanitized source path kept in a dead-letter file name


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


def dead_letter_file_name(source: str) -> str:
    """The dead-letter file of one source: readable, safe on every file system, unique.

    The tail of the sanitized path keeps the name readable; a digest of the
    whole path keeps two sources whose sanitized names collide apart.
    """
    readable = _UNSAFE.sub("_", source).strip("._-")[-_NAME_TAIL:].lstrip("._-") or "source"
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}.{digest}.jsonl"


def _sort_key(record: BadRecord) -> tuple:
    return (record.member or "", -1 if record.line is None else record.line, record.reason, record.detail)


def _write_source_dead_letters(item: tuple, output_dir: str) -> int:
    """Write one source's bad records, sorted by (member, line), to their own file."""
    source, records = item
    records = sorted(records, key=_sort_key)
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    directory = fs.join(output_dir, DEAD_LETTER_DIR)
    fs.makedirs(directory)
    fs.write_text_atomic(fs.join(directory, dead_letter_file_name(source)), lines)
    return len(records)


class WriteDeadLetters(beam.PTransform):
    """PCollection[BadRecord] -> PCollection[int] (one element: records written).

    One JSONL file per source file under OUT/dead_letter/ (`dead_letter_file_name`),
    its records sorted by (member, line), so the output does not depend on the
    runner. Only one source's records are ever held together (a GroupByKey per
    source), each with its raw bytes already cut to a preview by the reader.
    """

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    def expand(self, records):
        return (records
                | "BySource" >> beam.Map(lambda r: (r.source, r))
                | "GroupBySource" >> beam.GroupByKey()
                | "WriteSourceDeadLetters" >> beam.Map(_write_source_dead_letters, self._output_dir)
                | "CountDeadLetters" >> beam.CombineGlobally(sum))


def build_params(shards: list, stats: Stats, sections: dict, *, eos_id: int, pad_id: int, vocab_size: int,
                 extra: dict) -> dict:
    written = Counter(stats.with_prefix(H5_ROWS))
    in_files = sum(s.num_sequences for s in shards)
    if written["num_sequences"] != in_files:
        raise RuntimeError(f"{in_files} rows in the committed files, but {written['num_sequences']} were encoded")
    params = {k: dict(v) for k, v in sections.items()}
    params["post-process"] = post_process_section(stats, written, eos_id=eos_id, pad_id=pad_id,
                                                  vocab_size=vocab_size)
    params["h5_dataset_stats"] = h5_stats_section(written)
    params["input"] = input_section(stats)
    rows_dropped = stats.with_prefix(ROWS_DROPPED)
    if rows_dropped:
        params["rows_dropped_by_reason"] = rows_dropped
    params["files"] = {s.name: s.num_sequences for s in sorted(shards, key=lambda s: s.index)}
    params.update(extra)
    run = dict(params.get("run", {}))
    if stats["groups_resumed"]:
        run["groups_resumed"] = stats["groups_resumed"]
    # Summed over workers, so on several workers they exceed the wall time.
    timers = Counter(stats.with_prefix(TIME_PREFIX))
    for shard in shards:
        timers.update({stage: int(seconds * 1000) for stage, seconds in shard.seconds.items()})
    run["stage_seconds"] = {k: round(timers[k] / 1000, 2) for k in STAGES if k in timers}
    params["run"] = run
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
