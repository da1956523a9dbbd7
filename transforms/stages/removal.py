"""What every stage that removes records shares (deduplication, decontamination): the batches joined with the
records to remove, each removed record counted dropped for its reason; the input's line numbering for their
listings; the listing written.

    batches ─KeyBatches (spilled to disk when there is a storage directory)─┐
    removals (batch key, (member, index, kind)) ────────────────────────────┴─CoGroupByKey─► the batches without
        them, each counted dropped.<reason>, <prefix>documents.<kind>, <prefix>tokens.<kind>

A batch crosses the join as a reference to its spilled tokens, not as its tokens: on a local runner a
GroupByKey holds everything it moves in memory.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Mapping, Optional

import apache_beam as beam
import numpy as np
from apache_beam import pvalue

from transforms.core.dedup import batch_key_of, line_numbering, node_of
from transforms.io.listing import write_listing
from transforms.core.records import DocBatch, Origins
from transforms.core.timing import TIME_PREFIX
from transforms.io.spill import load_docs, load_tokens, spill_docs, spill_tokens
from transforms.stages import coders  # noqa: F401  (registers the batches' coder)

__all__ = ["RemoveRecords", "APPLIED", "unit_lines", "WriteListing", "ListRecords", "RecordFilter", "Cut",
           "FilterRecords", "REMOVED"]

APPLIED = "applied"


def batch_key(batch):
    """The key its records' removals are sent to (batch_key_of a node of the batch's group)."""
    return batch_key_of(node_of(batch.group, "", 0))


@dataclasses.dataclass
class _Waiting:
    """A batch waiting for its removals on disk (spill_tokens): its group, statistics, origins and where its
    tokens are. What crosses the join is this, not the tokens, so a local runner does not hold the corpus."""

    group: object
    stats: object
    origins: object
    ref: object


@dataclasses.dataclass
class _WaitingDocs:
    """A DocBatch waiting on disk (spill_docs): its group, statistics, progress share and where its documents
    are."""

    group: object
    stats: object
    progress_bytes: int
    ref: object


def _keyed(batch, directory: Optional[str]):
    if directory is None:
        return batch_key(batch), batch
    if isinstance(batch, DocBatch):
        return batch_key(batch), _WaitingDocs(batch.group, batch.stats, batch.progress_bytes,
                                              spill_docs(directory, batch))
    return batch_key(batch), _Waiting(batch.group, batch.stats, batch.origins, spill_tokens(directory, batch))


def _unspilled(batch):
    if isinstance(batch, _WaitingDocs):
        return DocBatch(batch.group, load_docs(batch.ref), batch.stats, batch.progress_bytes)
    if not isinstance(batch, _Waiting):
        return batch
    loaded = load_tokens(batch.ref, batch.group, batch.stats)
    loaded.origins = batch.origins
    return loaded


def _parts(batch) -> tuple:
    """(its records' origins, what is counted of each record removed: (name, int64 per record), the batch of
    the records at some indices): a DocBatch's characters, before tokenizing; else its tokens."""
    if isinstance(batch, DocBatch):
        docs = batch.docs
        sizes = np.fromiter((sum(map(len, d.values)) for d in docs), dtype=np.int64, count=len(docs))
        return (Origins.of(docs), ("characters", sizes),
                lambda keep: dataclasses.replace(batch, docs=[docs[i] for i in keep.tolist()]))
    return batch.origins, ("tokens", batch.token_counts()), lambda keep: batch.take(keep, batch.group, batch.stats)


def _apply(item, reasons: Mapping[str, str], prefix: str, step: str, strict: bool, rewrite=None):
    """A batch without its removed records; each counted dropped for its kind's reason, with its tokens (a
    DocBatch's: its characters).

    `strict`: every record to remove is in the batch (deduplication, which runs on the batches themselves); else
    one that is not was dropped before for another reason (a conversation its template refused) and stays counted
    there. The records removed here are also APPLIED (their removals, as given): what the listing lists.

    `rewrite` (a DocBatch's only): (document, its removal) -> what is kept of the document, None to remove it. A
    record kept is counted <prefix>documents.cut and <prefix>characters.cut (the characters it lost), and APPLIED
    as (its removal, those characters); a record removed, as (its removal, None)."""
    key, joined = item
    batches = list(joined["batch"])
    removed = {(member, index): removal for member, index, removal in joined["removed"]}
    if len(batches) != 1:
        if batches or (removed and strict):
            raise RuntimeError(f"{step}: {len(batches)} batches of group {key}")
        return
    batch = _unspilled(batches[0])
    if not removed:
        yield batch
        return
    origins, (measure, sizes), take = _parts(batch)
    found = [removed.get((origins.member(i), int(origins.index[i]))) for i in range(len(sizes))]
    kinds = [r[1] if r is not None else None for r in found]
    if strict and len(removed) != sum(k is not None for k in kinds):
        raise RuntimeError(f"{step}: records of group {key} to remove were not found in it")
    stats, source = batch.stats, batch.group.source
    applied = [r for r in found if r is not None]
    if rewrite is not None:
        docs, applied = list(batch.docs), []
        for i, removal in enumerate(found):
            if removal is None:
                continue
            kept = rewrite(docs[i], removal)
            lost = None if kept is None else int(sizes[i]) - sum(map(len, kept.values))
            if kept is not None:
                docs[i], kinds[i] = kept, None
                stats.add(f"{prefix}documents.cut", 1, source)
                stats.add(f"{prefix}characters.cut", lost, source)
            applied.append((removal, lost))
        take = (lambda keep: dataclasses.replace(batch, docs=[docs[i] for i in keep.tolist()]))
    for kind, reason in reasons.items():
        mask = np.array([k == kind for k in kinds], dtype=bool)
        if mask.any():
            stats.add(f"dropped.{reason}", int(mask.sum()), source)
            stats.add(f"{prefix}documents.{kind}", int(mask.sum()), source)
            stats.add(f"{prefix}{measure}.{kind}", int(sizes[mask].sum()), source)
    keep = np.array([i for i, k in enumerate(kinds) if k is None], dtype=np.int64)
    for removal in applied:
        yield pvalue.TaggedOutput(APPLIED, removal)
    yield take(keep)


class RemoveRecords(beam.PTransform):
    """PCollection[DocBatch | TokenBatch | EncodedBatch] -> {batches: the batches without the records `removals`
    names,
    APPLIED: the removal of each record removed}.

    `removals`: PCollection of tuples (node, kind, ...), kind a key of `reasons` (kind -> the drop reason counted);
    `prefix`: of the stage's counters; `storage_dir`: where the batches wait (None: in the runner); `rewrite`:
    for DocBatches, what is kept of a record instead of removing it (_apply)."""

    def __init__(self, removals, reasons: Mapping[str, str], prefix: str, step: str, *, strict: bool = True,
                 storage_dir: Optional[str] = None, rewrite=None):
        super().__init__()
        self._rewrite = rewrite
        self._removals = removals
        self._reasons = dict(reasons)
        self._prefix = prefix
        self._step = step
        self._strict = strict
        self._storage_dir = storage_dir

    def expand(self, batches):
        return ({"batch": batches | "KeyBatches" >> beam.Map(_keyed, self._storage_dir),
                 "removed": self._removals | "ByBatch" >> beam.Map(
                     lambda r: (batch_key_of(r[0]), (r[0][3], r[0][4], r)))}
                | "JoinBatches" >> beam.CoGroupByKey()
                | "Remove" >> beam.FlatMap(_apply, self._reasons, self._prefix, self._step, self._strict,
                                           self._rewrite)
                .with_outputs(APPLIED, main="batches"))


def unit_lines(dead_letters, label: str = "UnitLines"):
    """The reader's dead-letter parts -> (relpath, (first group, end group, lines)) of each unit of a file read as
    several: what numbers a record's line in its file as the dead letters number it (line_numbering)."""
    return dead_letters | label >> beam.FlatMap(
        lambda p: [(p.relpath, (p.first_group, p.end_group, p.lines))] if p.lines is not None else [])


class WriteListing(beam.PTransform):
    """PCollection of (relpath, (node, listing record)) -> OUT/<directory>/<file>.jsonl, each file's records in
    file order; a singleton of the records written."""

    def __init__(self, output_dir: str, directory: str):
        super().__init__()
        self._output_dir = output_dir
        self._directory = directory

    def expand(self, records):
        return (records
                | "GroupByFile" >> beam.GroupByKey()
                | "WriteListing" >> beam.Map(write_listing, self._output_dir, self._directory)
                | "CountListed" >> beam.CombineGlobally(sum))


def _numbered(item):
    """The records removed from one file, each its listing line: file, line (as the dead letters number it),
    member, then its stage's fields."""
    relpath, joined = item
    line = line_numbering(relpath, list(joined["units"]))
    for node, fields in joined["records"]:
        record = {"file": node[1], "line": line(node[2], node[4])}
        if node[3]:
            record["member"] = node[3]
        yield relpath, (node, {**record, **fields})


class ListRecords(beam.PTransform):
    """PCollection of (node, fields) -> OUT/<directory>/<file>.jsonl, each removed record's line (its file, line
    and member, then `fields`: the stage's step, reason and what decided); a singleton of the records written.
    `dead_letters`: the reader's DeadLetterPart PCollection (unit_lines)."""

    def __init__(self, output_dir: str, directory: str, dead_letters):
        super().__init__()
        self._output_dir = output_dir
        self._directory = directory
        self._dead_letters = dead_letters

    def expand(self, records):
        return ({"units": unit_lines(self._dead_letters), "records": records | "ByFile" >> beam.Map(
            lambda r: (r[0][1], r))}
                | "JoinLines" >> beam.CoGroupByKey()
                | "Lines" >> beam.FlatMap(_numbered)
                | "Write" >> WriteListing(self._output_dir, self._directory))


REMOVED = "removed"


@dataclasses.dataclass(frozen=True)
class Cut:
    """A record kept with less of its text (`doc`, what is left), listed with `fields` all the same."""

    doc: object
    fields: dict


class RecordFilter(beam.DoFn):
    """A step that keeps, cuts or removes each record of a DocBatch by the record alone (language identification,
    the quality filters): `decide` says, counting what it finds in the batch's statistics, and this DoFn hands on
    the batch without the removed records and with the cut ones' new texts, and REMOVED (node, listing fields)
    for each record removed or cut. `step` names the stage's seconds in data_params.json's run.stage_seconds."""

    step = ""

    def decide(self, doc, stats, source: str):
        """None to keep `doc`; a Cut to keep less of it; else the fields its listing line holds (the stage's
        step, reason, ...)."""
        raise NotImplementedError

    def process(self, batch):
        start = time.perf_counter()
        kept, listed = [], []
        for doc in batch.docs:
            fields = self.decide(doc, batch.stats, batch.group.source)
            if fields is None:
                kept.append(doc)
                continue
            if isinstance(fields, Cut):
                kept.append(fields.doc)
                fields = fields.fields
            listed.append((node_of(batch.group, doc.member or "", doc.index), fields))
        batch.stats.totals[TIME_PREFIX + self.step] += int((time.perf_counter() - start) * 1000)
        yield dataclasses.replace(batch, docs=kept) if listed else batch
        for pair in listed:
            yield pvalue.TaggedOutput(REMOVED, pair)


class FilterRecords(beam.PTransform):
    """PCollection[DocBatch] -> (the batches without the records `fn` (a RecordFilter) removes; a singleton
    summary, {"settings": `settings`, "listed": the records listed}, for its data_params.json section). The
    removed records are listed in OUT/<listing_dir>/ (ListRecords)."""

    def __init__(self, fn: RecordFilter, output_dir: str, listing_dir: str, dead_letters, settings: dict):
        super().__init__()
        self._fn = fn
        self._output_dir = output_dir
        self._listing_dir = listing_dir
        self._dead_letters = dead_letters
        self._settings = settings

    def expand(self, docs):
        # (The batches typed: sized for Beam's metrics without pickling, as NormalizeDocuments' are.)
        found = docs | "Filter" >> beam.ParDo(self._fn).with_output_types(DocBatch).with_outputs(REMOVED,
                                                                                                 main="docs")
        listed = found[REMOVED] | "List" >> ListRecords(self._output_dir, self._listing_dir, self._dead_letters)
        settings = self._settings
        return found.docs, listed | "Summary" >> beam.Map(lambda n: {"settings": settings, "listed": n})
