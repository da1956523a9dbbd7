"""Deduplication's pure core (transforms/core/dedup.py): exact values against independent computations in plain
Python integers, the S-curve of the default settings, and connected components against a union-find."""

from __future__ import annotations

import random

import numpy as np
import pytest

from transforms.core import dedup
from transforms.core.dedup import (EMPTY, DedupConfig, band_keys, components, detection_probability, exact_key,
                                   large_star, shingle_hashes, signature, similarity, sketch_keys, small_star,
                                   star_round, survivor, union_find)

M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _shingles_by_hand(ids: list[int], n: int) -> list[int]:
    n = min(n, len(ids))
    out = set()
    for s in range(len(ids) - n + 1):
        h = n
        for j in range(n):
            h = _mix64(h ^ ids[s + j])
        out.add(h & 0xFFFFFFFF)
    return sorted(out)


def test_shingles_are_the_hashes_of_every_run_of_ids():
    ids = [15496, 995, 11, 612, 318, 257, 1332, 13, 15496, 995, 11]
    assert shingle_hashes(np.array(ids), 3).tolist() == _shingles_by_hand(ids, 3)
    # "Hello world," twice: the repeated run is one shingle.
    assert len(shingle_hashes(np.array(ids), 3)) == len(ids) - 3 + 1 - 1


def test_a_record_shorter_than_a_shingle_is_one_shingle_and_an_empty_one_none():
    assert shingle_hashes(np.array([7, 8]), 5).tolist() == _shingles_by_hand([7, 8], 5)
    assert len(shingle_hashes(np.array([7, 8]), 5)) == 1
    assert shingle_hashes(np.array([], dtype=np.int32), 5).tolist() == []
    # The run's order matters, and so does its length (a 2-id record is not the 2 ids inside a 3-id one).
    assert shingle_hashes(np.array([8, 7]), 5).tolist() != shingle_hashes(np.array([7, 8]), 5).tolist()


def _signature_by_hand(shingles: list[int], bins: int, key: int, densify: int) -> list[int]:
    """One-permutation hashing in plain integers: each shingle to bin (h >> 32) * bins >> 32 with value h's low
    32 bits, the least per bin; an empty bin takes the value of the first filled bin of its sequence."""
    least: dict = {}
    for x in shingles:
        h = _mix64(x ^ key)
        b = ((h >> 32) * bins) >> 32
        least[b] = min(least.get(b, 1 << 32), h & 0xFFFFFFFF)
    out = []
    for i in range(bins):
        attempt, j = 0, i
        while j not in least:
            attempt += 1
            mixed = _mix64(densify ^ ((i << 20) & M64) ^ attempt)
            j = ((mixed >> 32) * bins) >> 32
        out.append(least[j])
    return out


def test_the_signature_is_one_permutation_hashing_densified():
    bins, key, densify = sketch_keys(64, seed=3)
    assert bins == 64 and sketch_keys(64, seed=3) == (bins, key, densify) != sketch_keys(64, seed=4)
    rng = np.random.default_rng(0)
    for n in (1, 5, 40, 63, 500, 5000):  # from nearly every bin empty to none
        shingles = rng.integers(0, 1 << 32, size=n, dtype=np.uint64)
        assert signature(shingles, bins, key, densify).tolist() == _signature_by_hand(
            shingles.tolist(), bins, key, densify), n


def test_a_record_without_shingles_is_like_nothing():
    perms = sketch_keys(8, 0)
    empty = signature(np.zeros(0, dtype=np.uint64), *perms)
    assert empty.tolist() == [int(EMPTY)] * 8
    assert similarity(empty, empty) == 0.0
    some = signature(np.array([1, 2, 3], dtype=np.uint64), *perms)
    assert similarity(some, some) == 1.0 and similarity(some, empty) == 0.0


def test_similarity_is_the_share_of_equal_values():
    assert similarity(np.array([1, 2, 3, 4], np.uint32), np.array([1, 9, 3, 9], np.uint32)) == 0.5


def test_band_keys_depend_on_the_band_and_its_values():
    sig = np.arange(12, dtype=np.uint32)
    keys = band_keys(sig, 3, 4)
    assert len(set(keys.tolist())) == 3
    other = sig.copy()
    other[5] = 99  # band 1 changes, bands 0 and 2 do not
    assert (band_keys(other, 3, 4) == keys).tolist() == [True, False, True]
    # The same values in two bands are two keys: a candidate needs the same band.
    same = np.array([5, 6, 5, 6], dtype=np.uint32)
    k = band_keys(same, 2, 2)
    assert k[0] != k[1]
    # By hand: the values' weighted sum modulo 2^64, the band's number mixed in.
    weights = [int(w) for w in dedup._BAND_MULTIPLIERS[:2]]
    assert all(w % 2 == 1 for w in weights)
    assert int(k[1]) == _mix64(((5 * weights[0] + 6 * weights[1]) & M64) ^ _mix64((1 + 0x9E3779B97F4A7C15) & M64))
    # Only the first bands * rows values make bands: the rest of a signature is for the similarity.
    assert band_keys(np.arange(20, dtype=np.uint32), 3, 4).tolist() == keys.tolist()


def test_exact_keys_see_where_the_keys_of_a_record_divide():
    assert exact_key([np.array([1, 2]), np.array([3])]) != exact_key([np.array([1]), np.array([2, 3])])
    assert exact_key([np.array([1, 2, 3])]) == exact_key([np.array([1, 2, 3], dtype=np.int64)])
    assert exact_key([np.array([1, 2, 3])], seed=0) != exact_key([np.array([1, 2, 3])], seed=1)


def test_the_default_s_curve_finds_near_copies_and_leaves_near_misses():
    """Issue #46's targets for the defaults (20 bands of 8 of 400 values, verified at 0.8): a pair at Jaccard 0.85
    found with probability at least 0.99, one at 0.6 at most 0.01 (with the verification, far less)."""
    config = DedupConfig("near")
    assert (config.bands, config.rows, config.values) == (20, 8, 400)
    assert detection_probability(0.85, config) >= 0.99
    assert detection_probability(0.6, config) <= 0.01
    assert detection_probability(1.0, config) == 1.0
    # 128 values (16 x 8) would verify a pair at 0.85 only 94% of the time: the estimate's spread at k = 128.
    assert detection_probability(0.85, DedupConfig("near", bands=16, rows=8, values=128)) < 0.95
    # LSH alone, without the verification, would need 84 bands of 18 for both targets.
    assert 1 - (1 - 0.85 ** 8) ** 20 > 0.99 and 1 - (1 - 0.6 ** 8) ** 20 > 0.2


def _pair_at(jaccard: float, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of 32-bit values whose Jaccard is exactly `jaccard` (shared / union)."""
    union = size
    shared = round(jaccard * union)
    values = rng.choice(1 << 32, size=union, replace=False).astype(np.uint64)
    only = union - shared
    a = np.concatenate([values[:shared], values[shared:shared + only // 2]])
    b = np.concatenate([values[:shared], values[shared + only // 2:]])
    return np.unique(a), np.unique(b)


@pytest.mark.parametrize("jaccard, low, high", [(0.9, 0.99, 1.0), (0.85, 0.97, 1.0), (0.6, 0.0, 0.01),
                                                (0.5, 0.0, 0.0)])
def test_measured_detection_follows_the_curve(jaccard, low, high):
    """400 pairs at an exact Jaccard, each detected when it shares a band key and its estimate reaches the
    threshold; seeded, so the share is fixed (within the curve's binomial spread of 400 draws)."""
    config = DedupConfig("near")
    rng = np.random.default_rng(int(jaccard * 100))
    found = 0
    for trial in range(400):
        perms = sketch_keys(config.hashes, seed=trial)
        x, y = _pair_at(jaccard, 400, rng)
        sx, sy = signature(x, *perms), signature(y, *perms)
        candidate = bool(np.any(band_keys(sx, config.bands, config.rows) == band_keys(sy, config.bands, config.rows)))
        found += candidate and similarity(sx, sy) >= config.threshold
    assert low <= found / 400 <= high, found


def test_star_steps_at_one_node():
    # Large-star at 5 with neighbours 2, 7, 9: the larger ones (7, 9) to the smallest of them all (2).
    assert large_star(5, [2, 7, 9]) == [(7, 2), (9, 2)]
    # Small-star at 5 with neighbours 3, 4, 8: 5 and the smaller ones (3, 4) to the smallest (3).
    assert small_star(5, [3, 4, 8]) == [(4, 3), (5, 3)]
    assert small_star(2, [5, 7]) == []  # no smaller neighbour: nothing to link


def test_components_equal_union_find_on_random_graphs():
    for seed in range(200):
        rng = random.Random(seed)
        nodes = rng.sample(range(10_000), rng.randint(2, 60))
        edges = [tuple(rng.sample(nodes, 2)) for _ in range(rng.randint(1, 80))]
        assert components(edges) == union_find(edges), seed


def test_a_long_chain_converges_to_its_smallest_node():
    rng = random.Random(1)
    labels = rng.sample(range(1_000_000), 500)  # a path A~B~C... of 500 records in no order of identity
    edges = list(zip(labels, labels[1:]))
    got = components(edges)
    assert set(got.values()) == {min(labels)} and len(got) == 500
    # The rounds leave a star: every edge links a node to the smallest.
    fixed = sorted({(max(u, v), min(u, v)) for u, v in edges})
    while (after := star_round(fixed)) != fixed:
        fixed = after
    assert {m for _, m in fixed} == {min(labels)}


def test_the_survivor_is_the_smallest_identity():
    assert survivor([("b.jsonl", 1), ("a.jsonl", 9), ("a.jsonl", 3)]) == ("a.jsonl", 3)
    assert survivor([]) is None


@pytest.mark.parametrize("changes, message", [
    ({"kind": "fuzzy"}, "exact or near"), ({"threshold": 0}, "(0, 1]"), ({"rows": 0}, "at least 1")])
def test_settings_are_checked(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        DedupConfig(**{"kind": "near", **changes})


M64_ = (1 << 64) - 1
B = 0x9E3779B97F4A7C15


def _char_shingles_by_hand(ids: list[int], width: int, chars: list[int]) -> list[int]:
    """From every token on, the shortest run of whole tokens holding `width` characters (the whole record when
    none does), hashed as a polynomial of the mixed ids, its length mixed in."""
    runs = []
    for i in range(len(ids)):
        held = 0
        for j in range(i, len(ids)):
            held += chars[ids[j]]
            if held >= width:
                runs.append((i, j + 1))
                break
    out = set()
    for i, j in runs or [(0, len(ids))]:
        h = 0
        for t in range(i, j):
            h = (h * B + _mix64(ids[t] + 1)) & M64_
        out.add(_mix64(h ^ (j - i)) & 0xFFFFFFFF)
    return sorted(out)


def test_character_shingles_are_runs_of_whole_tokens_holding_the_width():
    chars = np.array([0, 2, 1, 3, 0, 1, 0, 1, 0, 4])  # per id: 0 for a piece of a character
    rng = np.random.default_rng(1)
    for _ in range(300):
        ids = rng.integers(0, 10, size=int(rng.integers(1, 50)))
        width = int(rng.integers(1, 12))
        assert shingle_hashes(ids, width, chars).tolist() == _char_shingles_by_hand(ids.tolist(), width, chars)
    # Three tokens of one character each hold a 3-character shingle once: the run of all three.
    assert len(shingle_hashes(np.array([2, 5, 7]), 3, chars)) == 1
    # Too short for a shingle: one of all its ids, whose order and length count.
    assert shingle_hashes(np.array([2, 5]), 9, chars).tolist() == _char_shingles_by_hand([2, 5], 9, chars)
    assert shingle_hashes(np.array([5, 2]), 9, chars).tolist() != shingle_hashes(np.array([2, 5]), 9, chars).tolist()
    assert shingle_hashes(np.array([], dtype=np.int64), 6, chars).tolist() == []


def test_token_chars_counts_the_bytes_that_start_a_character():
    from transforms.core.dedup import token_chars

    pieces = [b"", b" the", "é".encode(), "日本".encode(), "日".encode()[:2], "日".encode()[2:], b"<|endoftext|>"]
    assert token_chars(pieces).tolist() == [0, 4, 1, 2, 1, 0, 13]


def test_character_shingles_cover_as_much_text_in_every_script():
    """With GPT-2's pieces an English token holds several characters and a Tamil one less than one: two unrelated
    Tamil sentences share a third of their runs of 5 ids (pieces of the same letters), and almost none of their
    6-character shingles."""
    from tests.test_dedup_job import _tokenizer
    from transforms.core.dedup import token_chars
    from transforms.core.detok import token_pieces
    from transforms.core.tokenizer import tokenize_documents

    tok = _tokenizer()
    chars = token_chars(token_pieces(tok))
    english, tamil, other = tokenize_documents(tok, [
        "the weather was fine and the streets were full",
        "தமிழ் ஒரு திராவிட மொழி ஆகும் இது இந்தியாவில் பேசப்படுகிறது இலங்கையிலும் சிங்கப்பூரிலும் அலுவல் மொழியாக உள்ளது",
        "சென்னை நகரம் வங்காள விரிகுடாவின் கரையில் அமைந்துள்ளது இது ஒரு பெரிய துறைமுக நகரம் ஆகும் மக்கள் தொகை அதிகம்"])
    per_token = [chars[np.asarray(ids)].sum() / len(ids) for ids in (english, tamil)]
    assert per_token[0] > 3 and per_token[1] < 1  # characters per token

    def jaccard(width, table):
        a, b = (set(shingle_hashes(np.asarray(ids), width, table).tolist()) for ids in (tamil, other))
        return len(a & b) / len(a | b)

    assert jaccard(5, None) > 0.3 and jaccard(6, chars) < 0.05


def test_the_signature_of_repeated_shingles_is_that_of_the_distinct_ones():
    from transforms.core.dedup import DedupConfig, fingerprint, token_chars

    chars = token_chars([b"a", b"bc", b"", b"def"] * 3)
    ids = np.array([0, 1, 3, 0, 1, 3, 0, 1, 3, 5, 0, 1])
    for table in (None, chars):
        repeats = shingle_hashes(ids, 3, table, distinct=False)
        distinct = shingle_hashes(ids, 3, table)
        assert len(repeats) > len(distinct) and np.unique(repeats).tolist() == distinct.tolist()
    perms = sketch_keys(300, 0)
    config = DedupConfig("near", shingle=3)
    _, sig = fingerprint((ids,), config, perms, chars)
    assert sig.tolist() == signature(shingle_hashes(ids, 3, chars), *perms).tolist()


def test_line_numbering_counts_from_each_units_base_and_names_parquet_rows():
    from transforms.core.dedup import line_numbering

    # Units [0, 2) of 10 lines and [2, 3) of 7: group 2's indices count from line 11.
    line = line_numbering("a.jsonl", [(2, 3, 7), (0, 2, 10)])
    assert [line(0, 0), line(1, 4), line(2, 0), line(5, 1)] == [1, 5, 11, 12]
    assert line_numbering("a.jsonl", [])(3, 7) == 8  # read as one unit: the index is the file's
    assert line_numbering("x.parquet", [])(3, 7) == 7  # a 0-based row, as the dead letters name it
    with pytest.raises(ValueError, match="missing"):
        line_numbering("a.jsonl", [(2, 3, 7)])  # a unit's line count lost: never a wrong number
