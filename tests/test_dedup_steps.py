"""The dedup stage's steps (transforms/stages/dedup.py), called as plain functions on the values its groupings hand
them: the fingerprints of a batch, an exact family, the signature requests and verification, the star rounds'
steps and the labels at their fixed point, the removals, a batch without its removed records, the listing's and
the index's lines, with exact values. (The steps' wiring into a job: tests/test_dedup_job.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apache_beam import pvalue

from transforms.core.dedup import (EXACT, NEAR, THIS_JOB, DedupConfig, band_keys, earlier_node, exact_key,
                                   fingerprint, node_of, shingle_hashes, signature, sketch_keys, token_chars,
                                   verification_values)
from transforms.core.records import GroupId, Origins, TokenBatch
from transforms.core.stats import Stats
from transforms.stages import dedup as stage
from transforms.stages.dedup import CANDIDATE, COPIES, SIGS

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"


def _group(relpath: str = "d/a.jsonl", slice_index: int = 0, part=None, file_index: int = 4) -> GroupId:
    return GroupId(file_index=file_index, slice_index=slice_index, source="/in/" + relpath, relpath=relpath,
                   part=part)


def _node(i: int, relpath: str = "d/a.jsonl", slice_index: int = 0, member: str = "") -> tuple:
    return node_of(_group(relpath, slice_index), member, i)


def _tagged(out) -> list:
    """Outputs with a TaggedOutput as (tag, value)."""
    return [(x.tag, x.value) if isinstance(x, pvalue.TaggedOutput) else x for x in out]


def _batch(ids_per_record, group=None, members=None, indices=None, keys: int = 1) -> TokenBatch:
    tokens = [tuple(np.asarray([x + k * 1000 for x in ids], dtype=np.int32) for k in range(keys))
              for ids in ids_per_record]
    n = len(tokens)
    origins = Origins(np.asarray(indices if indices is not None else range(n), dtype=np.int64),
                      tuple(members) if members is not None else None)
    return TokenBatch(group or _group(), tokens, Stats(), origins=origins)


# ------------------------------------------------------------------- fingerprints


class _Files:
    """A job's tokenizer_files as _Fingerprint reads them: load() -> TokenizerFiles."""

    def __init__(self):
        from transforms.io.tokenizer_files import read_tokenizer_files

        self.files = read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                          encoder_file=str(GPT2 / "encoder.json"))

    def load(self):
        return self.files


@pytest.fixture(scope="module")
def gpt2_files():
    return _Files()


def test_an_exact_fingerprint_is_each_records_key_and_node_without_bands():
    """Exact: per record (exact key under the seed, (its node: group, member, index, part; None)); no signature,
    and setup builds nothing."""
    cfg = DedupConfig(EXACT, seed=5)
    group = _group("t.tar", slice_index=2, part=1)
    batch = _batch([[1, 2, 3], [4, 5], [1, 2, 3]], group, members=["x.txt", "", "y.txt"], indices=[7, 0, 3])
    fn = stage._Fingerprint(cfg, False, tokenizer_files=None)
    fn.setup()
    assert fn._perms is None and fn._chars is None
    out = list(fn.process(batch))
    nodes = [(THIS_JOB, "t.tar", 2, "x.txt", 7, 1), (THIS_JOB, "t.tar", 2, "", 0, 1),
             (THIS_JOB, "t.tar", 2, "y.txt", 3, 1)]
    assert out == [(fingerprint(arrays, cfg, None)[0], (node, None)) for arrays, node in zip(batch.tokens, nodes)]
    assert out[0][0] == out[2][0] != out[1][0]
    assert out[0][0] != fingerprint(batch.tokens[0], DedupConfig(EXACT), None)[0]  # the seed's key


def test_first_only_fingerprints_a_records_first_array():
    """first_only (a conversation's ids beside its masks): the key of the first array alone, else of every array."""
    cfg = DedupConfig(EXACT)
    batch = _batch([[1, 2], [3]], keys=2)
    first = [key for key, _ in stage._Fingerprint(cfg, True, None).process(batch)]
    whole = [key for key, _ in stage._Fingerprint(cfg, False, None).process(batch)]
    assert first == [fingerprint(arrays[:1], cfg, None)[0] for arrays in batch.tokens]
    assert whole == [fingerprint(arrays, cfg, None)[0] for arrays in batch.tokens]
    assert first[0] != whole[0] and first[1] != whole[1]


def test_a_near_fingerprint_adds_band_keys_and_the_verification_values_of_character_shingles(gpt2_files):
    """Near: setup draws the sketch keys from the seed and each id's characters from the tokenizer; per record
    (exact key, (node, band keys' int64 bytes)) and SIGS (node, the signature's 16-bit verification values' bytes),
    the signature over shingles of `shingle` characters (not ids)."""
    from transforms.core.detok import token_pieces
    from transforms.core.tokenizer import shared_tokenizer

    cfg = DedupConfig(NEAR, shingle=6, bands=4, rows=3, values=16, seed=2)
    fn = stage._Fingerprint(cfg, False, gpt2_files)
    fn.setup()
    chars = token_chars(token_pieces(shared_tokenizer(gpt2_files.files)))
    assert fn._perms == sketch_keys(16, 2) and fn._chars.tolist() == chars.tolist()
    ids = [15496, 995, 11, 612, 318, 257, 1332, 13, 40, 588, 340, 13]  # "Hello world, this is a test. I like it."
    batch = _batch([ids, ids[:5]])
    out = _tagged(fn.process(batch))
    assert len(out) == 4
    for i, record in enumerate([ids, ids[:5]]):
        sig = signature(shingle_hashes(np.asarray(record), 6, chars), *sketch_keys(16, 2))
        key = exact_key(batch.tokens[i], 2)
        assert out[2 * i] == (key, (_node(i), band_keys(sig, 4, 3).astype(np.int64).tobytes()))
        assert out[2 * i + 1] == (SIGS, (_node(i), verification_values(sig).tobytes()))
    assert np.frombuffer(out[0][1][1], dtype=np.int64).shape == (4,)
    id_shingles = signature(shingle_hashes(np.asarray(ids), 6), *sketch_keys(16, 2))
    assert out[1][1][1] != verification_values(id_shingles).tobytes()


# ------------------------------------------------------------------- families and signatures


def test_a_family_is_headed_by_its_smallest_node_whose_bands_make_its_buckets():
    """The smallest node heads the family (whatever order the grouping gives), COPIES (head, copy) for every
    other; the head's band keys (int64, as plain ints) each keyed to the head; an exact family has no bands."""
    head, a, b = _node(1), _node(5), _node(3, slice_index=2)
    bands = {n: np.array([n * 11, -n, 2**62], dtype=np.int64).tobytes() for n in (1, 3, 5)}
    out = _tagged(stage._family(("key", [(a, bands[5]), (head, bands[1]), (b, bands[3])])))
    assert out == [(COPIES, (head, a)), (COPIES, (head, b)), (11, head), (-1, head), (2**62, head)]
    assert all(type(band) is int for band, _ in out[2:])
    assert _tagged(stage._family(("key", [(b, None), (a, None)]))) == [(COPIES, (a, b))]
    assert _tagged(stage._family(("key", [(head, None)]))) == []
    assert _tagged(stage._family(("key", [(a, bands[5])]))) == [(55, a), (-5, a), (2**62, a)]


def test_each_ask_is_for_the_node_and_the_askers_own_signature():
    """A request (node, asker) asks for the node's signature and the asker's own, so that the asker's group holds
    its own signature to compare with (a bucket head's, a kept record's)."""
    assert stage._asks((_node(4), _node(1))) == [(_node(4), _node(1)), (_node(1), _node(1))]


def test_a_candidates_signature_goes_to_each_head_that_asked_once_and_once_as_a_candidate():
    """A node's signature goes once to each distinct head that asked for it (sorted), then once tagged CANDIDATE; a
    node no head asked for sends nothing."""
    head, other, node = _node(0), _node(1), _node(5)
    sig = np.arange(8, dtype=np.uint16).tobytes()
    out = _tagged(stage._send_signature((node, {SIGS: [sig], "head": [other, head, other]})))
    assert out == [(head, (node, sig)), (other, (node, sig)), (CANDIDATE, (node, sig))]
    assert _tagged(stage._send_signature((node, {SIGS: [sig], "head": []}))) == []


def _sigs(values: int = 20):
    base = np.arange(values, dtype=np.uint16)
    at = {}
    for equal in (20, 18, 16, 15, 10):
        sig = base.copy()
        sig[equal:] += 1000
        at[equal] = sig
    return at  # at[k]: k of 20 values equal to base's: similarity k / 20


def test_verification_keeps_the_candidates_at_or_above_the_threshold_against_the_heads_own_signature():
    """Verify: each member other than the head is an edge (member, head) when its similarity to the head's own
    signature reaches the threshold (a member exactly at it is kept); a group without the head's signature fails
    naming the record."""
    sig = _sigs()
    head = _node(2)
    members = [(_node(7), sig[16].tobytes()), (head, sig[20].tobytes()), (_node(5), sig[15].tobytes()),
               (_node(1), sig[10].tobytes()), (_node(9), sig[20].tobytes())]
    assert list(stage._verify((head, iter(members)), 0.8)) == [(_node(7), head), (_node(9), head)]
    assert list(stage._verify((head, iter(members)), 0.75)) == [(_node(7), head), (_node(5), head), (_node(9), head)]
    assert list(stage._verify((head, iter(members)), 1.0)) == [(_node(9), head)]
    with pytest.raises(RuntimeError) as e:
        list(stage._verify((_node(3, "z.jsonl", 6), iter(members)), 0.8))
    assert str(e.value) == ("deduplication: verify: the signature of z.jsonl, group 6, record 3 is missing; "
                            "please report it")


def test_own_finds_the_keys_signature_decoded():
    """_own: the key's own signature among the members', as 16-bit values; missing, an error naming the step."""
    sig = _sigs()
    members = [(_node(1), sig[10].tobytes()), (_node(2), sig[15].tobytes())]
    own = stage._own(_node(2), members, "step")
    assert own.dtype == np.uint16 and own.tolist() == sig[15].tolist()
    with pytest.raises(RuntimeError, match=r"^deduplication: a step: the signature of d/a.jsonl, group 0, record 3 "):
        stage._own(_node(3), members, "a step")


# ------------------------------------------------------------------- connected components


def test_both_ends_and_the_star_steps_at_a_node():
    """An edge both ways; large-star and small-star at one node as the core has them; small-star's edges both ways
    for the next round, as they are after the last."""
    assert stage._both_ends((5, 2)) == [(5, 2), (2, 5)]
    # Large-star at 4: its larger neighbours linked to the smallest of 4 and its neighbours.
    assert stage._large_star((4, iter([9, 2, 7, 2]))) == [(7, 2), (9, 2)]
    assert stage._large_star((1, [9, 2])) == [(2, 1), (9, 1)]
    # Small-star at 8 over its smaller neighbours: all linked to the smallest; the last round's edges as they are.
    assert stage._small_star((8, [5, 3]), True) == [(5, 3), (8, 3)]
    assert stage._small_star((8, [5, 3]), False) == [(5, 3), (3, 5), (8, 3), (3, 8)]
    assert stage._small_star((3, []), False) == []


def test_a_label_is_the_one_smaller_end_of_a_settled_node():
    """At the fixed point a node with a smaller end is labelled with it; a root (only larger ends) has no label; a
    node not settled (two smaller ends, or a smaller and a larger) fails naming it and the rounds."""
    a, b, c = _node(0), _node(1), _node(2, "x.jsonl", 3)
    assert list(stage._labels((b, [("down", a)]))) == [(b, a)]
    assert list(stage._labels((b, [("down", a), ("down", a)]))) == [(b, a)]
    assert list(stage._labels((a, [("up", b), ("up", c)]))) == []
    assert list(stage._labels((a, []))) == []
    for ends in ([("down", a), ("down", b)], [("down", a), ("up", b)], [("up", b), ("down", a)]):
        with pytest.raises(RuntimeError) as e:
            list(stage._labels((c, ends)))
        assert str(e.value) == ("deduplication: the duplicate graph did not settle in 16 star rounds (at x.jsonl, "
                                "group 3, record 2); please report it")


# ------------------------------------------------------------------- similarity to the kept record and removals


def test_a_removed_records_signature_goes_to_its_one_kept_record():
    """A node labelled with one kept record (asked for twice: once) sends it its signature; unlabelled, nothing; two
    kept records fail naming the node."""
    sig = _sigs()[15].tobytes()
    node, kept, other = _node(5), _node(1), _node(2, "k.jsonl", 4)
    assert list(stage._kept_signature((node, {SIGS: iter([sig]), "kept": [kept, kept]}))) == [(kept, (node, sig))]
    assert list(stage._kept_signature((node, {SIGS: [sig], "kept": []}))) == []
    with pytest.raises(RuntimeError) as e:
        list(stage._kept_signature((_node(6, "r.jsonl", 2), {SIGS: [sig], "kept": [kept, other]})))
    assert str(e.value) == ("deduplication: r.jsonl, group 2, record 6 is labelled with 2 kept records; please "
                            "report it")


def test_similarity_to_the_kept_record_is_against_its_own_signature():
    """Each removed member's similarity to the kept record's own signature (15 and 18 of 20 values: 0.75, 0.9);
    without the kept record's signature, an error naming the step and the record."""
    sig = _sigs()
    kept = _node(1)
    members = [(_node(4), sig[15].tobytes()), (kept, sig[20].tobytes()), (_node(6), sig[18].tobytes())]
    assert list(stage._similarity_to_kept((kept, iter(members)))) == [(_node(4), (kept, 0.75)),
                                                                     (_node(6), (kept, 0.9))]
    with pytest.raises(RuntimeError, match="^deduplication: similarity to the kept record: the signature of "
                                           "d/a.jsonl, group 0, record 9 is missing"):
        list(stage._similarity_to_kept((_node(9), members)))


def test_a_family_heads_removals():
    """A head that lost to a near duplicate is removed with its copies (near, that kept record, its similarity);
    else only its copies are, exact duplicates of it (similarity 1.0)."""
    head, kept, copies = _node(3), _node(1), [_node(7), _node(9)]
    assert list(stage._removals((head, {NEAR: iter([(kept, 0.85)]), COPIES: iter(copies)}))) == [
        (head, NEAR, kept, 0.85), (copies[0], NEAR, kept, 0.85), (copies[1], NEAR, kept, 0.85)]
    assert list(stage._removals((head, {NEAR: [], COPIES: copies}))) == [
        (copies[0], EXACT, head, 1.0), (copies[1], EXACT, head, 1.0)]
    assert list(stage._removals((head, {NEAR: [(kept, 0.9)], COPIES: []}))) == [(head, NEAR, kept, 0.9)]
    assert list(stage._removals((head, {NEAR: [], COPIES: []}))) == []


# ------------------------------------------------------------------- the listing's and the index's lines

# d/a.jsonl read as two units: groups [0, 2) of 10 lines, [2, 4) of 7.
UNITS = [(2, 4, 7), (0, 2, 10)]


def test_own_lines_number_each_removed_record_in_its_file_and_key_it_by_the_kept_records_file():
    """A removed record's line counts from its unit's base (group 2: after the first unit's 10 lines; 1-based), or
    is its 0-based row in a .parquet file; each keyed by the kept record's file, where the kept line is found."""
    removed = [(_node(3, slice_index=2), NEAR, _node(0, "k.jsonl", 1), 0.9),
               (_node(4, slice_index=1), EXACT, _node(1), 1.0)]
    out = list(stage._own_lines(("d/a.jsonl", {"units": iter(UNITS), "removed": iter(removed)})))
    assert out == [("k.jsonl", (removed[0][0], 14, NEAR, removed[0][2], 0.9)),
                   ("d/a.jsonl", (removed[1][0], 5, EXACT, removed[1][2], 1.0))]
    # A .parquet file numbers its rows from 0; a file of one unit has no units' lines.
    parquet = node_of(_group("p.parquet"), "", 6)
    assert list(stage._own_lines(("p.parquet", {"units": [], "removed": [(parquet, EXACT, parquet, 1.0)]}))) == [
        ("p.parquet", (parquet, 6, EXACT, parquet, 1.0))]


def test_kept_lines_name_the_kept_records_line_or_the_earlier_jobs_own():
    """The kept record's line from its own file's units; an earlier job's record keeps the line its index holds
    (and names the index); each listing line keyed by the removed record's file."""
    removed, kept = _node(0, "b.jsonl"), _node(3, slice_index=2, member="m.txt")
    old = earlier_node("d/a.jsonl", "", 42)
    joined = {"units": UNITS, "removed": [(removed, 8, NEAR, kept, 0.87654), (_node(1, "c.jsonl"), 2, EXACT, old, 1.0)]}
    out = list(stage._kept_lines(("d/a.jsonl", joined), "/old/index"))
    assert out == [
        ("b.jsonl", (removed, {"file": "b.jsonl", "line": 8, "kind": NEAR, "similarity": 0.8765,
                               "kept": {"file": "d/a.jsonl", "line": 14, "member": "m.txt"}})),
        ("c.jsonl", (_node(1, "c.jsonl"), {"file": "c.jsonl", "line": 2, "kind": EXACT, "similarity": 1.0,
                                           "kept": {"file": "d/a.jsonl", "line": 42, "index": "/old/index"}}))]
    out = list(stage._kept_lines(("d/a.jsonl", {"units": [], "removed": [(removed, 8, EXACT, _node(5), 1.0)]}), None))
    assert out == [("b.jsonl", (removed, {"file": "b.jsonl", "line": 8, "kind": EXACT, "similarity": 1.0,
                                          "kept": {"file": "d/a.jsonl", "line": 6}}))]


def test_an_index_line_is_a_kept_record_of_its_file_keyed_by_its_packing_group():
    """_line_of: (relpath, group) -> (member, file line, exact key, band keys, signature) of each kept record."""
    kept = [(_node(3, slice_index=2, member="m"), b"e1", b"b1", b"s1"), (_node(0, slice_index=0), b"e2", None, None)]
    out = list(stage._line_of(("d/a.jsonl", {"units": UNITS, "kept": iter(kept)})))
    assert out == [(("d/a.jsonl", 2), ("m", 14, b"e1", b"b1", b"s1")), (("d/a.jsonl", 0), ("", 1, b"e2", None, None))]


def test_a_survivor_is_a_record_of_this_job_no_duplicate_removed():
    """(relpath, (node, exact key, band keys, signature or None)) for this job's records not removed; none for a
    removed one or an earlier job's."""
    node = _node(2, "s.jsonl")
    assert list(stage._survivor((node, {"print": iter([(b"k", b"b")]), SIGS: iter([b"s"]), "removed": []}))) == [
        ("s.jsonl", (node, b"k", b"b", b"s"))]
    assert list(stage._survivor((node, {"print": [(b"k", None)], SIGS: [], "removed": []}))) == [
        ("s.jsonl", (node, b"k", None, None))]
    assert list(stage._survivor((node, {"print": [(b"k", None)], SIGS: [], "removed": iter([None])}))) == []
    old = earlier_node("s.jsonl", "", 2)
    assert list(stage._survivor((old, {"print": [(b"k", None)], SIGS: [], "removed": []}))) == []


def test_an_earlier_jobs_part_reads_as_keys_and_tagged_signatures(tmp_path):
    """ReadDedupIndex's reading of one part: its keys on the main output, its signatures tagged SIGS."""
    from transforms.io.dedup_index import index_parts, write_index_part

    bands = np.array([1, -2], dtype=np.int64).tobytes()
    sig = np.array([3, 4], dtype=np.uint16).tobytes()
    write_index_part((("o.jsonl", 0), [("", 9, bytes(16), bands, sig)]), str(tmp_path))
    (path,) = index_parts(str(tmp_path))
    node = earlier_node("o.jsonl", "", 9)
    assert _tagged(stage._earlier_records(path)) == [(bytes(16), (node, bands)), (SIGS, (node, sig))]


def test_the_summary_counts_groups_over_the_size_bins():
    """The summary for data_params.json: the settings, the records listed, the groups (summed over the size bins)
    and the bins."""
    assert stage._summary(7, {"2": 3, "3-4": 1}, {"kind": "exact"}) == {
        "settings": {"kind": "exact"}, "listed": 7, "groups": 4, "sizes": {"2": 3, "3-4": 1}}
    assert stage._summary(0, {}, {}) == {"settings": {}, "listed": 0, "groups": 0, "sizes": {}}
