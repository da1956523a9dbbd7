"""DecontaminateDocuments: the records that hold an evaluation set's n-grams removed before they are tokenized
(issue #47).

    evaluation files ─ReadEvalIndex: a worker per file, then merged in file order─► one EvalIndex (side input)
    DocBatch ─FindEvidence (the index)─► the batch as it was ───────────────────────────────────────────┐
                                    └─► (n-gram hash, (node, item, where)) once per record and n-gram   │
        ─CombinePerKey hash, capped at max_docs + 1 records─► evidence (node, ...) | boilerplate (counted)│
        ─GroupByKey node─► (node, contaminated, the first match's item, n-grams, items, where) ─RemoveRecords┴─►
            the batches without them, each counted dropped.contaminated (with the cut action: with what is left
            of each, its pieces around the matches, unless that is nothing or it is cut too often)
    removed records ─CoGroupByKey file (its units' line counts)─► OUT/filtered/decontaminate/<file>.jsonl

A record is checked in the text the job tokenizes (normalized; a conversation's, or a preference pair's,
every string: message contents). The batches wait for the verdict on disk, as they were read (transforms.io.spill),
and are tokenized after it: the job's tokenizing, packing and compressing then run together as they do without
this stage. An n-gram found in more than max_docs training records is not evidence (GPT-3's rule): what a
grouping holds for one n-gram is capped there, so a boilerplate n-gram in millions of records costs a count, not
a list.

Every step is a function of the records and the evaluation set alone: the index is merged in file order (an
n-gram is owned by the first item that holds it), the verdict is per record, so the output is the same on every
engine and worker count. The pure logic is transforms/core/decontam.py's.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam import pvalue

from transforms.core.decontam import (COUNTER_PREFIX, CUT, LISTING_DIR, SLICE_CHARS, DecontamConfig, build_index,
                                      capped, catalog_of, cut_record, listing_record, merge_indexes,
                                      record_evidence, record_texts, slices, verdict)
from transforms.core.dedup import line_numbering, node_of
from transforms.core.memory import release_free_memory
from transforms.core.reasons import CONTAMINATED
from transforms.core.records import DocBatch
from transforms.core.threads import process_threads
from transforms.core.timing import TIME_PREFIX
from transforms.io.eval_sets import read_eval_items
from transforms.stages.removal import APPLIED, RemoveRecords, WriteListing, unit_lines

__all__ = ["DecontaminateDocuments", "ReadEvalIndex"]

EVIDENCE, BOILERPLATE, MATCHED = "evidence", "boilerplate", "matched"


def _index_file(item, keys: Optional[tuple], config: DecontamConfig):
    """(its place among the files, a file's path) -> (its place, the file's index, its items numbered from 0).
    The items are read as they are indexed: only their lines and fields are kept, for the catalog."""
    place, path = item
    lines, fields = [], []

    def texts():
        for found in read_eval_items(path, keys):
            lines.append(found.line)
            fields.append(sys.intern(found.field))
            yield found.text

    index = build_index(texts(), config)
    return place, dataclasses.replace(index, catalog=catalog_of(path, lines, fields))


def _merged(parts):
    return merge_indexes([index for _, index in sorted(parts, key=lambda p: p[0])])


class ReadEvalIndex(beam.PTransform):
    """PBegin -> a singleton EvalIndex of the evaluation files (each read and indexed on one worker; merged in
    the order given, so that an n-gram is owned by the first item, in that order, that holds it)."""

    def __init__(self, files: Sequence[str], keys: Optional[Sequence[str]], config: DecontamConfig):
        super().__init__()
        self._files = tuple(files)
        self._keys = tuple(keys) if keys else None
        self._config = config

    def expand(self, pbegin):
        return (pbegin
                | "EvaluationFiles" >> beam.Create(list(enumerate(self._files)))
                | "SpreadFiles" >> beam.Reshuffle()
                | "IndexFiles" >> beam.Map(_index_file, self._keys, self._config)
                | "AllFiles" >> beam.combiners.ToList()
                | "Merge" >> beam.Map(_merged))


class _FindEvidence(beam.DoFn):
    """A DocBatch -> itself, and EVIDENCE (hash, (node, item, where, length)): each evaluation n-gram a record
    holds, once per record. `json_values`: per value, whether the job reads it as JSON (its strings are checked).

    A batch's records are checked a slice at a time on a thread per core (numpy lets go of the GIL for its
    array work): the tokenizer's threads use every core, and this step would otherwise hold the job to one."""

    def __init__(self, json_values: tuple, process_cpus: Optional[int]):
        self._json_values = json_values
        self._process_cpus = process_cpus
        self._pool = None

    def setup(self):
        self._pool = ThreadPoolExecutor(process_threads(self._process_cpus), thread_name_prefix="decontaminate")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown()

    def process(self, batch, index):
        start = time.perf_counter()
        docs = batch.docs
        texts = [record_texts(d.values, self._json_values) for d in docs]
        cuts = list(slices([sum(map(len, ts)) for ts in texts], SLICE_CHARS))
        evidence = [e for part in self._pool.map(lambda c: record_evidence(texts[c[0]:c[1]], index), cuts)
                    for e in part]
        found = []
        for doc, matches in zip(docs, evidence):
            if matches:
                node = node_of(batch.group, doc.member or "", doc.index)
                found.extend((h, (node, owner, where, length)) for h, owner, where, length in matches)
        batch.stats.totals[TIME_PREFIX + "decontaminate"] += int((time.perf_counter() - start) * 1000)
        release_free_memory()  # the slices' arrays, freed by the threads in their own arenas
        yield batch
        for pair in found:
            yield pvalue.TaggedOutput(EVIDENCE, pair)


class _Records(beam.CombineFn):
    """An n-gram's records: counted, and kept while there are at most `cap` (transforms.core.decontam.capped)."""

    def __init__(self, cap: int):
        self._cap = cap

    def create_accumulator(self):
        return 0, []

    def add_input(self, acc, value):
        count, members = acc
        if count < self._cap + 1:
            members.append(value)
        return capped(count + 1, members, self._cap)

    def merge_accumulators(self, accs):
        count, members = 0, []
        for c, m in accs:
            count += c
            if count <= self._cap:
                members.extend(m)
        return capped(count, members, self._cap)

    def extract_output(self, acc):
        return acc


def _evidence(item):
    """An n-gram's records: each its evidence (node, (hash, item, where, length)), and the n-gram once MATCHED;
    or, in too many, the n-gram once BOILERPLATE."""
    h, (count, members) = item
    if not members:  # (capped: more than max_docs records)
        yield pvalue.TaggedOutput(BOILERPLATE, count)
        return
    yield pvalue.TaggedOutput(MATCHED, len(members))
    for node, owner, where, length in members:
        yield node, (h, owner, where, length)


def _verdict(item):
    """A record's evidence -> its removal: (node, CONTAMINATED, the first match's item, n-grams, items, where its
    matches are)."""
    node, evidence = item
    return (node, CONTAMINATED, *verdict(list(evidence)))


def _cut_document(doc, removal, config: DecontamConfig, json_values: tuple):
    """What the cut action keeps of a contaminated record (transforms.core.decontam.cut_record), None to remove
    it: a conversation or a preference pair (a value read as JSON) is removed whole."""
    if any(json_values):
        return None
    values = cut_record(doc.values, removal[5], config)
    return None if values is None else dataclasses.replace(doc, values=values)


def _listed(item, index, cutting: bool):
    """The removed (and cut) records of one file, each as its listing line, keyed by the file."""
    relpath, joined = item
    line = line_numbering(relpath, list(joined["units"]))
    for applied in joined["removed"]:
        removal, lost = applied if cutting else (applied, None)
        node, _, owner, ngrams, items, _ = removal
        yield relpath, (node, listing_record(node, line(node[2], node[4]), index.catalog.describe(owner), ngrams,
                                             items, lost))


def _summary(listed: int, matched: int, boilerplate: int, index, settings: dict, sets: tuple) -> dict:
    return {"settings": settings, "listed": listed, "matched": matched, "boilerplate": boilerplate,
            "evaluation": {"sets": list(sets), "files": len(index.catalog.sources), "items": index.items,
                           "items_too_short": index.short, "ngrams": len(index)}}


class DecontaminateDocuments(beam.PTransform):
    """PCollection[DocBatch] -> (the batches without the contaminated records; a singleton summary for
    data_params.json's `decontamination`).

    `files`: the evaluation files (`sets`: as the user named them), `keys` the fields of theirs that hold text
    (None: every string); `json_values`: per value of a record, whether the job reads it as JSON; `dead_letters`:
    the reader's DeadLetterPart PCollection (the units' line counts number the listing's records as the dead
    letters are numbered); `storage_dir`: where the batches wait for the verdict (None: in the runner);
    `process_cpus`: the cores a worker process may use (None: all of the machine's).
    """

    def __init__(self, config: DecontamConfig, files: Sequence[str], sets: Sequence[str],
                 keys: Optional[Sequence[str]], json_values: tuple, output_dir: str, dead_letters, *,
                 storage_dir: Optional[str] = None, process_cpus: Optional[int] = None):
        super().__init__()
        self._config = config
        self._files = tuple(files)
        self._sets = tuple(sets)
        self._keys = keys
        self._json_values = tuple(json_values)
        self._output_dir = output_dir
        self._dead_letters = dead_letters
        self._storage_dir = storage_dir
        self._process_cpus = process_cpus

    def expand(self, docs):
        cfg = self._config
        index = pvalue.AsSingleton(docs.pipeline | "ReadEvalIndex" >> ReadEvalIndex(self._files, self._keys, cfg))
        # (The batches typed: sized for Beam's metrics without pickling, as NormalizeDocuments' are.)
        find = _FindEvidence(self._json_values, self._process_cpus)
        found = docs | "FindEvidence" >> beam.ParDo(find, index).with_output_types(DocBatch).with_outputs(
            EVIDENCE, main="docs")
        per_ngram = (found[EVIDENCE]
                     | "RecordsPerNgram" >> beam.CombinePerKey(_Records(cfg.max_docs))
                     | "Evidence" >> beam.FlatMap(_evidence).with_output_types(Tuple[Any, Any]).with_outputs(
                         BOILERPLATE, MATCHED, main="evidence"))
        removals = (per_ngram.evidence
                    | "GroupByRecord" >> beam.GroupByKey()
                    | "Verdicts" >> beam.Map(_verdict))
        cutting = cfg.action == CUT
        rewrite = functools.partial(_cut_document, config=cfg, json_values=self._json_values) if cutting else None
        removed = found.docs | "RemoveContaminated" >> RemoveRecords(
            removals, {CONTAMINATED: CONTAMINATED}, COUNTER_PREFIX, "decontamination", storage_dir=self._storage_dir,
            rewrite=rewrite)
        listed = ({"units": unit_lines(self._dead_letters), "removed": removed[APPLIED]
                   | "ByFile" >> beam.Map(lambda r: ((r[0] if cutting else r)[0][1], r))}
                  | "JoinLines" >> beam.CoGroupByKey()
                  | "ListingLines" >> beam.FlatMap(_listed, index, cutting)
                  | "Listing" >> WriteListing(self._output_dir, LISTING_DIR))
        matched = per_ngram[MATCHED] | "CountMatched" >> beam.combiners.Count.Globally()
        boilerplate = per_ngram[BOILERPLATE] | "CountBoilerplate" >> beam.combiners.Count.Globally()
        settings = {"action": cfg.action, "ngram": cfg.ngram, "min_ngram": cfg.min_ngram, "max_docs": cfg.max_docs}
        summary = listed | "Summary" >> beam.Map(
            _summary, pvalue.AsSingleton(matched), pvalue.AsSingleton(boilerplate), index, settings, self._sets)
        return removed.batches, summary
