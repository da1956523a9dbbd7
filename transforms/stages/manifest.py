"""The last steps of a job: statistics merged, and data_params.json written once every shard is committed.

What the file holds, and how it is written, is transforms/io/manifest.py's.
"""

from __future__ import annotations

from typing import Optional

import apache_beam as beam

from transforms.core.features import LM_FEATURES
from transforms.core.stats import Stats, merge
from transforms.io.manifest import finalize, finalize_split

__all__ = ["WriteDatasetParams", "WriteSplitParams", "MergeStats"]


def _as_list(pcoll):
    """A stage's singleton summary as a side input, or None for a stage the job does not run."""
    return beam.pvalue.AsList(pcoll) if pcoll is not None else None


def _steps(steps: Optional[dict]) -> dict:
    """The summaries of the stages that ran, as side inputs by name (transforms.io.manifest.STEP_SECTIONS)."""
    return {name: beam.pvalue.AsList(p) for name, p in (steps or {}).items() if p is not None}


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


class WriteDatasetParams(beam.PTransform):
    """PCollection[ShardResult] (+ stats, dead-letter count) -> the params dict, after writing it."""

    def __init__(self, *, output_dir: str, sections: dict, eos_id: int, pad_id: int, vocab_size: int,
                 stats, dead_letters, extra: dict, features: tuple = LM_FEATURES, mixture=None,
                 steps: Optional[dict] = None):
        """mixture: a PCollection of the mixture plan's summary (SelectMixture), or None; steps: the summary
        of each stage that removed records (name -> PCollection, None where it did not run)."""
        super().__init__()
        self._mixture = mixture
        self._steps = _steps(steps)
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
                finalize,
                beam.pvalue.AsSingleton(self._stats),
                beam.pvalue.AsSingleton(self._dead_letters),
                self._output_dir, self._sections, self._ids, self._extra, self._features,
                _as_list(self._mixture), **self._steps)
        )


class WriteSplitParams(beam.PTransform):
    """A split job's PCollection[ShardResult] (each naming its output) -> the summary dict, after writing every
    output's data_params.json and then OUT/data_params.json.

    `stats`: PCollection of (output part, Stats); `rest_stats`: a singleton Stats of what no output holds;
    `output_dirs`, `sections`, `extras`: one per output, in part order.
    """

    def __init__(self, *, output_dir: str, outputs: tuple, output_dirs: tuple, sections: tuple, extras: tuple,
                 eos_id: int, pad_id: int, vocab_size: int, features: tuple, stats, rest_stats, dead_letters,
                 summary_sections: dict, summary_extra: dict, mixture=None, steps: Optional[dict] = None):
        """mixture: a PCollection of the mixture plan's summary (SelectMixture), or None; steps: the summary
        of each stage that removed records (name -> PCollection, None where it did not run)."""
        super().__init__()
        self._mixture = mixture
        self._steps = _steps(steps)
        self._args = (output_dir, outputs, output_dirs, sections, extras,
                      {"eos_id": eos_id, "pad_id": pad_id, "vocab_size": vocab_size}, tuple(features),
                      summary_sections, summary_extra)
        self._stats = stats
        self._rest_stats = rest_stats
        self._dead_letters = dead_letters

    def expand(self, shards):
        return (
            shards
            | "AllShards" >> beam.combiners.ToList()
            | "WriteParams" >> beam.Map(
                finalize_split, beam.pvalue.AsList(self._stats), beam.pvalue.AsSingleton(self._rest_stats),
                beam.pvalue.AsSingleton(self._dead_letters), *self._args,
                _as_list(self._mixture), **self._steps)
        )
