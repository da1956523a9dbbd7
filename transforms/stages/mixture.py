"""SelectMixture: a mixture's documents taken by token budget, each as many times as the plan says.

    TokenBatch ─Hash─► MixtureBatch ─┬─► Histogram (sum) ─► coarse plan ─┐
                                     ├─► boundary bucket docs (list) ◄───┤ (side input)
                                     │                 └─► exact plan ◄──┘
                                     └─► Select (side input: the plan) ─► TokenBatch per group and copy

The plan needs every document's hash and tokens before any is selected, so
the tokenized groups wait for it: on disk beside the stored groups when the
job has a storage directory (only the hashes, counts and a reference cross
the barrier), else in the runner. Each is tokenized once.
transforms.core.mixture holds the logic.
"""

from __future__ import annotations

from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.core.mixture import (Histogram, MixturePlan, MixtureSpec, batch_hashes, bucket_of, coarse_plan,
                                     refine_plan, select_batch)
from transforms.core.records import EncodedBatch, MixtureBatch, TokenBatch
from transforms.io.spill import load_tokens, spill_tokens
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder
from transforms.stages.intermediate import KeepMixturePlan

__all__ = ["SelectMixture"]


def _hash(batch: TokenBatch | EncodedBatch, source_of_file: tuple, seed: int,
          directory: Optional[str]) -> MixtureBatch:
    hashes, counts = batch_hashes(batch.tokens, seed, batch.token_counts())
    source = source_of_file[batch.group.file_index]
    if directory is None:
        return MixtureBatch(batch, source, hashes, counts)
    # The tokens wait for the plan on disk; what crosses the barrier is the hashes, counts and a reference.
    ref = spill_tokens(directory, batch)
    return MixtureBatch(TokenBatch(batch.group, [], batch.stats), source, hashes, counts, stored=ref)


class _HistogramFn(beam.CombineFn):
    """Per source, documents and tokens by hash bucket, summed over the batches in any order."""

    def __init__(self, n_sources: int):
        self._n = n_sources

    def create_accumulator(self):
        return Histogram.empty(self._n)

    def add_input(self, acc, m: MixtureBatch):
        return acc.add_documents(m.source, m.hashes, m.counts)

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs)
        for acc in accs:
            out.add(acc)
        return out

    def extract_output(self, acc):
        return acc


def _boundary(m: MixtureBatch, coarse):
    bucket = coarse.sources[m.source].bucket
    if bucket < 0:
        return
    for i in np.flatnonzero(bucket_of(m.hashes) == bucket).tolist():
        yield m.source, int(m.hashes[i]), int(m.counts[i])


def _select(m: MixtureBatch, plan, n_files: int):
    batch = m.batch if m.stored is None else load_tokens(m.stored, m.batch.group, m.batch.stats)
    yield from select_batch(batch, plan, m.source, n_files, m.hashes, m.counts)


class SelectMixture(beam.PTransform):
    """PCollection[TokenBatch] -> (PCollection[TokenBatch] of the mixture, PCollection of its plan's summary);
    or EncodedBatch in, EncodedBatch out (the chat modes, whose tokens the template decides).

    `source_of_file[i]`: the mixture source of input file i; `n_files`: the job's input files (a copy's
    group takes a file index past them).
    """

    def __init__(self, spec: MixtureSpec, source_of_file: tuple, n_files: int, *, keep_plan: Optional[str] = None,
                 plan: Optional[MixturePlan] = None, storage_dir: Optional[str] = None, encoded: bool = False):
        """keep_plan: where the plan is written before any document is selected by it (a resumable job);
        plan: the plan an interrupted run kept, used instead of counting again (its stored groups are not read);
        storage_dir: where the tokenized groups wait for the plan (None: in the runner, in memory locally);
        encoded: the batches are EncodedBatch (chat records), not TokenBatch.
        """
        super().__init__()
        self._storage_dir = storage_dir
        self._spec = spec
        self._source_of_file = tuple(source_of_file)
        self._n_files = n_files
        self._keep_plan = keep_plan
        self._plan = plan
        self._type = EncodedBatch if encoded else TokenBatch

    def expand(self, batches):
        spec = self._spec
        hashed = batches | "Hash" >> beam.Map(_hash, self._source_of_file, spec.seed,
                                              self._storage_dir).with_output_types(MixtureBatch)
        if self._plan is not None:
            plan = batches.pipeline | "KeptPlan" >> beam.Create([self._plan])
        else:
            hist = hashed | "Histogram" >> beam.CombineGlobally(_HistogramFn(len(spec.sources)))
            coarse = hist | "CoarsePlan" >> beam.Map(coarse_plan_for, spec)
            boundary = (hashed
                        | "BoundaryDocuments" >> beam.FlatMap(_boundary, beam.pvalue.AsSingleton(coarse))
                        | "AllBoundary" >> beam.combiners.ToList())
            plan = coarse | "RefinePlan" >> beam.Map(refine_plan, beam.pvalue.AsSingleton(boundary))
            if self._keep_plan:
                plan = plan | "KeepPlan" >> KeepMixturePlan(self._keep_plan)
        selected = hashed | "Select" >> beam.FlatMap(
            _select, beam.pvalue.AsSingleton(plan), self._n_files).with_output_types(self._type)
        return selected, plan | "Summary" >> beam.Map(lambda p: p.summary())


def coarse_plan_for(hist: Histogram, spec: MixtureSpec):
    """coarse_plan, its refusal (a source that cannot give its share) said as what to change."""
    try:
        return coarse_plan(spec, hist)
    except ValueError as e:
        raise MixtureError(str(e)) from None


class MixtureError(RuntimeError):
    """The mixture asks more of a source than it has (found only once every document is counted)."""
