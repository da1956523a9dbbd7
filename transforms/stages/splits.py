"""RouteDocuments and SeparateRest: a split job's documents to their outputs, each read and normalized once.

    DocBatch ─RouteDocuments─► DocBatch per output of the group's subset (group.part = the output)
                          └──► REST: EncodedBlock of no rows (group.part = the job's), what no document carries

After the split, every stage takes its settings for the output at hand
(records.PerPart), so all outputs flow through one set of transforms.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.encoded import EncodedRows
from transforms.core.normalize import NormalizeConfig
from transforms.core.records import EncodedBlock
from transforms.core.splits import SplitPlan, route_batch
from transforms.core.timing import TIME_PREFIX
from transforms.io import progress

__all__ = ["RouteDocuments", "SeparateRest", "REST"]

REST = "rest"


def _route(batch, plan: SplitPlan, normalize: Optional[NormalizeConfig]):
    started = time.perf_counter()
    with progress.working("normalize", nbytes=batch.progress_bytes):
        parts, rest = route_batch(batch, plan, normalize)
    rest.totals[TIME_PREFIX + "normalize"] += int((time.perf_counter() - started) * 1000)
    yield from parts
    # As a block of no rows, so it is stored and found again on resume like any output's share.
    group = dataclasses.replace(batch.group, part=plan.rest_part)
    yield pvalue.TaggedOutput(REST, EncodedBlock(group, 0, rows=EncodedRows.concat([]), stats=rest))


class RouteDocuments(beam.PTransform):
    """PCollection[DocBatch] -> {main: DocBatch per (group, output), REST: EncodedBlock per group}.

    `normalize`: normalize the documents here, before their draw (None: the
    mode's own stage does it, as for Chat and DPO, whose draw sees the record).
    """

    def __init__(self, plan: SplitPlan, normalize: Optional[NormalizeConfig]):
        super().__init__()
        self._plan = plan
        self._normalize = normalize

    def expand(self, batches):
        return batches | "Route" >> beam.FlatMap(
            _route, self._plan, self._normalize).with_outputs(REST, main="parts")


class SeparateRest(beam.PTransform):
    """Stored group shares (on resume) -> {"outputs": shares of the outputs, "rest": the job's shares}."""

    def __init__(self, plan: SplitPlan):
        super().__init__()
        self._rest = plan.rest_part

    def expand(self, blocks):
        outputs, rest = blocks | "Partition" >> beam.Partition(lambda b, n, rest: int(b.group.part == rest), 2,
                                                              self._rest)
        return {"outputs": outputs, "rest": rest}
