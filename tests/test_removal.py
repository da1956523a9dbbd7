"""transforms/stages/removal.py: the batches joined with the records to remove (deduplication's and
decontamination's), each removed record counted for its reason and handed on to be listed."""

from __future__ import annotations

import numpy as np
import pytest
from apache_beam import pvalue

from transforms.core.dedup import DROP_REASONS, EXACT, NEAR, node_of
from transforms.core.records import GroupId, Origins, TokenBatch
from transforms.core.stats import Stats
from transforms.stages import removal as stage
from transforms.stages.removal import APPLIED


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
