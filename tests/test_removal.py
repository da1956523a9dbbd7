"""transforms/stages/removal.py: the batches joined with the records to remove (deduplication's and
decontamination's), each removed record counted for its reason and handed on to be listed."""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.core.dedup import DROP_REASONS, EXACT, NEAR, node_of
from transforms.core.records import DeadLetterPart, GroupId, Origins, TokenBatch
from transforms.core.stats import Stats
from transforms.io.dead_letters import dead_letter_file_name
from transforms.stages import removal as stage
from transforms.stages.removal import APPLIED, RemoveRecords, WriteListing, unit_lines


def _group(relpath: str = "d/a.jsonl", slice_index: int = 0, part=None, file_index: int = 4) -> GroupId:
    return GroupId(file_index=file_index, slice_index=slice_index, source="/in/" + relpath, relpath=relpath,
                   part=part)


def _batch(ids_per_record, group=None, members=None, indices=None, keys: int = 1) -> TokenBatch:
    tokens = [tuple(np.asarray([x + k * 1000 for x in ids], dtype=np.int32) for k in range(keys))
              for ids in ids_per_record]
    n = len(tokens)
    origins = Origins(np.asarray(indices if indices is not None else range(n), dtype=np.int64),
                      tuple(members) if members is not None else None)
    return TokenBatch(group or _group(), tokens, Stats(), origins=origins)


def test_a_batch_is_keyed_by_its_group_and_waits_on_disk_when_told(tmp_path):
    """_keyed: (relpath, packing group, part) and the batch; with a directory, the batch's tokens spilled there
    and only its group, statistics, origins and reference crossing the join; _unspilled gives the batch back."""
    group = _group("e/f.jsonl", slice_index=3, part=2)
    batch = _batch([[1, 2, 3], [4], [5, 6]], group, members=["a", "", "c"], indices=[4, 5, 9])
    assert stage.batch_key(batch) == ("e/f.jsonl", 3, 2)
    assert stage.batch_key(_batch([[1]], _group("g.jsonl", 1))) == ("g.jsonl", 1, -1)
    key, same = stage._keyed(batch, None)
    assert key == ("e/f.jsonl", 3, 2) and same is batch and stage._unspilled(batch) is batch
    key, waiting = stage._keyed(batch, str(tmp_path / "spill"))
    assert key == ("e/f.jsonl", 3, 2) and isinstance(waiting, stage._Waiting)
    assert waiting.group is group and waiting.stats is batch.stats and waiting.origins is batch.origins
    assert any((tmp_path / "spill").iterdir())
    back = stage._unspilled(waiting)
    assert isinstance(back, TokenBatch) and back.group == group and back.stats is batch.stats
    assert back.origins is batch.origins
    assert [[a.tolist() for a in doc] for doc in back.tokens] == [[[1, 2, 3]], [[4]], [[5, 6]]]


def _apply(item, strict: bool = True, reasons=DROP_REASONS, prefix: str = "dedup."):
    """_apply's outputs: (the batches, the APPLIED (node, kind))."""
    out = list(stage._apply(item, reasons, prefix, "deduplication", strict))
    applied = [x.value for x in out if isinstance(x, pvalue.TaggedOutput) and x.tag == APPLIED]
    assert len(applied) + sum(not isinstance(x, pvalue.TaggedOutput) for x in out) == len(out)
    return [x for x in out if not isinstance(x, pvalue.TaggedOutput)], applied


def _r(member: str, index: int, kind: str, group=None) -> tuple:
    """A removal as the join brings it: (member, index, the removal (node, kind, what the listing needs))."""
    return member, index, (node_of(group or _group(), member, index), kind, "why")


def _removing(batch, removed, key=("d/a.jsonl", 0, -1), **kwargs):
    return _apply((key, {"batch": iter([batch]), "removed": iter(_r(*r) for r in removed)}), **kwargs)[0]


def test_a_batch_loses_its_removed_records_each_counted_for_its_kind():
    """The records named (member, index) are taken out, in order; each kind's records counted dropped for its
    reason, as dedup documents and as dedup tokens (their tokens, every key's), in total and for the source;
    each removed record handed on as APPLIED (its node, its kind), in the batch's order."""
    batch = _batch([[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11, 12]], members=["m", "m", "n", "n", "m"],
                   indices=[0, 1, 0, 1, 2], keys=2)
    batch.stats.add("documents_read", 5, "/in/d/a.jsonl")
    out, applied = _apply((("d/a.jsonl", 0, -1), {"batch": [batch], "removed": [
        _r("n", 1, EXACT), _r("m", 1, NEAR), _r("n", 0, EXACT)]}))
    assert len(out) == 1
    kept = out[0]
    assert isinstance(kept, TokenBatch) and kept.group == batch.group and kept.stats is batch.stats
    assert [doc[0].tolist() for doc in kept.tokens] == [[1, 2, 3], [11, 12]]
    assert kept.origins.index.tolist() == [0, 2] and kept.origins.members == ("m", "m")
    expected = {"documents_read": 5, "dropped.duplicate_exact": 2, "dedup.documents.exact": 2,
                "dedup.tokens.exact": 10, "dropped.duplicate_near": 1, "dedup.documents.near": 1,
                "dedup.tokens.near": 4}
    assert dict(kept.stats.totals) == expected
    assert dict(kept.stats.sources["/in/d/a.jsonl"]) == expected
    group = batch.group
    assert applied == [(node_of(group, "m", 1), NEAR, "why"), (node_of(group, "n", 0), EXACT, "why"),
                       (node_of(group, "n", 1), EXACT, "why")]


def test_a_batch_of_only_exact_removals_counts_no_near_ones():
    """A batch with removals of one kind only counts that kind (no zero counters of the other)."""
    batch = _batch([[1, 2, 3], [4, 5], [6]])
    out = _removing(batch, [("", 2, EXACT)])
    assert [doc[0].tolist() for doc in out[0].tokens] == [[1, 2, 3], [4, 5]]
    assert dict(out[0].stats.totals) == {"dropped.duplicate_exact": 1, "dedup.documents.exact": 1,
                                         "dedup.tokens.exact": 1}
    out = _removing(_batch([[1, 2, 3], [4, 5], [6]]), [("", 0, NEAR)])
    assert dict(out[0].stats.totals) == {"dropped.duplicate_near": 1, "dedup.documents.near": 1,
                                         "dedup.tokens.near": 3}


def test_the_reasons_and_the_prefix_are_the_stages():
    """Another stage's kinds, reasons and counter prefix (decontamination's)."""
    out = _removing(_batch([[1, 2], [3]]), [("", 0, "contaminated")], reasons={"contaminated": "contaminated"},
                    prefix="decontam.")
    assert dict(out[0].stats.totals) == {"dropped.contaminated": 1, "decontam.documents.contaminated": 1,
                                         "decontam.tokens.contaminated": 2}


def test_a_batch_without_removals_passes_as_it_is_and_a_spilled_one_comes_back(tmp_path):
    """Nothing to remove: the very batch; a batch that waited on disk is loaded back, then loses its records."""
    batch = _batch([[1, 2], [3]])
    assert _removing(batch, []) == [batch] and _removing(batch, [])[0] is batch
    _, waiting = stage._keyed(batch, str(tmp_path))
    out = _removing(waiting, [("", 0, EXACT)])
    assert [doc[0].tolist() for doc in out[0].tokens] == [[3]] and out[0].origins.index.tolist() == [1]
    assert out[0].stats["dedup.documents.exact"] == 1
    _, waiting = stage._keyed(_batch([[1, 2], [3]]), str(tmp_path / "again"))
    out = _removing(waiting, [])
    assert isinstance(out[0], TokenBatch) and [doc[0].tolist() for doc in out[0].tokens] == [[1, 2], [3]]


def test_a_batch_removes_every_record_when_all_are_duplicates():
    """Every record removed: an empty batch, each kind's tokens counted."""
    out = _removing(_batch([[1], [2]]), [("", 0, EXACT), ("", 1, NEAR)])
    assert out[0].tokens == [] and out[0].origins.index.tolist() == []
    assert out[0].stats["dedup.tokens.exact"] == 1 and out[0].stats["dedup.tokens.near"] == 1


def test_removals_without_their_batch_or_records_fail_naming_the_group():
    """No batch and nothing to remove: nothing (a key only the other side had); removals without a batch, two
    batches, or a removal no record of the batch matches: the job fails naming the group."""
    key = ("d/a.jsonl", 0, -1)
    assert _apply((key, {"batch": [], "removed": []})) == ([], [])
    with pytest.raises(RuntimeError) as e:
        _apply((key, {"batch": [], "removed": [_r("", 0, EXACT)]}))
    assert str(e.value) == "deduplication: 0 batches of group ('d/a.jsonl', 0, -1)"
    with pytest.raises(RuntimeError) as e:
        _apply((key, {"batch": [_batch([[1]]), _batch([[1]])], "removed": []}))
    assert str(e.value) == "deduplication: 2 batches of group ('d/a.jsonl', 0, -1)"
    with pytest.raises(RuntimeError) as e:
        _apply((key, {"batch": [_batch([[1]]), _batch([[1]])], "removed": []}), strict=False)
    assert str(e.value) == "deduplication: 2 batches of group ('d/a.jsonl', 0, -1)"
    with pytest.raises(RuntimeError) as e:
        _removing(_batch([[1], [2]]), [("", 0, EXACT), ("", 5, NEAR)])
    assert str(e.value) == "deduplication: records of group ('d/a.jsonl', 0, -1) to remove were not found in it"
    with pytest.raises(RuntimeError, match="not found"):
        _removing(_batch([[1], [2]], members=["a", "b"]), [("b", 0, EXACT)])


def test_not_strict_a_record_dropped_before_is_neither_removed_nor_counted_again():
    """Not strict (decontamination, before an encoder that drops records): a record not in the batch was dropped
    for another reason and is left so (not counted, not APPLIED); a group whose batch left nothing to join
    (every record dropped before) gives nothing."""
    key = ("d/a.jsonl", 0, -1)
    out, applied = _apply((key, {"batch": [_batch([[1], [2, 3]], indices=[0, 2])],
                                 "removed": [_r("", 1, EXACT), _r("", 2, EXACT)]}), strict=False)
    assert [doc[0].tolist() for doc in out[0].tokens] == [[1]]
    assert dict(out[0].stats.totals) == {"dropped.duplicate_exact": 1, "dedup.documents.exact": 1,
                                         "dedup.tokens.exact": 2}
    assert applied == [(node_of(_group(), "", 2), EXACT, "why")]
    assert _apply((key, {"batch": [], "removed": [_r("", 0, EXACT)]}), strict=False) == ([], [])


# ---------------------------------------------------------------- the composites, run in-process


def _pipeline() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))


def _seen(batch) -> tuple:
    return (batch.group.relpath, batch.group.slice_index, [doc[0].tolist() for doc in batch.tokens],
            batch.origins.index.tolist(), list(batch.origins.members or ()), sorted(batch.stats.totals.items()))


def _three_batches():
    a = _batch([[1, 2], [3], [4, 5, 6]], _group("d/a.jsonl"), members=["m", "n", "m"], indices=[0, 0, 1])
    b = _batch([[7], [8, 9]], _group("e/b.jsonl", slice_index=1, part=0, file_index=5), indices=[3, 5])
    c = _batch([[10]], _group("f/c.jsonl", slice_index=2, file_index=6))  # nothing to remove
    return a, b, c


CONTAMINATED = {"contaminated": "contaminated"}


def test_remove_records_joins_each_batch_with_its_removals(tmp_path):
    """RemoveRecords: each removal (node, kind, ...) reaches its record's batch (by relpath, packing group and
    part; then member and index), which loses it, counted under the stage's reasons and prefix; every removal
    applied comes out as APPLIED, as given; the batches wait in the storage directory."""
    a, b, c = _three_batches()
    removals = [(node_of(a.group, "n", 0), "contaminated", 7), (node_of(a.group, "m", 1), "contaminated", 8),
                (node_of(b.group, "", 5), "contaminated", 9)]
    p = _pipeline()
    out = p | "Batches" >> beam.Create([a, b, c]) | RemoveRecords(
        p | "Removals" >> beam.Create(removals), CONTAMINATED, "decontam.", "decontamination",
        storage_dir=str(tmp_path / "waiting"))
    counted = lambda docs, tokens: [("decontam.documents.contaminated", docs),  # noqa: E731
                                    ("decontam.tokens.contaminated", tokens), ("dropped.contaminated", docs)]
    assert_that(out["batches"] | beam.Map(_seen), equal_to([
        ("d/a.jsonl", 0, [[1, 2]], [0], ["m"], counted(2, 4)),
        ("e/b.jsonl", 1, [[7]], [3], [], counted(1, 2)),
        ("f/c.jsonl", 2, [[10]], [0], [], [])]))
    assert_that(out[APPLIED], equal_to(removals), label="Applied")
    p.run().wait_until_finish()
    assert len(list((tmp_path / "waiting").iterdir())) == 3  # each batch's tokens waited there


def test_remove_records_fails_strict_and_passes_what_is_gone_otherwise():
    """By default (strict) a removal of a record not in its batch fails the job, naming the step; not strict, it
    is left (dropped before, counted there), and the rest removed."""
    a, b, c = _three_batches()
    removals = [(node_of(a.group, "m", 0), "contaminated", 1), (node_of(b.group, "", 4), "contaminated", 2)]
    p = _pipeline()
    _ = p | "Batches" >> beam.Create([a, b, c]) | RemoveRecords(
        p | "Removals" >> beam.Create(removals), CONTAMINATED, "decontam.", "the step")
    with pytest.raises(Exception, match=r"the step: records of group \('e/b.jsonl', 1, 0\) to remove were not "
                                        r"found in it"):
        p.run().wait_until_finish()
    a, b, c = _three_batches()
    p = _pipeline()
    out = p | "Batches" >> beam.Create([a, b, c]) | RemoveRecords(
        p | "Removals" >> beam.Create(removals), CONTAMINATED, "decontam.", "the step", strict=False)
    assert_that(out["batches"] | beam.Map(_seen), equal_to([
        ("d/a.jsonl", 0, [[3], [4, 5, 6]], [0, 1], ["n", "m"],
         [("decontam.documents.contaminated", 1), ("decontam.tokens.contaminated", 2),
          ("dropped.contaminated", 1)]),
        ("e/b.jsonl", 1, [[7], [8, 9]], [3, 5], [], []),
        ("f/c.jsonl", 2, [[10]], [0], [], [])]))
    assert_that(out[APPLIED], equal_to(removals[:1]), label="Applied")
    p.run().wait_until_finish()


def test_unit_lines_and_the_listing_written(tmp_path):
    """unit_lines: the dead-letter parts that say how many lines their unit read, as (relpath, (first group, end
    group, lines)). WriteListing: each file's records in node order in OUT/<directory>/<its name>.jsonl, and the
    count of all records written."""
    parts = [DeadLetterPart("/in/d/a.jsonl", 0, 4, 0, [], False, None, "d/a.jsonl"),
             DeadLetterPart("/in/d/a.jsonl", 0, 4, 1, [], False, 120, "d/a.jsonl"),
             DeadLetterPart("/in/d/a.jsonl", 4, 9, 0, [], True, 0, "d/a.jsonl")]
    group_a, group_b = _group("d/a.jsonl"), _group("e/b.jsonl", file_index=5)
    records = [("d/a.jsonl", (node_of(group_a, "", 9), {"line": 10})),
               ("e/b.jsonl", (node_of(group_b, "", 0), {"line": 1})),
               ("d/a.jsonl", (node_of(group_a, "", 2), {"line": 3}))]
    p = _pipeline()
    lines = unit_lines(p | "Dead" >> beam.Create(parts))
    assert_that(lines, equal_to([("d/a.jsonl", (0, 4, 120)), ("d/a.jsonl", (4, 9, 0))]), label="Lines")
    written = p | "Records" >> beam.Create(records) | WriteListing(str(tmp_path / "out"), "filtered/x")
    assert_that(written, equal_to([3]), label="Written")
    p.run().wait_until_finish()
    listing = tmp_path / "out" / "filtered" / "x"
    assert sorted(f.name for f in listing.iterdir()) == sorted(
        [dead_letter_file_name("d/a.jsonl"), dead_letter_file_name("e/b.jsonl")])
    read = {rel: [json.loads(x) for x in (listing / dead_letter_file_name(rel)).read_text().splitlines()]
            for rel in ("d/a.jsonl", "e/b.jsonl")}
    assert read == {"d/a.jsonl": [{"line": 3}, {"line": 10}], "e/b.jsonl": [{"line": 1}]}


def test_a_docbatch_waits_as_it_was_read_and_loses_its_records_counted_in_characters(tmp_path):
    """Decontamination removes before tokenizing: a DocBatch spilled whole (its documents, statistics and
    progress share) comes back the same, and loses the named records, each counted with its characters (every
    value's)."""
    from transforms.core.records import DocBatch, Document

    docs = [Document(0, ("abc", "de")), Document(1, ("fgh",), "m"), Document(2, ("ij",))]
    batch = DocBatch(_group(), docs, Stats(), progress_bytes=123)
    key, waiting = stage._keyed(batch, str(tmp_path))
    assert key == ("d/a.jsonl", 0, -1) and isinstance(waiting, stage._WaitingDocs)
    back = stage._unspilled(waiting)
    assert back.docs == docs and back.stats is batch.stats and back.progress_bytes == 123 and back.group == _group()
    removed = [_r("", 0, "contaminated"), _r("m", 1, "contaminated")]
    out, applied = _apply((key, {"batch": [waiting], "removed": removed}), reasons={"contaminated": "contaminated"},
                          prefix="decontam.")
    assert [d.index for d in out[0].docs] == [2] and out[0].progress_bytes == 123
    assert dict(out[0].stats.totals) == {"dropped.contaminated": 2, "decontam.documents.contaminated": 2,
                                         "decontam.characters.contaminated": 8}
    assert [r[0][4] for r in applied] == [0, 1]


def test_a_listed_record_is_numbered_as_the_dead_letters_number_it():
    """_numbered: each removed record of a file its listing line: file, line (the file's units' lines before its
    packing group added to its index, 1-based; 0-based rows in a .parquet file), member when it has one, then
    the stage's fields, in that order."""
    first, later = _group("d/a.jsonl", slice_index=5), _group("d/a.jsonl", slice_index=0)
    records = [(node_of(first, "", 2), {"step": "s", "reason": "r"}),
               (node_of(later, "x/y.txt", 0), {"score": 0.5})]
    out = list(stage._numbered(("d/a.jsonl", {"units": iter([(0, 4, 120), (4, 9, 50)]),
                                              "records": iter(records)})))
    assert out == [("d/a.jsonl", (records[0][0], {"file": "d/a.jsonl", "line": 123, "step": "s", "reason": "r"})),
                   ("d/a.jsonl", (records[1][0], {"file": "d/a.jsonl", "line": 1, "member": "x/y.txt",
                                                  "score": 0.5}))]
    assert [list(r) for _, (_, r) in out] == [["file", "line", "step", "reason"], ["file", "line", "member", "score"]]
    rows = _group("p.parquet", slice_index=3)
    assert list(stage._numbered(("p.parquet", {"units": [], "records": [(node_of(rows, "", 7), {})]}))) == [
        ("p.parquet", (node_of(rows, "", 7), {"file": "p.parquet", "line": 7}))]


def test_list_records_writes_each_files_removed_records_numbered(tmp_path):
    """ListRecords: (node, fields) -> OUT/<directory>/<file>.jsonl, each record numbered with its file's units
    (the dead-letter parts), in file order; the count of records written."""
    from transforms.stages.removal import ListRecords

    parts = [DeadLetterPart("/in/d/a.jsonl", 0, 4, 1, [], False, 120, "d/a.jsonl"),
             DeadLetterPart("/in/d/a.jsonl", 4, 9, 0, [], True, 50, "d/a.jsonl"),
             DeadLetterPart("/in/e/b.jsonl", 0, 2, 0, [], False, 7, "e/b.jsonl")]
    a5, a0, b = _group("d/a.jsonl", slice_index=5), _group("d/a.jsonl"), _group("e/b.jsonl", file_index=5)
    records = [(node_of(a5, "", 2), {"reason": "r1"}), (node_of(b, "m", 3), {"reason": "r2"}),
               (node_of(a0, "", 0), {"reason": "r3"})]
    p = _pipeline()
    written = p | "Records" >> beam.Create(records) | ListRecords(
        str(tmp_path / "out"), "filtered/y", p | "Dead" >> beam.Create(parts))
    assert_that(written, equal_to([3]))
    p.run().wait_until_finish()
    listing = tmp_path / "out" / "filtered" / "y"
    read = {rel: [json.loads(x) for x in (listing / dead_letter_file_name(rel)).read_text().splitlines()]
            for rel in ("d/a.jsonl", "e/b.jsonl")}
    assert read == {"d/a.jsonl": [{"file": "d/a.jsonl", "line": 1, "reason": "r3"},
                                  {"file": "d/a.jsonl", "line": 123, "reason": "r1"}],
                    "e/b.jsonl": [{"file": "e/b.jsonl", "line": 4, "member": "m", "reason": "r2"}]}
