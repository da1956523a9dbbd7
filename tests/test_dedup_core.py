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


def test_sketch_keys_are_the_first_two_draws_of_the_seeds_own_generator():
    """The keys decide the signatures an index (--dedup_index) stores for later jobs: their draw is a format.
    Two full-range 64-bit draws of numpy's default generator seeded with derive_seed(seed, "dedup:minhash")."""
    from transforms.core.seeds import derive_seed

    for seed in (0, 3, 12345):
        raw = np.random.default_rng(derive_seed(seed, "dedup:minhash")).bit_generator.random_raw(2)
        assert sketch_keys(300, seed) == (300, int(raw[0]), int(raw[1]))


def test_a_record_without_shingles_is_like_nothing():
    perms = sketch_keys(8, 0)
    empty = signature(np.zeros(0, dtype=np.uint64), *perms)
    assert empty.tolist() == [int(EMPTY)] * 8
    assert similarity(empty, empty) == 0.0
    some = signature(np.array([1, 2, 3], dtype=np.uint64), *perms)
    assert similarity(some, some) == 1.0 and similarity(some, empty) == 0.0


def test_similarity_is_the_share_of_equal_values():
    assert similarity(np.array([1, 2, 3, 4], np.uint32), np.array([1, 9, 3, 9], np.uint32)) == 0.5
    # A bin's least value may be 2^32 - 1 (EMPTY's) in a record with shingles: it is no match for a record without.
    some = np.array([int(EMPTY), 5, int(EMPTY), 6], np.uint32)
    nothing = np.full(4, EMPTY, dtype=np.uint32)
    assert similarity(some, nothing) == 0.0 and similarity(nothing, some) == 0.0
    assert similarity(some, np.array([int(EMPTY), 5, 7, 7], np.uint32)) == 0.5


def test_the_mixer_of_a_scalar_is_that_of_an_array():
    for x in (0, 1, 12345, 2 ** 63 + 5, 2 ** 64 - 1):
        assert int(dedup._mix64(np.uint64(x))) == _mix64(x) == int(dedup._mix64(np.array([x], np.uint64))[0])
        assert dedup._mix64(np.uint64(x)).shape == ()


def test_the_signature_takes_shingle_hashes_of_any_integer_dtype():
    perms = sketch_keys(32, 5)
    hashes = [3, 70000, 2 ** 32 - 1, 12345678]
    expected = signature(np.array(hashes, dtype=np.uint64), *perms).tolist()
    assert expected == _signature_by_hand(hashes, *perms)
    for dtype in (np.int64, np.uint32):
        assert signature(np.array(hashes, dtype=dtype), *perms).tolist() == expected
    assert signature(hashes, *perms).tolist() == expected


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


def test_exact_keys_are_keyed_blake2b_of_lengths_and_int32_ids():
    """The key is stored in an index (--dedup_index) that later jobs compare with: its bytes are a format.
    BLAKE2b-128 keyed by SHA-256("dedup:<seed>"), over each array's length (8 bytes little-endian) then its ids
    (4 bytes each, little-endian), whatever the arrays' dtype."""
    import hashlib

    def by_hand(arrays, seed):
        h = hashlib.blake2b(digest_size=16, key=hashlib.sha256(f"dedup:{seed}".encode()).digest())
        for ids in arrays:
            h.update(len(ids).to_bytes(8, "little") + b"".join(int(i).to_bytes(4, "little", signed=True)
                                                               for i in ids))
        return h.digest()

    for arrays, seed in [([[1, 2, 3]], 0), ([[50256, 0], [7]], 3), ([[]], 0), ([], 5), ([[2 ** 31 - 1, 70000]], 1)]:
        for dtype in (np.int32, np.int64, np.uint32):
            key = exact_key([np.array(a, dtype=dtype) for a in arrays], seed)
            assert len(key) == 16 and key == by_hand(arrays, seed), (arrays, seed, dtype)
    assert exact_key([np.array([1, 2, 3])]) == by_hand([[1, 2, 3]], 0)  # the default seed is DedupConfig's


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


def test_detection_probability_is_the_band_curve_times_the_binomial_tail_by_hand():
    # A verification value (16 bits of a signature value) agrees with probability p = J + (1 - J) / 2^16.
    p = 0.5 + 0.5 / 65536
    q = 1 - p
    # 2 bands of 1 row, 2 values, threshold 0.5, Jaccard 0.5: a candidate unless both bands differ (1 - 1/4), and
    # verified when at least 1 of the 2 values agrees (1 - q^2): about 9/16.
    config = DedupConfig("near", threshold=0.5, bands=2, rows=1, values=2)
    assert detection_probability(0.5, config) == pytest.approx(0.75 * (1 - q * q), abs=1e-15)
    assert abs(detection_probability(0.5, config) - 0.5625) < 1e-5
    # 1 band of 2 rows of 5 values, threshold 0.6 at Jaccard 0.5: 0.25 a candidate, then 3 or more of 5 values
    # (an estimate of exactly the threshold is a duplicate): about (10 + 5 + 1) / 32.
    config = DedupConfig("near", threshold=0.6, bands=1, rows=2, values=5)
    tail = 10 * p**3 * q**2 + 5 * p**4 * q + p**5
    assert detection_probability(0.5, config) == pytest.approx(0.25 * tail, abs=1e-15)
    assert abs(detection_probability(0.5, config) - 0.25 * 16 / 32) < 1e-5
    assert detection_probability(0.0, config) == 0.0


def test_verification_values_are_the_low_16_bits_and_keep_a_record_without_shingles_like_nothing():
    from transforms.core.dedup import verification_values

    sig = np.array([0x12345678, 0xFFFF0001, 0x0000FFFF, 0xABCD0000], dtype=np.uint32)
    values = verification_values(sig)
    assert values.dtype == np.uint16 and values.tolist() == [0x5678, 0x0001, 0xFFFF, 0x0000]
    empty = verification_values(np.full(8, EMPTY, dtype=np.uint32))
    assert empty.tolist() == [0xFFFF] * 8
    some = verification_values(np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.uint32))
    assert similarity(empty, empty) == 0.0 and similarity(some, empty) == 0.0 and similarity(some, some) == 1.0
    # Values that differ only above the 16 bits agree: chance agreements, 1 in 65,536 for unrelated values.
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 1 << 32, size=2_000_000, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    agree = int(np.count_nonzero(verification_values(a) == verification_values(b)))
    assert 10 <= agree <= 55, agree  # 2,000,000 / 65,536 = 30.5 expected; 4 standard deviations either side


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
    threshold (over the verification values, as the job compares them); seeded, so the share is fixed (within
    the curve's binomial spread of 400 draws)."""
    from transforms.core.dedup import verification_values

    config = DedupConfig("near")
    rng = np.random.default_rng(int(jaccard * 100))
    found = 0
    for trial in range(400):
        perms = sketch_keys(config.hashes, seed=trial)
        x, y = _pair_at(jaccard, 400, rng)
        sx, sy = signature(x, *perms), signature(y, *perms)
        candidate = bool(np.any(band_keys(sx, config.bands, config.rows) == band_keys(sy, config.bands, config.rows)))
        found += candidate and similarity(verification_values(sx), verification_values(sy)) >= config.threshold
    assert low <= found / 400 <= high, found


def test_star_steps_at_one_node():
    # Large-star at 5 with neighbours 2, 7, 9: the larger ones (7, 9) to the smallest of them all (2).
    assert large_star(5, [2, 7, 9]) == [(7, 2), (9, 2)]
    # Small-star at 5 with neighbours 3, 4, 8: 5 and the smaller ones (3, 4) to the smallest (3).
    assert small_star(5, [3, 4, 8]) == [(4, 3), (5, 3)]
    assert small_star(2, [5, 7]) == []  # no smaller neighbour: nothing to link
    # A node among its own neighbours is not larger than itself: no self-loop comes of it.
    assert large_star(5, [5, 7]) == [(7, 5)] and large_star(5, [2, 5, 7]) == [(7, 2)]
    assert small_star(5, [5, 3]) == [(5, 3)]


def test_a_self_loop_links_nothing_in_a_round():
    edges = [(5, 2), (7, 5), (9, 8)]
    assert star_round([(4, 4), *edges, (6, 6)]) == star_round(edges) == [(5, 2), (7, 2), (9, 8)]
    assert components([(4, 4), *edges]) == union_find(edges) == {2: 2, 5: 2, 7: 2, 8: 8, 9: 8}


def test_components_that_do_not_settle_fail_naming_the_rounds(monkeypatch):
    rng = random.Random(5)
    labels = rng.sample(range(10_000), 200)
    edges = list(zip(labels, labels[1:]))
    with pytest.raises(RuntimeError) as failed:
        components(edges, max_rounds=1)
    assert str(failed.value) == "connected components did not converge in 1 rounds"
    assert set(components(edges, max_rounds=12).values()) == {min(labels)}
    # A round that never settles (a bug) is given 64 rounds by default, then named.
    rounds = []
    monkeypatch.setattr(dedup, "star_round", lambda e: rounds.append(1) or [(len(rounds) + 1, 0)])
    with pytest.raises(RuntimeError, match="did not converge in 64 rounds"):
        components([(1, 0)])
    assert len(rounds) == 64


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


@pytest.mark.parametrize("changes, message", [
    ({"kind": "Near"}, "dedup must be exact or near, not 'Near'"),
    ({"threshold": 1.01}, "dedup_threshold must lie in (0, 1], not 1.01"),
    ({"threshold": -0.5}, "dedup_threshold must lie in (0, 1], not -0.5"),
    ({"shingle": 0}, "dedup shingle, bands and rows must be at least 1"),
    ({"bands": 0}, "dedup shingle, bands and rows must be at least 1"),
    ({"rows": -1}, "dedup shingle, bands and rows must be at least 1"),
    ({"bands": 4, "rows": 6, "values": 20}, "dedup bands x rows (4 x 6) exceed the signature's 20 values")])
def test_settings_are_refused_just_past_their_bounds_by_name(changes, message):
    with pytest.raises(ValueError) as refused:
        DedupConfig(**{"kind": "near", **changes})
    assert str(refused.value) == message


def test_settings_at_their_bounds_are_accepted():
    one = DedupConfig("near", threshold=1, shingle=1, bands=1, rows=1, values=1)  # identical shingles only
    assert (one.threshold, one.shingle, one.bands, one.rows, one.hashes) == (1, 1, 1, 1, 1)
    assert DedupConfig("near", bands=4, rows=5, values=20).hashes == 20  # the bands may use every value
    assert DedupConfig("exact", threshold=0.001).kind == "exact"


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
            h = (h * B + _mix64((ids[t] + 1) & M64_)) & M64_
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
    # One shingle even when repeats are kept (one per shingle), and no shingle as an array of the hashes' dtype.
    assert len(shingle_hashes(np.array([2, 5]), 9, chars, distinct=False)) == 1
    assert len(shingle_hashes(np.array([7]), 4, None, distinct=False)) == 1
    for table in (None, chars):
        assert shingle_hashes(np.array([], dtype=np.int32), 6, table).dtype == np.uint64
        assert shingle_hashes(np.array([2, 5, 7], dtype=np.int32), 2, table).dtype == np.uint64


def test_long_records_shingle_as_short_ones_do_from_a_cold_table_of_powers(monkeypatch):
    """The polynomial hash's powers (base^0 .., and of its inverse) are kept in a table grown on demand: a record
    longer than the table, and the first record of a process, hash as the by-hand runs do."""
    monkeypatch.setattr(dedup, "_POWERS", {})
    for base in (dedup._BASE, dedup._BASE_INVERSE):
        for n in (1, 5, 5000, 3, 9000):  # a cold table, a prefix, a grown one, a prefix of it, grown again
            assert dedup._powers(base, n).tolist() == [pow(int(base), i, 1 << 64) for i in range(n)], n
    assert int(dedup._BASE) * int(dedup._BASE_INVERSE) % (1 << 64) == 1
    monkeypatch.setattr(dedup, "_POWERS", {})
    chars = np.array([1, 2, 0, 3, 1])
    rng = np.random.default_rng(4)
    for size in (7, 6000, 20000):
        ids = rng.integers(0, 5, size=size)
        assert shingle_hashes(ids, 5, chars).tolist() == _char_shingles_by_hand(ids.tolist(), 5, chars), size


def test_ids_of_any_size_hash_as_by_hand_from_a_cold_table_of_mixed_ids(monkeypatch):
    """Each id's mixed value (mix64(id + 1)) comes from a table grown to the largest id seen: the first record of a
    process, an id just past the table and one far past it hash as the by-hand runs do."""
    if hasattr(dedup, "_MIXED_IDS"):
        monkeypatch.setattr(dedup, "_MIXED_IDS", [np.zeros(0, dtype=np.uint64)])
    rng = np.random.default_rng(6)
    chars = rng.integers(0, 4, size=400_000)
    for top in (50, 1 << 16, (1 << 16) + 1, 300_001, 1000):  # 300,000: past twice the table before it
        ids = rng.integers(0, top, size=40)
        ids[rng.integers(0, 40)] = top - 1  # the largest id: the table's last entry, or one past it
        assert shingle_hashes(ids, 4, chars).tolist() == _char_shingles_by_hand(ids.tolist(), 4, chars), top


def test_negative_ids_hash_as_their_64_bit_wrap():
    """No tokenizer gives a negative id, but the ids are int64: one hashes as id + 1 modulo 2^64 (and finds its
    characters from the table's end, as numpy indexes), the same polynomial as any other."""
    chars = np.array([1, 2, 0, 3, 1])
    for ids in ([-1, 2, -5, 3, 0, -2], [-3], [4, -4, 1, 1, -1, 2, 3, -2]):
        assert shingle_hashes(np.array(ids), 3, chars).tolist() == _char_shingles_by_hand(ids, 3, chars.tolist()), ids


def test_token_chars_counts_the_bytes_that_start_a_character():
    from transforms.core.dedup import token_chars

    pieces = [b"", b" the", "é".encode(), "日本".encode(), "日".encode()[:2], "日".encode()[2:], b"<|endoftext|>"]
    chars = token_chars(pieces)
    assert chars.tolist() == [0, 4, 1, 2, 1, 0, 13] and chars.dtype.kind == "i"  # counts, to index and sum


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


def test_a_fingerprint_is_the_exact_key_under_the_seed_and_the_signature_of_all_its_arrays():
    from transforms.core.dedup import fingerprint

    prompt, completion = np.array([5, 6, 7, 8], dtype=np.int32), np.array([9, 10, 11], dtype=np.int32)
    exact = DedupConfig("exact", seed=7)
    assert fingerprint((prompt, completion), exact, None) == (exact_key([prompt, completion], 7), None)
    near = DedupConfig("near", shingle=3, seed=7)
    perms = sketch_keys(near.hashes, near.seed)
    key, sig = fingerprint((prompt, completion), near, perms)
    assert key == exact_key([prompt, completion], 7) != exact_key([prompt, completion], 0)
    # The shingles run across the arrays, one after the other: a prompt's end and its completion's start.
    joined = shingle_hashes(np.arange(5, 12), 3)
    assert sig.tolist() == signature(joined, *perms).tolist() == _signature_by_hand(joined.tolist(), *perms)
    assert fingerprint((prompt,), near, perms)[1].tolist() == signature(shingle_hashes(prompt, 3), *perms).tolist()


def test_line_numbering_counts_from_each_units_base_and_names_parquet_rows():
    from transforms.core.dedup import line_numbering

    # Units [0, 2) of 10 lines and [2, 3) of 7: group 2's indices count from line 11.
    line = line_numbering("a.jsonl", [(2, 3, 7), (0, 2, 10)])
    assert [line(0, 0), line(1, 4), line(2, 0), line(5, 1)] == [1, 5, 11, 12]
    assert line_numbering("a.jsonl", [])(3, 7) == 8  # read as one unit: the index is the file's
    assert line_numbering("x.parquet", [])(3, 7) == 7  # a 0-based row, as the dead letters name it
    with pytest.raises(ValueError, match="missing"):
        line_numbering("a.jsonl", [(2, 3, 7)])  # a unit's line count lost: never a wrong number


# ------------------------------------------------------------------- the stage's records, listing and summaries


def _group(relpath: str = "d/a.jsonl", slice_index: int = 0, part=None):
    from transforms.core.records import GroupId

    return GroupId(file_index=4, slice_index=slice_index, source="/in/" + relpath, relpath=relpath, part=part)


def test_a_records_node_is_its_origin_file_group_member_index_and_part():
    from transforms.core.dedup import EARLIER, THIS_JOB, earlier_node, node_of

    node = node_of(_group(slice_index=2), "m.txt", np.int64(5))
    assert node == (THIS_JOB, "d/a.jsonl", 2, "m.txt", 5, -1)
    assert node_of(_group(part=0), "", 3) == (THIS_JOB, "d/a.jsonl", 0, "", 3, 0)  # output 0 is a part, not none
    assert node_of(_group(part=2), "", 3)[5] == 2
    old = earlier_node("d/a.jsonl", "m.txt", np.int64(12))
    assert old == (EARLIER, "d/a.jsonl", 0, "m.txt", 12, -1)
    # Plain ints (numpy's would compare equal but neither JSON nor Beam's deterministic coders take them).
    assert type(node[4]) is int and type(old[4]) is int
    # Nodes compare in file order: the group, then the record; an earlier job's record before any of this job's.
    assert node_of(_group(slice_index=1), "", 99) < node_of(_group(slice_index=2), "", 0)
    assert survivor([node_of(_group("a.jsonl"), "", 0), earlier_node("z.jsonl", "", 99)])[0] == EARLIER


def test_a_records_batch_key_is_its_groups_whatever_the_record():
    from transforms.core.dedup import batch_key_of, earlier_node, node_of

    group = _group(slice_index=3, part=1)
    assert {batch_key_of(node_of(group, m, i)) for m in ("", "x.txt") for i in range(3)} == {("d/a.jsonl", 3, 1)}
    assert batch_key_of(node_of(_group(slice_index=3), "", 0)) == ("d/a.jsonl", 3, -1)
    assert batch_key_of(earlier_node("e.jsonl", "m", 7)) == ("e.jsonl", 0, -1)


def test_a_bucket_is_a_star_at_its_smallest_member():
    from transforms.core.dedup import bucket_edges

    assert bucket_edges([7, 3, 9, 3, 7]) == [(7, 3), (9, 3)]
    assert bucket_edges([4, 4]) == [] and bucket_edges([]) == []
    rng = random.Random(2)
    for _ in range(100):
        nodes = [(1, f"{rng.randrange(5)}.jsonl", 0, "", rng.randrange(30), -1) for _ in range(rng.randint(1, 12))]
        edges = bucket_edges(nodes)
        # One edge per other distinct member, each to the smallest: the bucket is one component of those nodes.
        assert sorted(u for u, _ in edges) == sorted(set(nodes) - {min(nodes)})
        assert {v for _, v in edges} <= {min(nodes)}
        assert set(union_find(edges).values()) <= {min(nodes)}


def test_a_node_is_settled_as_a_root_or_as_a_leaf_of_one_smaller_neighbour():
    from transforms.core.dedup import settled

    assert settled([], []) and settled([], [5, 6])  # a root
    assert settled([1], []) and settled([1, 1], [])  # a leaf (its one edge seen twice is still one neighbour)
    assert not settled([1, 2], [])  # two smaller neighbours: a round to go
    assert not settled([1], [7])  # a smaller and a larger neighbour: not a star yet
    # At the rounds' fixed point every node is settled; before, on a path of 4 or more nodes (not a star: all nodes
    # settled means every edge links a leaf to a root, stars), some node is not.
    def unsettled(edges):
        down, up = {}, {}
        for u, v in edges:
            down.setdefault(u, []).append(v)
            up.setdefault(v, []).append(u)
        return [n for n in set(down) | set(up) if not settled(down.get(n, []), up.get(n, []))]

    rng = random.Random(3)
    for _ in range(30):
        nodes = rng.sample(range(1000), rng.randint(4, 30))
        edges = sorted({(max(u, v), min(u, v)) for u, v in zip(nodes, nodes[1:])})
        assert unsettled(edges)
        while (after := star_round(edges)) != edges:
            edges = after
        assert unsettled(edges) == []


def test_a_listing_line_names_the_removed_record_and_the_one_kept():
    import json

    from transforms.core.dedup import earlier_node, listing_record, node_of

    node = node_of(_group("b.jsonl", 1), "", 4)
    kept = node_of(_group("a.jsonl", 0), "", 2)
    # A record kept in this job names no index, even when the job compares with one.
    for earlier in (None, "/old/index"):
        assert listing_record(node, 15, "near", kept, 3, 0.876543, earlier) == {
            "file": "b.jsonl", "line": 15, "kind": "near", "kept": {"file": "a.jsonl", "line": 3},
            "similarity": 0.8765}
    # Tar members are named on both sides; a record an earlier job kept names that job's index.
    node = node_of(_group("t.tar"), "x/1.txt", 0)
    old = earlier_node("u.tar", "y/2.txt", np.int64(8))
    record = listing_record(node, 1, "exact", old, old[4], 1.0, earlier="/old/index")
    assert record == {"file": "t.tar", "line": 1, "member": "x/1.txt", "kind": "exact",
                      "kept": {"file": "u.tar", "line": 8, "member": "y/2.txt", "index": "/old/index"},
                      "similarity": 1.0}
    assert json.loads(json.dumps(record)) == record


def test_an_index_serves_a_job_of_its_settings_and_a_near_index_an_exact_job_too():
    from transforms.core.dedup import index_problems, index_settings

    near = DedupConfig("near", shingle=9, bands=10, rows=4, values=64, seed=3)
    found = index_settings(near, "tok")
    assert found == {"kind": "near", "seed": 3, "tokenizer": "tok", "shingle": 9, "bands": 10, "rows": 4,
                     "values": 64, "value_bits": 16}
    assert index_settings(DedupConfig("exact", seed=3), "tok") == {"kind": "exact", "seed": 3, "tokenizer": "tok"}
    assert index_problems(found, near, "tok") == []
    assert index_problems({**found, "rows": 5}, near, "tok") == ["its rows is 5, this job's 4"]
    # Exact keys depend on the seed and the tokenizer only: a near index of any LSH settings serves an exact job.
    exact = DedupConfig("exact", seed=3)
    assert index_problems(found, exact, "tok") == []
    older = {k: v for k, v in found.items() if k != "value_bits"}  # an index from before verification values
    assert index_problems({**found, "value_bits": 32}, exact, "tok") == index_problems(older, exact, "tok") == []
    assert index_problems(found, DedupConfig("exact", seed=4), "tok") == ["its seed is 3, this job's 4"]
    assert index_problems(found, exact, "other") == ["its tokenizer is 'tok', this job's 'other'"]
    assert index_problems(index_settings(exact, "tok"), exact, "tok") == []
    # An exact index holds no signatures: it cannot serve a near job.
    assert index_problems(index_settings(exact, "tok"), near, "tok") == [
        "its kind is 'exact', this job's 'near'", "its shingle is None, this job's 9",
        "its bands is None, this job's 10", "its rows is None, this job's 4", "its values is None, this job's 64",
        "its value_bits is None, this job's 16"]
    assert index_problems({}, DedupConfig("exact"), "tok") == [
        "its kind is None, this job's 'exact'", "its seed is None, this job's 0",
        "its tokenizer is None, this job's 'tok'"]


def test_size_buckets_are_powers_of_two():
    from transforms.core.dedup import size_bucket

    def by_hand(size):  # the bin (2^(k-1), 2^k] holding the size, 2 on its own
        if size <= 2:
            return "2"
        k = 2
        while size > 2 ** k:
            k += 1
        return f"{2 ** (k - 1) + 1}-{2 ** k}"

    assert [size_bucket(n) for n in (2, 3, 4, 5, 8, 9, 16, 17)] == ["2", "3-4", "3-4", "5-8", "5-8", "9-16", "9-16",
                                                                   "17-32"]
    assert all(size_bucket(n) == by_hand(n) for n in range(2, 5000))


def _dedup_stats():
    from transforms.core.stats import Stats

    stats = Stats()
    stats.add("dedup.documents.near", 1, "b.jsonl")
    stats.add("dedup.tokens.near", 7, "b.jsonl")
    stats.add("dedup.documents.exact", 1, "b.jsonl")
    stats.add("dedup.tokens.exact", 5, "b.jsonl")
    stats.add("documents_read", 10, "a.jsonl")
    stats.add("dedup.documents.exact", 3, "a.jsonl")
    stats.add("dedup.tokens.exact", 30, "a.jsonl")
    stats.add("documents_read", 4, "c.jsonl")  # a source without duplicates
    return stats


def test_the_dedup_section_counts_each_kind_in_total_and_per_source():
    from transforms.core.dedup import dedup_section

    summary = {"settings": {"kind": "near", "seed": 0}, "listed": 5, "groups": 4,
               "sizes": {"17-32": 1, "2": 2, "9-16": 1, "3-4": 1}}
    section = dedup_section(summary, _dedup_stats())
    assert section == {
        "kind": "near", "seed": 0, "documents_removed": {"exact": 4, "near": 1},
        "tokens_removed": {"exact": 35, "near": 7}, "listed": 5, "duplicate_groups": 4,
        "group_sizes": {"2": 2, "3-4": 1, "9-16": 1, "17-32": 1},
        "per_source": {"a.jsonl": {"documents_removed": {"exact": 3, "near": 0},
                                   "tokens_removed": {"exact": 30, "near": 0}},
                       "b.jsonl": {"documents_removed": {"exact": 1, "near": 1},
                                   "tokens_removed": {"exact": 5, "near": 7}}}}
    # The bins by size (not "17-32" before "2", as strings sort), the sources by name.
    assert list(section["group_sizes"]) == ["2", "3-4", "9-16", "17-32"]
    assert list(section["per_source"]) == ["a.jsonl", "b.jsonl"]
    assert "against" not in section
    assert dedup_section({**summary, "against": 2}, _dedup_stats())["against"] == 2
    with pytest.raises(RuntimeError, match="5 records removed, 4 listed"):
        dedup_section({**summary, "listed": 4}, _dedup_stats())


def test_check_dedup_holds_the_section_to_the_input_and_the_listing():
    from transforms.core.dedup import check_dedup

    section = {"documents_removed": {"exact": 3, "near": 2}, "listed": 5,
               "per_source": {"a": {"documents_removed": {"exact": 3}}, "b": {"documents_removed": {"near": 2}},
                              "c": {}}}
    inp = {"dropped_by_reason": {"duplicate_exact": 3, "duplicate_near": 2, "too_long": 9}}
    listing = {"exact": 3, "near": 2}
    assert check_dedup(section, inp, listing) == []
    # Each kind against its own reason.
    assert check_dedup(section, {"dropped_by_reason": {"duplicate_exact": 2, "duplicate_near": 3}}, listing) == [
        "dedup.documents_removed.exact is 3, input.dropped_by_reason.duplicate_exact is 2",
        "dedup.documents_removed.near is 2, input.dropped_by_reason.duplicate_near is 3"]
    per_source = {"a": {"documents_removed": {"exact": 3, "near": 1}}}
    assert check_dedup({**section, "per_source": per_source}, inp, listing) == [
        "dedup.per_source removes 1 near duplicates, the total is 2"]
    assert check_dedup({**section, "listed": 4}, inp, listing) == ["dedup.listed is 4, 5 records were removed"]
    assert check_dedup(section, inp, None) == ["dedup: the removed records are not listed (no dedup/ directory)"]
    assert check_dedup(section, inp, {"exact": 3, "near": 1}) == [
        "dedup/ lists 1 near duplicates, dedup.documents_removed.near is 2"]
    assert check_dedup(section, inp, {"near": 2}) == [
        "dedup/ lists 0 exact duplicates, dedup.documents_removed.exact is 3"]
    # Nothing removed: no counts, no drops and no listing directory agree; a kind removed nowhere may be left out.
    assert check_dedup({"listed": 0}, {}, None) == []
    assert check_dedup({"documents_removed": {"exact": 1}, "listed": 1,
                        "per_source": {"a": {"documents_removed": {"exact": 1}}}},
                       {"dropped_by_reason": {"duplicate_exact": 1}}, {"exact": 1}) == []
    # A section that lost a kind's count is named with 0 for it, everywhere it disagrees.
    assert check_dedup({"documents_removed": {"exact": 1}, "listed": 1,
                        "per_source": {"a": {"documents_removed": {"exact": 1, "near": 1}}}},
                       {"dropped_by_reason": {"duplicate_exact": 1, "duplicate_near": 1}}, {"exact": 1, "near": 1}) == [
        "dedup.documents_removed.near is 0, input.dropped_by_reason.duplicate_near is 1",
        "dedup.per_source removes 1 near duplicates, the total is 0",
        "dedup/ lists 1 near duplicates, dedup.documents_removed.near is 0"]
    assert check_dedup(section, {"dropped_by_reason": {"duplicate_exact": 3}}, listing) == [
        "dedup.documents_removed.near is 2, input.dropped_by_reason.duplicate_near is 0"]
    assert check_dedup({"documents_removed": {"near": 1}, "listed": 1, "per_source": {}},
                       {"dropped_by_reason": {"duplicate_near": 1}}, {"near": 1}) == [
        "dedup.per_source removes 0 near duplicates, the total is 1"]


def test_the_table_of_mixed_ids_equals_mixing_each_id_as_it_grows():
    """_char_shingles takes each id's mix from a table grown to the largest id seen: the same values as mixing
    the ids themselves, before and after the table grows, and for a scalar as for an array."""
    from transforms.core import dedup as core

    rng = np.random.default_rng(8)
    for top in (100, 70_000, 300_000):  # the table starts at 65,536 and doubles past what it is asked
        ids = rng.integers(0, top, size=5_000)
        with np.errstate(over="ignore"):
            assert (core._mixed_ids(ids) == core._mix64(ids.astype(np.uint64) + np.uint64(1))).all()
        assert len(core._MIXED_IDS[0]) > int(ids.max())
    x = np.uint64(12345)
    assert core._mix64(x) == core._mix64(np.array([x]))[0] and core._mix64(x).shape == ()
