"""Beam side of the spill store (transforms.io.spill): store packed groups, skip stored ones on resume."""

from __future__ import annotations

import time

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.records import DocBatch, EncodedBlock
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress
from transforms.io.spill import find_spilled, spill_group

__all__ = ["StoreGroups", "SkipStoredGroups", "STORED"]

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


class _SkipFn(beam.DoFn):
    def __init__(self, directory: str):
        self._directory = directory
        self._skipped = beam.metrics.Metrics.counter("resume", "groups_skipped")

    def process(self, batch: DocBatch):
        found = find_spilled(self._directory, batch.group)
        if found is None:
            yield batch
            return
        progress.advance(batch.progress_bytes)  # done by an earlier attempt
        ref, n_rows, stats = found
        self._skipped.inc()
        stats.totals["groups_resumed"] += 1
        # The stored statistics already include what reading this group counted.
        yield pvalue.TaggedOutput(STORED, EncodedBlock(batch.group, n_rows, stored=ref, stats=stats))


class SkipStoredGroups(beam.PTransform):
    """PCollection[DocBatch] -> {main: DocBatch still to process, STORED: EncodedBlock of stored groups}."""

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def expand(self, batches):
        return batches | "Skip" >> beam.ParDo(_SkipFn(self._directory)).with_outputs(STORED, main="todo")
