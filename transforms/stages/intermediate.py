"""Beam side of the spill store (transforms.io.spill): store packed groups, skip stored ones on resume, keep a
mixture's plan (transforms.io.intermediate) before any group it selects."""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.records import DocBatch, EncodedBlock
from transforms.core.splits import SplitPlan
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress
from transforms.io.intermediate import keep_plan
from transforms.io.spill import find_spilled, spill_group

__all__ = ["StoreGroups", "SkipStoredGroups", "STORED", "KeepMixturePlan"]

STORED = "stored"


class _StoreFn(beam.DoFn):
    def __init__(self, directory: str):
        self._directory = directory

    def process(self, block: EncodedBlock):
        started = time.perf_counter()
        ref = spill_group(self._directory, block.group, block.rows, block.stats)
        block.stats.totals[TIME_PREFIX + "shuffle"] += int((time.perf_counter() - started) * 1000)
        yield EncodedBlock(block.group, block.n_rows, stored=ref, stats=block.stats)


class StoreGroups(beam.PTransform):
    """PCollection[EncodedBlock] inline -> PCollection[EncodedBlock] referring to local files."""

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def expand(self, blocks):
        return blocks | "Store" >> beam.ParDo(_StoreFn(self._directory))


class KeepMixturePlan(beam.PTransform):
    """PCollection[MixturePlan] (one) -> the same plan, once it is in `path`: whatever is selected by the plan
    handed on is so after the plan was kept, so a resumed job finds the plan of every group it stored."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, plan):
        return plan | "Keep" >> beam.Map(keep_plan, self._path)


class _SkipFn(beam.DoFn):
    def __init__(self, directory: str, splits: Optional[SplitPlan], copies: Optional[tuple] = None):
        self._directory = directory
        self._splits = splits
        self._copies = copies  # a mixture's: per input file, (its groups' copy groups, the job's input files)
        self._skipped = beam.metrics.Metrics.counter("resume", "groups_skipped")

    def process(self, batch):
        # A split job stores a group as one share per output of its subset plus the rest: done when all are.
        # (A share already routed, as a deduplicating job's token batches are, is done when it is stored.)
        groups = [batch.group] if self._splits is None or batch.group.part is not None else \
            [dataclasses.replace(batch.group, part=k) for k in self._splits.parts_of(batch.group.relpath)]
        if self._copies is not None:  # every copy group of every share (transforms.core.mixture.select_batch)
            n, n_files = self._copies[batch.group.file_index], self._copies[-1]
            groups = [dataclasses.replace(g, copy=c, file_index=g.file_index + c * n_files)
                      for c in range(n) for g in groups]
        found = [find_spilled(self._directory, group) for group in groups]
        if any(f is None for f in found):
            yield batch
            return
        # Done by an earlier attempt (a token batch's reading and tokenizing were done again, and counted).
        progress.advance(getattr(batch, "progress_bytes", 0))
        self._skipped.inc()
        for i, (group, (ref, n_rows, stats)) in enumerate(zip(groups, found)):
            stats.totals["groups_resumed"] += int(i == len(groups) - 1)  # once per group, with the job's share
            # The stored statistics already include what reading this group counted.
            yield pvalue.TaggedOutput(STORED, EncodedBlock(group, n_rows, stored=ref, stats=stats))


class SkipStoredGroups(beam.PTransform):
    """PCollection[DocBatch] -> {main: DocBatch still to process, STORED: EncodedBlock of stored groups}; the same
    for TokenBatch or EncodedBatch (a deduplicating job skips after deduplication, which needs every record)."""

    def __init__(self, directory: str, splits: Optional[SplitPlan] = None, copies: Optional[tuple] = None):
        """splits: a split job's plan (its groups are stored by output); None: one dataset. copies: a mixture's
        copy groups per input file, then the number of input files (a group is done when all its copies are)."""
        super().__init__()
        self._directory = directory
        self._splits = splits
        self._copies = copies

    def expand(self, batches):
        return batches | "Skip" >> beam.ParDo(_SkipFn(self._directory, self._splits, self._copies)).with_outputs(
            STORED, main="todo")
