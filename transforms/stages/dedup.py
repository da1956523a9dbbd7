"""DeduplicateDocuments: exact and near-duplicate records removed before the rows are built (issue #46).

    TokenBatch / EncodedBatch ─Fingerprint─► (exact key, (node, bands))          + SIGS: (node, signature)
        ─GroupByKey exact key─► a family's smallest node kept; COPIES (kept, copy); its bands (near)
        ─GroupByKey band─► candidates (member, the bucket's smallest)
        ─CoGroupByKey node (SIGS)─► each candidate's signature, to its heads; GroupByKey head─► verified edges:
            estimated similarity >= threshold (the only join every record's signature crosses)
        ─ROUNDS x (large-star, small-star), each a GroupByKey node─► each node's component's smallest node
        ─CoGroupByKey node (the candidates' signatures), GroupByKey kept─► a removed family head's similarity to
            the record kept
        ─CoGroupByKey family head─► every removed record: (node, kind, kept, similarity)
    batches ─CoGroupByKey batch (transforms.stages.removal)─► the batch without its removed records, each counted
        dropped with its reason
    removed records ─CoGroupByKey file (its units' line counts), twice─► OUT/dedup/<file>.jsonl (lines as the
        dead letters number them) and the summary for data_params.json

Every step is a grouping by key: no worker holds more than one key's values (an exact family's nodes, a
bucket, a node's edges: at most a duplicate group), and every choice (the family's and the component's kept
record) is the smallest stable identity, so the output is the same on every engine and worker count. The pure
logic is transforms/core/dedup.py's.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam import pvalue

from transforms.core.dedup import (COUNTER_PREFIX, DROP_REASONS, EARLIER, EXACT, NEAR, ROUNDS, THIS_JOB,
                                   VALUE_DTYPE, DedupConfig, band_keys, bucket_edges, fingerprint,
                                   large_star, line_numbering, listing_record, node_of, settled, sketch_keys,
                                   similarity, size_bucket, small_star, token_chars, verification_values)
from transforms.core.detok import token_pieces
from transforms.core.tokenizer import shared_tokenizer
from transforms.io.dedup_index import read_index_part, write_index_meta, write_index_part
from transforms.io.listing import DEDUP_DIR
from transforms.stages.removal import RemoveRecords, WriteListing, unit_lines
from transforms.stages import coders  # noqa: F401  (registers the batches' coder)

__all__ = ["DeduplicateDocuments", "ReadDedupIndex"]

SIGS, COPIES, CANDIDATE = "sigs", "copies", "candidate"


class _Fingerprint(beam.DoFn):
    """A batch -> per record (exact key, (node, its band keys' bytes or None)); near: SIGS (node, signature)."""

    def __init__(self, config: DedupConfig, first_only: bool, tokenizer_files):
        self._config = config
        self._first_only = first_only  # a conversation's ids, not its masks
        self._tokenizer_files = tokenizer_files
        self._perms = self._chars = None

    def setup(self):
        if self._config.kind == NEAR:
            self._perms = sketch_keys(self._config.hashes, self._config.seed)
            # Shingles are runs of whole tokens holding dedup_shingle characters: each id's characters.
            self._chars = token_chars(token_pieces(shared_tokenizer(self._tokenizer_files.load())))

    def process(self, batch):
        cfg, origins = self._config, batch.origins
        for i, arrays in enumerate(batch.tokens):
            node = node_of(batch.group, origins.member(i), origins.index[i])
            key, sig = fingerprint(arrays[:1] if self._first_only else arrays, cfg, self._perms, self._chars)
            if sig is None:
                yield key, (node, None)
                continue
            yield key, (node, band_keys(sig, cfg.bands, cfg.rows).tobytes())
            yield pvalue.TaggedOutput(SIGS, (node, verification_values(sig).tobytes()))


def _family(item):
    """One exact family: its smallest node heads it; COPIES (head, copy) for the others; (near) the head's
    (band key, head), its buckets."""
    _, members = item
    head, head_bands, nodes = None, None, []
    for node, bands in members:
        nodes.append(node)
        if head is None or node < head:
            head, head_bands = node, bands
    for node in nodes:
        if node != head:
            yield pvalue.TaggedOutput(COPIES, (head, node))
    if head_bands is not None:
        for band in np.frombuffer(head_bands, dtype=np.int64).tolist():  # int64: every coder keys it exactly
            yield band, head


def _asks(pair):
    """(node, asker): the node's signature is asked for by the asker, and so is the asker's own. A bucket's head
    asks so for each candidate (member, head); a kept record so for each record labelled with it (removed, kept)."""
    node, asker = pair
    return [(node, asker), (asker, asker)]


def _send_signature(item):
    """A candidate's signature to each bucket head that asked for it (itself, if it heads one); and once as a
    CANDIDATE signature, the only ones the later steps need (every node of the near graph is a candidate)."""
    node, joined = item
    heads = sorted(set(joined["head"]))
    if heads:
        sig = next(iter(joined[SIGS]))
        for head in heads:
            yield head, (node, sig)
        yield pvalue.TaggedOutput(CANDIDATE, (node, sig))


def _own(key, members, step: str):
    """The signature a group's key sent itself (as _asks has it ask), decoded."""
    for node, sig in members:
        if node == key:
            return np.frombuffer(sig, dtype=VALUE_DTYPE)
    raise RuntimeError(f"deduplication: {step}: the signature of {key[1]}, group {key[2]}, record {key[4]} is "
                       "missing; please report it")


def _verify(item, threshold: float):
    """A head's candidates kept as edges when their estimated similarity reaches the threshold."""
    head, members = item
    members = list(members)
    sig = _own(head, members, "verify")
    for node, other in members:
        if node != head and similarity(sig, np.frombuffer(other, dtype=VALUE_DTYPE)) >= threshold:
            yield node, head


def _both_ends(edge):
    u, v = edge
    return [(u, v), (v, u)]


def _large_star(item):
    """Large-star at a node; its edges (larger, smaller) are what small-star groups by their larger end."""
    return large_star(item[0], item[1])


def _small_star(item, last: bool):
    """Small-star at a node; its edges, with both ends for the next round's large-star (`last`: as they are)."""
    edges = small_star(item[0], item[1])
    return edges if last else [x for e in edges for x in _both_ends(e)]


def _labels(item):
    """A node's label at the rounds' fixed point: (node, its component's smallest) for every node but a root."""
    node, ends = item
    down, up = [], []
    for direction, other in ends:
        (down if direction == "down" else up).append(other)
    if not settled(down, up):
        raise RuntimeError(f"deduplication: the duplicate graph did not settle in {ROUNDS} star rounds (at "
                           f"{node[1]}, group {node[2]}, record {node[4]}); please report it")
    if down:
        yield node, down[0]


def _kept_signature(item):
    node, joined = item
    kept = set(joined["kept"])
    if kept:
        if len(kept) != 1:
            raise RuntimeError(f"deduplication: {node[1]}, group {node[2]}, record {node[4]} is labelled with "
                               f"{len(kept)} kept records; please report it")
        yield kept.pop(), (node, next(iter(joined[SIGS])))


def _similarity_to_kept(item):
    kept, members = item
    members = list(members)
    sig = _own(kept, members, "similarity to the kept record")
    for node, other in members:
        if node != kept:
            yield node, (kept, similarity(sig, np.frombuffer(other, dtype=VALUE_DTYPE)))


def _removals(item):
    """A family head's removals: itself and its copies when it lost to a near duplicate, else its copies."""
    head, joined = item
    near = list(joined[NEAR])
    if near:
        kept, sim = near[0]
        yield head, NEAR, kept, sim
        for copy in joined[COPIES]:
            yield copy, NEAR, kept, sim
    else:
        for copy in joined[COPIES]:
            yield copy, EXACT, head, 1.0


def _numbering(relpath: str, joined):
    """The line numbering of one file, from its units' line counts joined beside its records."""
    return line_numbering(relpath, list(joined["units"]))


def _own_lines(item):
    """Removed records of one file, each with its line; keyed by the kept record's file."""
    relpath, joined = item
    line = _numbering(relpath, joined)
    for node, kind, kept, sim in joined["removed"]:
        yield kept[1], (node, line(node[2], node[4]), kind, kept, sim)


def _kept_lines(item, earlier: Optional[str]):
    """The kept records' lines (an earlier job's record has its own), and each removed record's listing line
    keyed by its own file."""
    relpath, joined = item
    line = _numbering(relpath, joined)
    for node, own, kind, kept, sim in joined["removed"]:
        kept_line = kept[4] if kept[0] == EARLIER else line(kept[2], kept[4])
        yield node[1], (node, listing_record(node, own, kind, kept, kept_line, sim, earlier))


def _line_of(item):
    """This job's kept records of one file, keyed by their packing group, each with its line."""
    relpath, joined = item
    line = _numbering(relpath, joined)
    for node, exact, bands, sig in joined["kept"]:
        yield (relpath, node[2]), (node[3], line(node[2], node[4]), exact, bands, sig)


def _survivor(item):
    """A record of this job that no duplicate removed: (relpath, (node, exact key, band keys, signature))."""
    node, joined = item
    if node[0] != THIS_JOB or list(joined["removed"]):
        return
    exact, bands = next(iter(joined["print"]))
    sigs = list(joined[SIGS])
    yield node[1], (node, exact, bands, sigs[0] if sigs else None)


def _earlier_records(path: str):
    for kind, value in read_index_part(path):
        yield value if kind == "key" else pvalue.TaggedOutput(SIGS, value)


class ReadDedupIndex(beam.PTransform):
    """PBegin -> {keys: (exact key, (node, band keys)), SIGS: (node, signature)} of an earlier job's index parts
    (transforms.io.dedup_index), as DeduplicateDocuments' `earlier`."""

    def __init__(self, parts: tuple):
        super().__init__()
        self._parts = tuple(parts)

    def expand(self, pbegin):
        return (pbegin
                | "IndexParts" >> beam.Create(self._parts)
                | "SpreadParts" >> beam.Reshuffle()
                | "ReadParts" >> beam.FlatMap(_earlier_records).with_output_types(Tuple[Any, Any]).with_outputs(
                    SIGS, main="keys"))


def _summary(listed: int, sizes: dict, settings: dict) -> dict:
    return {"settings": settings, "listed": listed, "groups": sum(sizes.values()), "sizes": sizes}


class DeduplicateDocuments(beam.PTransform):
    """PCollection[TokenBatch | EncodedBatch] -> (the batches without their duplicates, a singleton summary for
    data_params.json's `dedup`).

    `dead_letters`: the reader's DeadLetterPart PCollection (the units' line counts number the listing's
    records as the dead letters are numbered); `first_only`: a record's first array is its ids (a
    conversation's, beside its masks), else all its arrays are (a prompt and completion, a preference pair).
    """

    def __init__(self, config: DedupConfig, output_dir: str, dead_letters, tokenizer_files, *,
                 first_only: bool = False, earlier=None, against: Optional[str] = None,
                 index_dir: Optional[str] = None, index_meta: Optional[dict] = None,
                 storage_dir: Optional[str] = None):
        """tokenizer_files: the job's tokenizer (how many characters each id holds); earlier: the records of an
        earlier job's index (ReadDedupIndex), `against` its directory; index_dir: where this job's kept records go for a later job (`index_meta`: its index.json); storage_dir: where the
        tokenized batches wait for their removals (None: in the runner)."""
        super().__init__()
        self._config = config
        self._output_dir = output_dir
        self._dead_letters = dead_letters
        self._first_only = first_only
        self._tokenizer_files = tokenizer_files
        self._earlier = earlier
        self._against = against
        self._index_dir = index_dir
        self._index_meta = index_meta
        self._storage_dir = storage_dir

    def expand(self, batches):
        cfg = self._config
        # (Output types said: Beam infers a union with the tagged outputs', which is not a key-value pair.)
        fingerprint = _Fingerprint(cfg, self._first_only, self._tokenizer_files)
        prints = batches | "Fingerprint" >> beam.ParDo(fingerprint).with_output_types(Tuple[Any, Any]).with_outputs(
            SIGS, main="keys")
        keys, sigs = prints.keys, prints[SIGS]
        if self._earlier is not None:  # an earlier job's kept records: compared with, never removed or written
            keys = (keys, self._earlier.keys) | "WithEarlierKeys" >> beam.Flatten()
            sigs = (sigs, self._earlier[SIGS]) | "WithEarlierSignatures" >> beam.Flatten()
        families = (keys | "GroupExact" >> beam.GroupByKey()
                    | "Families" >> beam.FlatMap(_family).with_output_types(Tuple[Any, Any]).with_outputs(
                        COPIES, main="bands"))
        if cfg.kind == NEAR:
            removals = self._near(families.bands, families[COPIES], sigs)
        else:
            removals = families[COPIES] | "ExactRemovals" >> beam.Map(lambda hc: (hc[1], EXACT, hc[0], 1.0))
        if self._earlier is not None:  # (an earlier job's records are there to be kept, not removed)
            removals = removals | "OfThisJob" >> beam.Filter(lambda r: r[0][0] == THIS_JOB)
        kept_batches = batches | "RemoveDuplicates" >> RemoveRecords(
            removals, DROP_REASONS, COUNTER_PREFIX, "deduplication", storage_dir=self._storage_dir)
        units = unit_lines(self._dead_letters)
        summary = self._listing(removals, units)
        if self._index_dir is not None:
            summary = self._write_index(prints, removals, units, summary)
        return kept_batches.batches, summary

    def _write_index(self, prints, removals, units, summary):
        """This job's kept records (their keys, band keys and signatures, and file lines) in index_dir, for a
        later job's --dedup_against; index.json last, with the summary, once every part is written."""
        survivors = ({"print": prints.keys | "PrintByNode" >> beam.Map(lambda kv: (kv[1][0], (kv[0], kv[1][1]))),
                      SIGS: prints[SIGS],
                      "removed": removals | "RemovedByNode" >> beam.Map(lambda r: (r[0], None))}
                     | "JoinSurvivors" >> beam.CoGroupByKey()
                     | "Survivors" >> beam.FlatMap(_survivor))
        written = ({"units": units, "kept": survivors}
                   | "JoinIndexLines" >> beam.CoGroupByKey()
                   | "IndexLines" >> beam.FlatMap(_line_of)
                   | "GroupIndexParts" >> beam.GroupByKey()
                   | "WriteIndexParts" >> beam.Map(write_index_part, self._index_dir)
                   | "CountIndexed" >> beam.CombineGlobally(sum))
        return summary | "WriteIndexMeta" >> beam.Map(
            lambda s, n: {**s, "indexed": write_index_meta(self._index_dir, self._index_meta, n)},
            pvalue.AsSingleton(written))

    def _near(self, bands, copies, sigs):
        cfg = self._config
        # Every record's signature crosses one join; after it only the candidates' do (a quarter of them, say).
        asks = (bands | "GroupBuckets" >> beam.GroupByKey()
                | "BucketEdges" >> beam.FlatMap(lambda kv: bucket_edges(kv[1]))
                | "Asks" >> beam.FlatMap(_asks)
                | "DistinctAsks" >> beam.Distinct())
        sent = ({SIGS: sigs, "head": asks}
                | "JoinCandidateSignatures" >> beam.CoGroupByKey()
                | "SendSignatures" >> beam.FlatMap(_send_signature).with_output_types(Tuple[Any, Any]).with_outputs(
                    CANDIDATE, main="sent"))
        edges = (sent.sent
                 | "GroupHeads" >> beam.GroupByKey()
                 | "Verify" >> beam.FlatMap(_verify, cfg.threshold))
        # Each round is two groupings; the steps between them are folded into the groupings' functions (a
        # job graph of fewer steps is quicker to build and to submit).
        ends = edges | "Ends0" >> beam.FlatMap(_both_ends)
        for r in range(ROUNDS):
            ends = (ends
                    | f"LargeStar{r}Group" >> beam.GroupByKey()
                    | f"LargeStar{r}" >> beam.FlatMap(_large_star)
                    | f"SmallStar{r}Group" >> beam.GroupByKey()
                    | f"SmallStar{r}" >> beam.FlatMap(_small_star, r == ROUNDS - 1))
        edges = ends  # (the last round's edges, each once)
        labels = (edges
                  | "Ends" >> beam.FlatMap(lambda e: [(e[0], ("down", e[1])), (e[1], ("up", e[0]))])
                  | "GroupEnds" >> beam.GroupByKey()
                  | "Labels" >> beam.FlatMap(_labels))
        near = ({SIGS: sent[CANDIDATE], "kept": labels | "KeptAsks" >> beam.FlatMap(_asks)}
                | "JoinRemovedSignatures" >> beam.CoGroupByKey()
                | "SendToKept" >> beam.FlatMap(_kept_signature)
                | "GroupKept" >> beam.GroupByKey()
                | "SimilarityToKept" >> beam.FlatMap(_similarity_to_kept))
        return ({NEAR: near, COPIES: copies}
                | "JoinFamilies" >> beam.CoGroupByKey()
                | "NearRemovals" >> beam.FlatMap(_removals))

    def _listing(self, removals, units):
        cfg = self._config
        own = ({"units": units, "removed": removals | "ByFile" >> beam.Map(lambda r: (r[0][1], r))}
               | "JoinOwnLines" >> beam.CoGroupByKey()
               | "OwnLines" >> beam.FlatMap(_own_lines))
        records = ({"units": units, "removed": own}
                   | "JoinKeptLines" >> beam.CoGroupByKey()
                   | "KeptLines" >> beam.FlatMap(_kept_lines, self._against))
        listed = records | "Listing" >> WriteListing(self._output_dir, DEDUP_DIR)
        sizes = (removals
                 | "ByKept" >> beam.Map(lambda r: (r[2], 1))
                 | "GroupSizes" >> beam.CombinePerKey(sum)
                 | "SizeBins" >> beam.Map(lambda kv: (size_bucket(kv[1] + 1), 1))
                 | "CountBins" >> beam.CombinePerKey(sum))
        settings = {"kind": cfg.kind, "seed": cfg.seed}
        if cfg.kind == NEAR:
            settings.update(threshold=cfg.threshold, shingle_characters=cfg.shingle, bands=cfg.bands,
                            rows=cfg.rows, values=cfg.values, rounds=ROUNDS)
        if self._against is not None:
            settings["against_index"] = self._against
        if self._index_dir is not None:
            settings["index"] = self._index_dir
        summary = listed | "Summary" >> beam.Map(lambda n, s: _summary(n, dict(s), settings), pvalue.AsDict(sizes))
        if self._against is None:
            return summary
        against = (removals | "KeptEarlier" >> beam.Filter(lambda r: r[2][0] == EARLIER)
                   | "CountAgainst" >> beam.combiners.Count.Globally())
        return summary | "WithAgainst" >> beam.Map(lambda s, n: {**s, "against": n}, pvalue.AsSingleton(against))
