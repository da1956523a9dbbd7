"""The file written after every shard and dead letter: data_params.json, last.

data_params.json is the completion marker: it is written only once every
shard is committed, so its presence means the dataset is complete.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Optional

import apache_beam as beam

from transforms.core.features import LM_FEATURES, VSL_FEATURES
from transforms.core.stats import (H5_ROWS, ROLE_TOKENS, ROLE_TRAINED, ROWS_DROPPED, Stats, check_accounting,
                                   h5_stats_section, input_section, merge, post_process_section)
from transforms.core.timing import TIME_PREFIX
from transforms.io import fs

STAGES = ("read", "normalize", "tokenize", "pack", "fim", "encode", "shuffle", "write")

__all__ = ["WriteDatasetParams", "MergeStats", "PARAMS_FILE"]

PARAMS_FILE = "data_params.json"


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


def build_params(shards: list, stats: Stats, sections: dict, *, eos_id: int, pad_id: int, vocab_size: int,
                 extra: dict, dead_letters: Optional[int] = None, features: tuple = LM_FEATURES) -> dict:
    """data_params.json's content; raises if the files, the dead letters and the counts disagree.

    `dead_letters`: records written to OUT/dead_letter (None: not checked).
    `features`: the names of a row's features, in order (Cerebras 2.10's loaders read them from here).
    """
    written = Counter(stats.with_prefix(H5_ROWS))
    in_files = sum(s.num_sequences for s in shards)
    if written["num_sequences"] != in_files:
        raise RuntimeError(f"{in_files} rows in the committed files, but {written['num_sequences']} were encoded")
    params = {k: dict(v) for k, v in sections.items()}
    params["features"] = list(features)
    params["post-process"] = post_process_section(stats, written, eos_id=eos_id, pad_id=pad_id,
                                                  vocab_size=vocab_size, vsl=tuple(features) == VSL_FEATURES)
    params["h5_dataset_stats"] = h5_stats_section(written)
    params["input"] = input_section(stats)
    rows_dropped = stats.with_prefix(ROWS_DROPPED)
    if rows_dropped:
        params["rows_dropped_by_reason"] = rows_dropped
    tokens_by_role = stats.with_prefix(ROLE_TOKENS)
    if tokens_by_role:  # Chat modes: where the tokens and the loss are, by role (counted as encoded)
        params["chat"] = {"tokens_by_role": tokens_by_role,
                          "loss_valid_tokens_by_role": stats.with_prefix(ROLE_TRAINED)}
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
    if dead_letters is not None and dead_letters != params["input"]["bad"]:
        problems.append(f"{dead_letters} dead letters written, {params['input']['bad']} bad records counted")
    if problems:
        raise RuntimeError("document accounting does not add up: " + "; ".join(problems))
    return params


def _finalize(shards: list, stats: Stats, dead_letters: int, output_dir: str, sections: dict, ids: dict,
              extra: dict, features: tuple) -> dict:
    params = build_params(shards, stats, sections, extra=extra, dead_letters=dead_letters, features=features, **ids)
    fs.write_text_atomic(fs.join(output_dir, PARAMS_FILE), json.dumps(params, indent=4, sort_keys=True) + "\n")
    fs.remove_tree(fs.join(output_dir, fs.TMP_DIR))
    return params


class WriteDatasetParams(beam.PTransform):
    """PCollection[ShardResult] (+ stats, dead-letter count) -> the params dict, after writing it."""

    def __init__(self, *, output_dir: str, sections: dict, eos_id: int, pad_id: int, vocab_size: int,
                 stats, dead_letters, extra: dict, features: tuple = LM_FEATURES):
        super().__init__()
        self._features = tuple(features)
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
                self._output_dir, self._sections, self._ids, self._extra, self._features)
        )
