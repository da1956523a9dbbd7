"""`create_hdf5_dataset estimate`: intervals that hold the truth as often as they say, and a prediction of the
job that matches the job."""

from __future__ import annotations

import hashlib
import json
import math
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import RUNNER, SHARED, require_shared, run_job
from transforms.core.estimate import (Interval, MixturePrediction, SourcePrediction, Stratum, attribute, by_bytes,
                                      by_coin, by_poisson, combine, effective_count, mean_spread, partial_counts,
                                      predict_mixture, scaled, share_ratio, student_t)
from transforms.io.sample import (WINDOW, LineDraws, _ends_in_window, _line_at, _locate, by_byte, coin_records,
                                  draw_lines, keeps, lines_around)

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]


def test_student_t_quantiles():
    for df, t in ((4, 2.776), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)):
        assert student_t(df) == pytest.approx(t, rel=0.003)
    assert student_t(3) == pytest.approx(3.182, rel=0.008)
    assert student_t(math.inf) == pytest.approx(1.95996, rel=1e-4)


def test_hansen_hurwitz_is_unbiased_and_its_intervals_hold():
    rng = np.random.default_rng(0)
    sizes = rng.integers(10, 5000, 2000)
    values = (sizes * rng.uniform(0.1, 0.5, 2000)).astype(int)
    truth, total = int(values.sum()), int(sizes.sum())
    p = sizes / total
    inside, estimates = 0, []
    for _ in range(400):
        pick = rng.choice(len(sizes), 60, p=p)
        i = combine([by_bytes(total, sizes[pick], values[pick])])
        estimates.append(i.value)
        inside += i.low <= truth <= i.high
    assert abs(np.mean(estimates) - truth) < 0.01 * truth
    assert 0.92 <= inside / 400 <= 0.98


def test_hansen_hurwitz_variance_by_hand():
    """Three draws of a 12-byte file: lines of 6, 3 and 2 bytes with one record each give y = 2, 4, 6. The mean is
    4, the sample variance (n - 1 in the denominator) (4 + 0 + 4) / 2 = 4, so the mean's variance 4 / 3 with 2
    degrees of freedom. The population variance (8 / 3, then 8 / 9) narrows the interval by sqrt(2 / 3): a
    calibration test of tens of trials cannot see that, this can."""
    s = by_bytes(12, [6, 3, 2], [1, 1, 1])
    assert (s.value, s.variance, s.df) == (4.0, 4 / 3, 2)
    i = combine([s])
    assert (i.value, i.half_width) == (4.0, student_t(2) * math.sqrt(4 / 3))
    assert i.half_width == pytest.approx(4.816, abs=0.001)  # t(2) by the expansion 4.171 * 1.155
    # Two draws: y = 12 * 3 / 4 = 9 and 12 * 1 / 4 = 3: variance ((9 - 6)**2 + (3 - 6)**2) / 1 / 2 = 9, 1 df.
    assert by_bytes(12, [4, 4], [3, 1]) == Stratum(6.0, 9.0, 1)
    # One draw says nothing of its spread: as wide as its value. No draw: nothing.
    assert by_bytes(12, [4], [3]) == Stratum(9.0, 81.0, 1)
    assert by_bytes(12, [], []) == Stratum(0.0, 0.0, math.inf)


def test_horvitz_thompson_coin():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1000, 5000)
    inside = 0
    for _ in range(300):
        kept = values[rng.random(len(values)) < 0.05]
        i = combine([by_coin(kept, 0.05)])
        inside += i.low <= values.sum() <= i.high
    assert 0.92 <= inside / 300 <= 0.98
    assert combine([by_coin([1, 2, 3], 1.0)]) == Interval(6.0, 0.0)


def test_student_t_at_its_edges():
    """No degrees of freedom (or fewer, or infinitely many): the normal quantile. Fewer than one: as one. Another
    probability: its own normal quantile, expanded (t(10) at 95%: 1.812)."""
    z = 1.959963984540054
    assert student_t(0) == student_t(-1) == student_t(math.inf) == pytest.approx(z, abs=1e-15)
    assert student_t(0.5) == student_t(1) == pytest.approx(9.7106, abs=1e-4)  # the expansion at 1 df
    assert student_t(10, 0.95) == pytest.approx(1.8124, abs=1e-4)
    assert student_t(0, 0.95) == pytest.approx(1.6449, abs=1e-4)
    # The expansion's own values, to the last bits (each of its coefficients moves them): at 1, 2, 4 and 30 df
    # (the true t: 12.71, 4.30, 2.776, 2.042) and at 3 df for 90% (1.638).
    got = [student_t(df) for df in (1, 2, 4, 30)] + [student_t(3, 0.9)]
    assert got == pytest.approx([9.710583510085943, 4.171205463562701, 2.7693731068407277, 2.042270462888957,
                                 1.63675348783732], rel=1e-12)


def test_poisson_sampling_by_hand():
    """Records kept with p = 0.5 and 1. Horvitz-Thompson: 2 / 0.5 + 4 = 8, variance (1 - 0.5) / 0.25 * 4 = 8, 1 df.
    With their sizes (10 and 30 of 100 characters): 50 estimated, a ratio (6 + 5) / 50 = 0.22 a character, 22;
    residuals 3 - 2.2 and 5 - 6.6, the kept-for-sure one's weighing nothing: 2 * 0.64 = 1.28, times (100 / 50)^2,
    times n / df = 2: 10.24. Sizes that estimate nothing: Horvitz-Thompson. No record: nothing."""
    assert by_poisson([2, 4], [0.5, 1.0]) == Stratum(8.0, 8.0, 1)
    got = by_poisson([3, 5], [0.5, 1.0], [10, 30], 100)
    assert (got.value, got.df) == (22.0, 1) and got.variance == pytest.approx(10.24)
    assert by_poisson([3, 5], [0.5, 1.0], [0, 0], 100) == by_poisson([3, 5], [0.5, 1.0]) == Stratum(11.0, 18.0, 1)
    assert by_poisson([3, 5], [0.5, 1.0], [10, 30]) == Stratum(11.0, 18.0, 1)  # no size total: no ratio
    assert by_poisson([], []) == Stratum(0.0, 0.0, math.inf)
    assert by_poisson([3, 5, 7], [0.5, 0.5, 0.5]).df == 2


def test_combine_and_scale_by_hand():
    """Normal strata: the normal quantile. No variance: no width. Finite and infinite df: Welch-Satterthwaite over
    the finite ones, 13^2 / (9^2 / 4). A ratio scales the value and its half-width."""
    assert combine([Stratum(1.0, 4.0, math.inf)]) == Interval(1.0, student_t(math.inf) * 2)
    assert combine([Stratum(1.0, 0.0, 3), Stratum(2.0, 0.0, math.inf)]) == Interval(3.0, 0.0)
    assert combine([Stratum(1.0, 4.0, math.inf), Stratum(2.0, 9.0, 4)]) == Interval(
        3.0, student_t(169 / 20.25) * math.sqrt(13))
    assert combine([]) == Interval(0, 0.0)
    assert scaled(Interval(10.0, 2.0), 3.0) == Interval(30.0, 6.0)
    assert Interval(10.0, 12.0).low == 0.0 and Interval(10.0, 2.0).low == 8.0 and Interval(10.0, 2.0).high == 12.0
    assert Interval(0.0, 5.0).relative == 0.0 and Interval(10.0, 2.0).relative == 0.2


def test_horvitz_thompson_coin_by_hand():
    """Kept with probability 1/2: each kept value counts twice, 2 * 6 = 12, with variance (1 - 1/2) / (1/2)^2 *
    (1 + 4 + 9) = 28 (normal quantiles); kept with certainty, the sum itself without spread."""
    assert by_coin([1, 2, 3], 0.5) == Stratum(12.0, 28.0, math.inf)
    assert by_coin([1, 2, 3], 1.0) == Stratum(6.0, 0.0, math.inf)
    assert by_coin([], 0.25) == Stratum(0.0, 0.0, math.inf)
    assert by_coin([1, 2, 3], 1.5) == Stratum(6.0, 0.0, math.inf)  # a fraction of 1 or more keeps every record
    # Values past 2**31.5 square exactly (as floats): 2 * 2**64, not an int64's overflow.
    assert by_coin([2**32], 0.5) == Stratum(2.0**33, 2.0**65, math.inf)


def test_strata_add_up():
    i = combine([Stratum(10.0, 4.0, 9), Stratum(20.0, 9.0, 19)])
    assert i.value == 30.0 and i.half_width == pytest.approx(student_t(25.1) * math.sqrt(13), rel=0.01)


def test_a_value_of_the_first_draws_in_ratio_to_the_tokens_of_all_by_hand():
    """A 12-byte file, four draws of 6, 3, 2 and 4 bytes with 3, 3, 1 and 3 tokens; bytes on disk known for the
    first two only (6 and 3). Per draw a = 12 y / b = 12, 12 and z = 12 t / b = 6, 12, 6, 9: the ratio is
    mean(a) / mean(z[:2]) = 12 / 9, the value 4/3 * mean(z) = 4/3 * 8.25 = 11. Its error: the first two's
    u = a - R (1 - 2/4) z = 8, 4 (variance 8, over 2: 4, 1 df) and the last two's tokens (6, 9: variance 4.5)
    times R^2 (2/4)^2 / 2 = 1: 5 in all, Welch's df 25 / (16 + 1)."""
    s = share_ratio(12, [6, 3, 2, 4], [3, 3, 1, 3], [6, 3])
    assert (s.value, s.variance) == (11.0, 5.0) and s.df == pytest.approx(25 / 17)
    # The same tokens in the last two draws: nothing of their spread to add.
    assert share_ratio(12, [6, 3, 2, 4], [3, 3, 1, 2], [6, 3]) == Stratum(10.0, 4.0, 1.0)
    # One draw beyond the share: the rest's spread is that of all the draws' tokens (3, 9, 2 a byte: variance
    # 43/3), times R^2 (1/3)^2 with R = 7.5 / 6; the share's u = 4.75, 5.25 (variance 1/8, over 2). Welch's df
    # over 1 and 2.
    s1 = share_ratio(12, [4, 4, 6], [1, 3, 1], [2, 3])
    assert s1.value == pytest.approx(1.25 * 14 / 3)
    assert s1.variance == pytest.approx(0.0625 + 1.25**2 / 9 * 43 / 3)
    assert s1.df == pytest.approx(s1.variance**2 / (0.0625**2 + (1.25**2 / 9 * 43 / 3) ** 2 / 2))
    # Bytes exactly in proportion to the tokens, every draw in the share: no spread, normal quantiles.
    assert share_ratio(12, [4, 4], [1, 1], [2, 2]) == Stratum(6.0, 0.0, math.inf)
    # Known for every draw: the Hansen-Hurwitz total of the values, exactly as by_bytes.
    assert share_ratio(12, [6, 3, 2], [1, 1, 1], [2, 4, 6]) == by_bytes(12, [6, 3, 2], [2, 4, 6])
    # One value says nothing of its spread: as wide as the estimate, 9 1/3 (= 2 * mean(3, 9, 2)), 1 df; the
    # other two draws' tokens (9, 2: variance 24.5) add 2^2 (2/3)^2 24.5 / 2.
    one = share_ratio(12, [4, 4, 6], [1, 3, 1], [2])
    assert one.value == pytest.approx(28 / 3) and one.variance == pytest.approx((28 / 3) ** 2 + 4 * 4 / 9 * 12.25)
    # No token in the share: nothing to take the ratio to, the values' own total. No value: nothing.
    assert share_ratio(12, [4, 4], [0, 3], [5]) == by_bytes(12, [4], [5]) == Stratum(15.0, 225.0, 1)
    assert share_ratio(12, [4, 4], [1, 3], []) == Stratum(0.0, 0.0, math.inf)
    with pytest.raises(ValueError, match="values for 2 of 1 draws"):
        share_ratio(12, [4], [1], [1, 2])
    # Fewer tokens in the share than one a draw (z = 0, 0, 0, 3: a mean of 3/4) are still a total to take the
    # ratio to: R = 3 / (3/4) = 4, the value 4 * mean(0, 0, 0, 3, 3) = 4.8; u = 3 - 4 (1/5) z = 3, 3, 3, 0.6
    # (variance 1.44, over 4: 0.36, 3 df) and the one draw beyond, all the draws' tokens (variance 2.7) times
    # 4^2 (1/5)^2: 1.728, 4 df.
    few = share_ratio(12, [4, 4, 4, 4, 4], [0, 0, 0, 1, 1], [1, 1, 1, 1])
    assert few.value == pytest.approx(4.8) and few.variance == pytest.approx(0.36 + 1.728)
    assert few.df == pytest.approx(2.088**2 / (0.36**2 / 3 + 1.728**2 / 4))


def test_the_ratio_to_all_draws_tokens_is_unbiased_and_its_intervals_hold():
    """Lines whose bytes on disk per token differ with their size (half as much again below 1,000 bytes), the first
    third of each sample's draws with their values known: 400 samples, the mean estimate within 1% of the truth
    and the 95% intervals holding it in 92-98% of them (94.5%)."""
    rng = np.random.default_rng(2)
    sizes = rng.integers(10, 5000, 3000)
    tokens = (sizes * rng.uniform(0.2, 0.3, 3000)).astype(int) + 1
    values = tokens * (1 + 0.5 * (sizes < 1000)) * rng.uniform(0.8, 1.2, 3000)
    truth, total = values.sum(), int(sizes.sum())
    inside, estimates = 0, []
    for _ in range(400):
        pick = rng.choice(len(sizes), 90, p=sizes / total)
        i = combine([share_ratio(total, sizes[pick], tokens[pick], values[pick][:30])])
        estimates.append(i.value)
        inside += i.low <= truth <= i.high
    assert abs(np.mean(estimates) / truth - 1) < 0.01
    assert 0.92 <= inside / 400 <= 0.98, inside


def test_rows_costs_are_shared_by_their_documents_inputs():
    """Documents of 3, 5 and 2 tokens back to back, rows of 4 inputs (windows of 5 from 0, 4 and 8): row costs 40,
    80 and 10 spread over their inputs, 10, 20 and 10 a token. The stream's last token is no row's input: it costs
    nothing. Rows in any order, tokens in no row (a gap), and no rows at all."""
    assert attribute([3, 5, 2], [0, 4, 8], [5, 5, 2], [40, 80, 10]).tolist() == [30.0, 90.0, 10.0]
    assert attribute([2, 3], [2, 0], [3, 2], [30, 5]).tolist() == [5.0, 30.0]
    assert attribute([4, 4], [], [], []).tolist() == [0.0, 0.0]


def test_kish_effective_number_and_the_spread_of_a_mean():
    assert effective_count([1, 1, 1, 1]) == 4.0 and effective_count([3, 1]) == 1.6
    assert effective_count([]) == 0.0 and effective_count([0, 0]) == 0.0
    # 1, 2, 3: sd 1, mean 2; as 3 values t(2) / sqrt(3) / 2, as 1.5 (never fewer than 2) t(1) / sqrt(2) / 2.
    assert mean_spread([1, 2, 3], 3) == pytest.approx(student_t(2) / math.sqrt(3) / 2)
    assert mean_spread([1, 2, 3], 1.5) == pytest.approx(student_t(1) / math.sqrt(2) / 2)
    assert mean_spread([5], 10) == 0.0 and mean_spread([1, -1], 10) == 0.0
    assert mean_spread([1, 3], 2) == pytest.approx(student_t(1) / 2)  # two values: sd sqrt(2), mean 2


def test_a_remainders_documents_are_counted_to_the_nearest_cut():
    """Documents of 10 tokens: a remainder of 35 takes 4 (40 is as near as 30: the job takes the document that
    reaches it), 34 takes 3, 30 exactly 3, 5 one and 4 none (stopping before is nearer), 0 none. Past
    `simulate_up_to` documents the normal limit, here exact (every document alike: no spread)."""
    rng = np.random.default_rng(0)
    got = partial_counts(rng, [10.0], [1.0], [35, 34, 30, 5, 4, 0])
    assert got.tolist() == [4.0, 3.0, 3.0, 1.0, 0.0, 0.0]
    assert partial_counts(rng, [10.0, 10.0], [1.0, 3.0], [35.0, 10.0], simulate_up_to=1).tolist() == [3.5, 1.0]
    assert partial_counts(rng, [10.0], [1.0], []).tolist() == []
    assert partial_counts(rng, [0.0], [1.0], [5.0]).tolist() == [0.0]


def test_a_long_remainder_is_counted_by_the_normal_limit():
    """Documents of 1 and 3 tokens alike often (mean 2, variance 1): past `simulate_up_to` documents on average
    the count is the renewal's normal limit, R / 2 + sqrt(R * 1 / 2^3) z, a z per remainder from the generator
    (none for a remainder of nothing, and never below 0). Up to 200 documents on average (a remainder of 400
    tokens) a draw counts them one by one: a whole number; past it (401), the normal limit."""
    got = partial_counts(np.random.default_rng(0), [1.0, 3.0], [1.0, 1.0], [0.0, 1000.0, 2000.0], simulate_up_to=10)
    z = np.random.default_rng(0).standard_normal(3)
    assert z[0] > 0 and got.tolist() == [0.0, 500 + math.sqrt(1000 / 8) * z[1], 1000 + math.sqrt(2000 / 8) * z[2]]
    assert got[1] != got[2] - 500  # a z each
    assert partial_counts(np.random.default_rng(1), [1.0, 3.0], [1.0, 1.0], [-5.0, 1000.0], simulate_up_to=10)[0] == 0
    simulated = partial_counts(np.random.default_rng(5), [1.0, 3.0], [1.0, 1.0], [400.0])[0]
    limit = partial_counts(np.random.default_rng(5), [1.0, 3.0], [1.0, 1.0], [401.0])[0]
    assert simulated == round(simulated) and limit != round(limit)
    assert abs(simulated - 200) < 30 and abs(limit - 200.5) < 30


def test_a_remainder_of_long_and_short_documents_is_a_draw():
    """Documents of 1 token, one in 100 of 1,000: a remainder of 200 tokens is 200 / 10.99 = 18 mean documents,
    but the cut never takes a long one (stopping before it is nearer): the count is the short documents before
    the first long one, at most 200, min(Geometric(1%), 200), whose mean is (1 - 0.99^200) / 0.01 = 86.6. How many
    is the job's draw (its hash order of the documents): from none to 200."""
    rng = np.random.default_rng(1)
    got = partial_counts(rng, [1.0, 1000.0], [99.0, 1.0], np.full(4000, 200.0))
    assert got.min() == 0 and got.max() == 200
    assert abs(got.mean() - (1 - 0.99**200) / 0.01) < 3  # the mean's standard error: about 1
    # A draw that falls short within the documents it draws (zero tokens: never reached) counts the mean, 50.
    rng = np.random.default_rng(3)
    stuck = partial_counts(rng, [0.0, 100.0], [999.0, 1.0], np.full(50, 5.0))
    assert 50.0 in stuck.tolist() and set(stuck.tolist()) <= {0.0, 1.0, 50.0}


def test_a_draw_falls_short_after_ten_times_the_mean_count_and_a_hundred():
    """Documents of 1 token, one in 1,000 of 10,000 (mean 10.999): a remainder of 2,000 tokens is 181.8 mean
    documents, so a draw takes at most ceil(1818.3) + 100 = 1,919 documents (fewer than the 2,001 smallest ones
    that would hold it). One whose 1,919 are all short (0.999^1919: 15% of them) falls short and counts the mean,
    181.8; every other one reaches a long document and counts a whole number. The draws are the generator's, a
    column of 1,919 per remainder: seed 5 has draws whose 1,920th document is their first long one (still short)."""
    n = 3000
    got = partial_counts(np.random.default_rng(5), [1.0, 10_000.0], [999.0, 1.0], np.full(n, 2000.0))
    weights = np.array([999.0, 1.0])
    picks = np.random.default_rng(5).choice(2, size=(1920, n), p=weights / weights.sum())
    short = ~picks[:1919].any(axis=0)
    assert (short & (picks[1919] == 1)).sum() == 2 and 400 < short.sum() < 500
    assert np.array_equal(got != np.round(got), short)
    assert np.all(got[short] == 2000 / float(np.dot([1.0, 10_000.0], weights / weights.sum())))


def test_predict_mixture_by_hand():
    """Two sources of exactly known availability (no spread): the plan's targets, copies and repeats exactly."""
    from transforms.core.estimate import Interval, predict_mixture
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 0.75}, {"source": "b", "weight": 0.25, "max_repeats": 3}],
                         total_tokens=4000)
    exact = lambda x: Interval(float(x), 0.0)  # noqa: E731
    p = predict_mixture(spec, [exact(6000), exact(400)], [exact(60), exact(4)], [exact(60), exact(4)])
    a, b = p.sources
    assert (a.target.value, b.target.value) == (3000, 1000)
    assert a.taken_documents.value == pytest.approx(30) and a.repeats.value == 0
    assert b.taken_documents.value == pytest.approx(10) and b.repeats.value == pytest.approx(6)
    assert p.tokens.value == 4000 and p.tokens.half_width == pytest.approx(100 + 100)  # a mean document each
    assert p.documents.value == pytest.approx(40) and p.shortfall == 0
    np.testing.assert_allclose([a.target.half_width, b.target.half_width], [0, 0])


def test_a_mixture_that_some_availabilities_cannot_make():
    """A budget of 1,000 tokens from a source estimated at 1,000 +- 100: in about half the simulated availabilities
    it has fewer (960 of the 2,000 draws with seed 0), and the plan cannot be made there: the shortfall. Seeded:
    the same prediction for the same sample (seed 0 by default), another with another seed."""
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 1.0}, {"source": "b", "tokens": 1000}], total_tokens=3000)
    args = ([Interval(5000.0, 0.0), Interval(1000.0, 100.0)], [Interval(50.0, 0.0), Interval(10.0, 0.0)],
            [Interval(50.0, 0.0), Interval(10.0, 0.0)])
    p = predict_mixture(spec, *args)
    assert p.shortfall == 960 / 2000 and p == predict_mixture(spec, *args, seed=0)
    assert predict_mixture(spec, *args, seed=1).shortfall != p.shortfall
    few = predict_mixture(spec, *args, draws=100).shortfall * 100  # failed draws of 100
    assert few == round(few) and 30 <= few <= 70
    b = p.sources[1]
    assert (b.target.value, b.taken_documents.value, b.repeats.value) == (1000, 10.0, 0.0)


def test_every_figure_of_a_mixture_by_hand():
    """Sources known exactly (nothing to simulate): a 6,000 tokens in 60 documents (30 kept records), b 400 in 4
    (2), weights 3 : 1 of 4,000. a gives half of itself (30 documents, 15 rows), b 2.5 times (twice whole, and
    half its documents once more: 10 documents, 6 of them repeats, 5 rows). A taken total is within a mean
    document (100 tokens) of its target per source; documents and rows within one per source."""
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 0.75}, {"source": "b", "weight": 0.25, "max_repeats": 3}],
                         total_tokens=4000)
    exact = lambda x: Interval(float(x), 0.0)  # noqa: E731
    tokens, documents, kept = [exact(6000), exact(400)], [exact(60), exact(4)], [exact(30), exact(2)]
    p = predict_mixture(spec, tokens, documents, kept)
    a, b = p.sources
    assert a == SourcePrediction("a", tokens[0], documents[0], Interval(3000.0, 0.0), Interval(3000.0, 100.0),
                                 Interval(30.0, 1.0), Interval(0.0, 0.0))
    assert b == SourcePrediction("b", tokens[1], documents[1], Interval(1000.0, 0.0), Interval(1000.0, 100.0),
                                 Interval(10.0, 1.0), Interval(6.0, 0.0))
    assert p == MixturePrediction((a, b), Interval(4000.0, 200.0), Interval(40.0, 2.0), Interval(20.0, 2.0), None,
                                  0.0)


def test_a_mixture_whose_plan_some_availabilities_break():
    """b's budget of 1,000 tokens from 1,000 +- 800 (2 documents): the simulated availabilities below the budget
    cannot be planned and are left out, so b is taken at most once in those that are, in about half of them:
    its 2 documents at most, and the interval reaches below the point only, to 2 * 1,000 / 1,915 (the top 1.25%
    of N(1000, 408)), 1.04, plus a document's slack: 1.96. An availability of unknown spread (NaN) cannot be
    planned at all: every figure is its point and its slack. A source estimated at half a document keeps its half
    in every simulated availability (never raised to a whole one)."""
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 1.0}, {"source": "b", "tokens": 1000}], total_tokens=3000)
    exact = lambda x: Interval(float(x), 0.0)  # noqa: E731
    p = predict_mixture(spec, [exact(5000), Interval(1000.0, 800.0)], [exact(50), exact(2)], [exact(50), exact(2)])
    docs = p.sources[1].taken_documents
    assert docs.value == 2.0 and abs(docs.half_width - 1.96) < 0.1 and 0.4 < p.shortfall < 0.6
    unknown = predict_mixture(spec, [exact(5000), Interval(1000.0, math.nan)], [exact(50), exact(10)],
                              [exact(50), exact(10)])
    assert unknown.shortfall == 1.0
    assert unknown.sources[1].taken_documents == Interval(10.0, 1.0) and unknown.tokens == Interval(3000.0, 200.0)
    assert unknown.sources[1].target == Interval(1000.0, 0.0) and unknown.kept == Interval(30.0, 2.0)  # 20 + 10
    halves = parse_mixture([{"source": "a", "weight": 0.5}, {"source": "b", "weight": 0.5}], total_tokens=200)
    half = predict_mixture(halves, [exact(1000), exact(1000)], [exact(10), exact(0.5)], [exact(10), exact(0.5)])
    got = half.sources[1].taken_documents  # a tenth of half a document
    assert got.value == pytest.approx(0.05) and got.half_width == pytest.approx(1.0)


def test_a_mixture_of_sources_of_one_token_or_none():
    """Availabilities are whole tokens, at least one (the plan's own input): a source of 1 token and one of 10 with
    equal weights allow a total of 2, one token each. A taken total's interval adds a mean document per source
    (10 / 2 and 1 / 1 tokens here: nothing else moves), none for a source of no documents; a source of no tokens
    gives no documents."""
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 0.5}, {"source": "b", "weight": 0.5}])
    exact = lambda x: Interval(float(x), 0.0)  # noqa: E731
    p = predict_mixture(spec, [exact(10), exact(1)], [exact(2), exact(1)], [exact(2), exact(1)])
    assert [q.target.value for q in p.sources] == [1, 1] and p.tokens == Interval(2.0, 6.0)
    assert p.limited_by == "b"  # no total_tokens: b, taken whole once (max_repeats 1), sets the total
    assert [q.taken for q in p.sources] == [Interval(1.0, 5.0), Interval(1.0, 1.0)]
    assert p.sources[1].taken_documents.value == 1.0 and p.kept.value == pytest.approx(1.2)  # 1 + 2 / 10
    # Whatever memory numpy hands out (blocks of the sizes these arrays take, freed full of junk first), and
    # without a word (numpy warns of a division `where` without `out`).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for junk in (7.0, -3.5, 1e9, 0.5):
            freed = [np.full(2, junk) for _ in range(32)]
            del freed
            q = predict_mixture(spec, [exact(10), exact(0)], [exact(2), exact(0)], [exact(2), exact(0)])
            assert q.sources[1].taken == Interval(1.0, 0.0) and q.tokens == Interval(2.0, 5.0), junk
            freed = [np.full(2, junk) for _ in range(32)]
            del freed
            r = predict_mixture(spec, [exact(10), exact(0)], [exact(2), exact(3)], [exact(2), exact(3)])
            assert (r.sources[1].taken_documents.value, r.sources[1].repeats.value) == (0.0, 0.0), junk


def test_predict_mixture_draws_the_remainders_documents():
    """Source b (4 documents of 100 tokens) taken 1.5 times: once whole and its remainder of 200 tokens, which with
    every document alike is exactly 2 documents: 6 taken, 2 of them repeats, whatever the draw. With 40 documents
    of 1 and 1,000 tokens (99 : 1, as the sample says), the remainder (half of them: 20 by the plan, 220 tokens
    at the sample's mean) takes the short ones that come before the first long one (which overshoots: stopping
    before it is nearer), at most 220: min(Geometric(1%), 220), mean (1 - 0.99^220) / 0.01 = 89.0, and the
    interval spans the draw, 0 to 220."""
    from transforms.core.estimate import Interval, predict_mixture
    from transforms.core.mixture import parse_mixture

    spec = parse_mixture([{"source": "a", "weight": 0.6}, {"source": "b", "weight": 0.4, "max_repeats": 3}],
                         total_tokens=1500)
    exact = lambda x: Interval(float(x), 0.0)  # noqa: E731
    alike = ([100.0] * 4, [1.0] * 4)
    p = predict_mixture(spec, [exact(900), exact(400)], [exact(9), exact(4)], [exact(9), exact(4)],
                        lengths=[None, alike])
    a, b = p.sources
    assert (a.target.value, b.target.value) == (900, 600)
    assert (b.taken_documents.value, b.repeats.value) == (6.0, 2.0) and b.repeats.half_width == 0
    assert (a.taken_documents.value, a.repeats.value) == (9.0, 0.0) and p.documents.value == 15.0
    skewed = ([1.0, 1000.0], [99.0, 1.0])
    q = predict_mixture(spec, [exact(900), exact(400)], [exact(9), exact(40)], [exact(9), exact(40)],
                        lengths=[None, skewed], seed=3)
    r = q.sources[1].repeats
    assert abs(r.value - (1 - 0.99**220) / 0.01) < 5 and r.high == pytest.approx(220) and r.low == 0
    plain = predict_mixture(spec, [exact(900), exact(400)], [exact(9), exact(40)], [exact(9), exact(40)])
    assert plain.sources[1].repeats == Interval(20.0, 0.0)  # r of its documents, as sure as the availability


def test_split_share_by_hand():
    """A fifth of 1000 documents of 10 tokens each, the total known exactly: 2000 tokens, the draw's own spread
    sqrt(0.2 * 0.8 * 1000 * 10^2) = 126.5 tokens, times 1.96."""
    from transforms.core.estimate import Interval, split_share

    got = split_share(Interval(10_000.0, 0.0), 0.2, 1000 * 10.0**2)
    assert got.value == pytest.approx(2000)
    assert got.half_width == pytest.approx(1.959964 * (0.2 * 0.8 * 1000 * 100) ** 0.5, rel=1e-6)
    with_total = split_share(Interval(10_000.0, 1959.964), 0.2, 0.0)  # the total's own error, scaled
    assert with_total.half_width == pytest.approx(0.2 * 1959.964, rel=1e-6)


def test_totals_past_int64_are_computed_in_floats():
    """Whole numbers whose products pass 2**63: a file of 2**40 bytes, two draws of lines of 2**20 bytes holding
    2**30 each (tokens, bytes): each draw stands for 2**40 * 2**30 / 2**20 = 2**50, where int64 arithmetic wraps
    2**70 to 0. Kish's count of two weights of 2**32 is 2 (their squares, 2**64, wrap to 0 in int64)."""
    assert by_bytes(2**40, [2**20, 2**20], [2**30, 2**30]) == Stratum(2.0**50, 0.0, 1)
    assert share_ratio(2**40, [2**20, 2**20], [2**30, 2**30], [2**30, 2**30]) == Stratum(2.0**50, 0.0, math.inf)
    assert effective_count([2**32, 2**32]) == 2.0
    # Two rows of one input each costing 2**62 bytes: summed as floats, 2**63 (an int64 sum wraps negative).
    assert attribute([1, 1], [0, 1], [2, 2], [2**62, 2**62]).tolist() == [2.0**62, 2.0**62]


def test_poisson_ratio_by_hand_with_three_records():
    """Records of 10, 30 and 5 of 150 characters holding 3, 5 and 2, kept with p = 0.5, 1 and 0.25: sum(x / p) = 19,
    sum(size / p) = 70, so R = 19 / 70 and the total 150 R = 285 / 7. Residuals x - R size: 2/7, -22/7, 9/14, weighed
    (1 - p) / p^2 = 2, 0, 12: 251 / 49; times (150 / 70)^2 = 225 / 49 and n / df = 3 / 2, 2 df. Without sizes, a
    record kept with p = 1/4 counts 4 times, with variance (3/4) / (1/16) = 12 times its square."""
    got = by_poisson([3, 5, 2], [0.5, 1.0, 0.25], [10, 30, 5], 150)
    assert got.value == pytest.approx(285 / 7) and got.df == 2
    assert got.variance == pytest.approx(225 / 49 * 251 / 49 * 3 / 2)
    assert by_poisson([2], [0.25]) == Stratum(8.0, 48.0, 1)
    # Sizes in any unit (tenths of a file of one): the ratio form all the same, not Horvitz-Thompson.
    small = by_poisson([3, 5], [0.5, 1.0], [0.1, 0.3], 1.0)
    assert small.value == pytest.approx(22.0) and small.variance == pytest.approx(10.24)


def test_strata_of_small_or_no_variance_in_the_degrees_of_freedom():
    """Two strata of variance 1/2 with 2 df each: variance 1, Welch-Satterthwaite 1 / (2 * 0.25 / 2) = 4 df (a
    variance below 1 is a variance). A stratum known exactly adds nothing to the degrees of freedom, whatever
    df it states."""
    assert combine([Stratum(1.0, 0.5, 2), Stratum(2.0, 0.5, 2)]) == Interval(3.0, student_t(4))
    assert combine([Stratum(5.0, 0.0, 0), Stratum(1.0, 4.0, 4)]) == Interval(6.0, student_t(4) * 2)
    # Kish's count of weights below 1: (1/2 + 1/2)^2 / (1/4 + 1/4) = 2.
    assert effective_count([0.5, 0.5]) == 2.0


# ---------------------------------------------------------------- the sample (transforms.io.sample)


def _documents(path: Path, fraction: float, seed: int) -> Stratum:
    """A file's by-byte document stratum as `estimate` computes it (every drawn line a document)."""
    size = path.stat().st_size
    draws = draw_lines(str(path), size, math.ceil(fraction * size), seed, path.name)
    return by_bytes(size, draws.window_bytes, draws.window_ends)


def test_a_last_line_without_a_newline_is_a_document(tmp_path):
    """Three records, the last without a newline: 3 documents, counted in every window (each the whole file)."""
    lines = [b'{"text": "a"}', b'{"text": "' + b"b" * 200 + b'"}', b'{"text": "c"}']
    path = tmp_path / "three.jsonl"
    path.write_bytes(b"\n".join(lines))  # 240 bytes
    draws = draw_lines(str(path), 240, 12, 0, path.name)
    assert len(draws.lines) == 30  # at least _MIN_DRAWS, as the budget (5%) is less than the file
    assert draws.window_ends == [3] * 30 and draws.window_bytes == [240] * 30
    # The drawn line is the whole line, its bytes with its newline (the last has none).
    assert {(line, n) for line, n in zip(draws.lines, draws.lengths)} == {(lines[0], 14), (lines[1], 213),
                                                                          (lines[2], 13)}
    # The draws are a function of the seed and the file's identity (its relative path) alone: pinned.
    assert draws.lengths[:12] == [213, 213, 213, 213, 213, 13, 213, 213, 213, 213, 14, 213]
    assert _documents(path, 0.05, 0) == Stratum(3.0, 0.0, 29)
    assert combine([_documents(path, 0.05, 0)]) == Interval(3.0, 0.0)
    path.write_bytes(b'{"text": "only"}')  # one record, no newline at all
    assert _documents(path, 0.05, 3) == Stratum(1.0, 0.0, 29)


def test_the_offsets_spread_over_the_whole_file(tmp_path):
    """A file of 1,000 lines of 11 bytes: the lines of the first n draws are spread evenly, whatever n (each
    tenth of the file holds n / 10 of them, give or take one), where independent offsets leave tenths with
    none; each draw alone is still uniform (over 400 seeds, every tenth drawn first about as often)."""
    path = tmp_path / "even.jsonl"
    path.write_bytes(b"".join(b'{"t":%4d}\n' % i for i in range(1000)))  # line i holds bytes 11i .. 11i + 10
    draws = draw_lines(str(path), 11_000, 1100, 0, path.name)
    tenth = [int(line[5:9]) // 100 for line in draws.lines]  # which tenth of the file each drawn line is in
    for n in (10, 30, 100):
        counts = np.bincount(tenth[:n], minlength=10)
        assert counts.max() - counts.min() <= 2, (n, counts.tolist())
    firsts = np.bincount([int(draw_lines(str(path), 11_000, 11, seed, path.name).lines[0][5:9]) // 100
                          for seed in range(400)], minlength=10)
    assert firsts.min() >= 20 and firsts.max() <= 65, firsts.tolist()  # 40 expected, binomial sd 6


def test_the_offsets_are_the_golden_ratio_sequence_on_a_petabyte():
    """The k-th offset is int(((u + k * g) % 1) * size), u the seeded start and g = (sqrt(5) - 1) / 2, to the byte
    on a file of 2**50 bytes too (where a float's last bits move an offset by bytes): a virtual file of lines of
    2 bytes ("x\\n"), each draw's line starting at its offset rounded down to an even byte."""
    import fsspec

    # A real file of a petabyte cannot be written: this one's bytes are made as they are read, byte i "\n" when i
    # is odd and "x" when even (draw_lines reads only around its offsets).
    class Lines:
        pos = 0

        def seek(self, pos):
            self.pos = pos

        def read(self, n=-1):
            lo, hi = self.pos, min(self.pos + n, 2**50)
            self.pos = hi
            return (b"x\n" * ((hi - lo) // 2 + 1))[lo % 2:lo % 2 + max(hi - lo, 0)]

        def close(self):
            pass

    class Virtual(fsspec.AbstractFileSystem):
        protocol = "goldenvirtual"

        def _open(self, path, mode="rb", **kwargs):
            return Lines()

    fsspec.register_implementation("goldenvirtual", Virtual, clobber=True)
    size, seed, identity = 2**50, 7, "big.jsonl"
    draws = draw_lines("goldenvirtual://big.jsonl", size, 80, seed, identity)
    key = int.from_bytes(hashlib.blake2b(f"{seed}:{identity}".encode(), digest_size=8).digest(), "big")
    u, g = float(np.random.default_rng(key).random()), (math.sqrt(5) - 1) / 2
    offsets = [int(((u + k * g) % 1.0) * size) for k in range(40)]
    assert len(draws.lines) == 40 and set(draws.lines) == {b"x"} and set(draws.lengths) == {2}
    assert draws.starts == [o - o % 2 for o in offsets]


def test_the_document_count_of_a_file_smaller_than_the_window_is_exact(tmp_path):
    """A window wraps past the file's end to its start, so in a file smaller than WINDOW every window is the whole
    file: the count is exact, whatever the seed, the lengths and the final newline. Windows cut at the file's end
    over-counted the last lines: means of 5.8 and 9.0 for 3 records (short, uneven) over 2,000 seeds, 3.4
    for 1."""
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 40):
        body = b"\n".join(json.dumps({"text": "w" * int(rng.integers(0, 300))}).encode() for _ in range(n))
        assert len(body) < WINDOW
        for ending in (b"", b"\n"):
            path = tmp_path / "small.jsonl"
            path.write_bytes(body + ending)
            for seed in range(50):
                s = _documents(path, 0.05, seed)
                assert (s.value, s.variance) == (n, 0.0), (n, ending, seed, s)


def test_the_document_count_of_a_larger_file_is_unbiased(tmp_path):
    """A file of 2.2 windows (300 records): over 200 seeds the mean estimate is within 0.2% of the truth (the mean's
    standard error is 0.01%; it is 300.03). Windows cut at the file's end gave 301.78 here (+0.6%)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "mid.jsonl"
    path.write_bytes(b"".join(json.dumps({"text": "w" * int(rng.integers(1, 200))}).encode() + b"\n"
                              for _ in range(300)))
    assert 2 * WINDOW < path.stat().st_size < 3 * WINDOW
    estimates = [_documents(path, 0.05, seed).value for seed in range(200)]
    assert abs(np.mean(estimates) - 300) < 0.002 * 300, np.mean(estimates)


def test_files_sampled_by_byte():
    assert by_byte("d/a.jsonl", False) and by_byte("d/a.jsonl", True)
    assert by_byte("d/a.txt", True) and not by_byte("d/a.txt", False)  # a .txt read a line a record, or whole
    for path in ("d/a.jsonl.zst", "d/a.json.gz", "d/a.parquet", "d/a.jsonl.zst.tar", "d/a.JSONL"):
        assert not by_byte(path, True), path


def test_draws_stop_when_their_bytes_reach_the_budget(tmp_path):
    """Four lines of 10 bytes: a budget of the whole file (no minimum of draws then) takes exactly 4 draws, one
    byte more takes 5; a budget below the file takes at least 30; max_draws caps them."""
    path = tmp_path / "four.jsonl"
    path.write_bytes(b"".join(b'{"t": %d}\n' % i for i in range(10, 14)))
    assert path.stat().st_size == 40

    def count(budget, **kw):
        draws = draw_lines(str(path), 40, budget, 5, "four.jsonl", **kw)
        assert draws.lengths == [10] * len(draws.lines) and draws.window_ends == [4] * len(draws.lines)
        return len(draws.lines)

    assert count(40, max_draws=100) == 4
    assert count(41, max_draws=100) == 5
    assert count(20, max_draws=100) == 30
    assert count(10**6, max_draws=7) == 7


def test_at_most_200000_draws(tmp_path):
    """However far the budget: a file of one byte drawn 200,000 times, not once more."""
    path = tmp_path / "x.txt"
    path.write_bytes(b"x")
    draws = draw_lines(str(path), 1, 10**9, 0, "x.txt")
    assert len(draws.lines) == 200_000 and set(draws.lines) == {b"x"} and set(draws.lengths) == {1}
    assert set(draws.window_ends) == {1} and set(draws.window_bytes) == {1}


def test_an_empty_file_gives_no_draws(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert draw_lines(str(path), 0, 100, 0, "empty.jsonl") == LineDraws(0, [], [], [], [])


def test_every_offset_gives_its_whole_line(tmp_path):
    """Empty lines, a line at the file's start and one at its end without a newline: each byte's line, exactly,
    and every window (the whole file, from any offset) counts the 5 lines."""
    data = b"\nab\n\ncd\nefg"
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    expected = [(b"", 1), (b"ab", 3), (b"ab", 3), (b"ab", 3), (b"", 1), (b"cd", 3), (b"cd", 3), (b"cd", 3),
                (b"efg", 3), (b"efg", 3), (b"efg", 3)]
    with open(path, "rb") as fh:
        assert [_line_at(fh, offset) for offset in range(len(data))] == expected
        assert [_locate(fh, offset)[0] for offset in range(len(data))] == [0, 1, 1, 1, 4, 5, 5, 5, 8, 8, 8]
        assert [_ends_in_window(fh, len(data), offset, len(data)) for offset in range(len(data))] == [5] * 11
    draws = draw_lines(str(path), len(data), 10**4, 1, "lines.txt")
    assert set(zip(draws.lines, draws.lengths)) == set(expected)
    # Each draw's line starts where the file holds it.
    assert all(data[s:s + len(line)] == line and (s == 0 or data[s - 1:s] == b"\n")
               for s, line in zip(draws.starts, draws.lines))


def test_the_lines_around_a_drawn_line(tmp_path):
    """Lines of 2, 3, 4, 5 and 1 bytes (the last without a newline): around "ccc" (bytes 5-8), back until the
    lines' bytes reach `before`, forward until theirs reach `after`, whole lines, none past the file's ends."""
    data = b"a\nbb\nccc\ndddd\ne"
    path = tmp_path / "around.txt"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        assert lines_around(fh, 5, 9, 15, 1, 1) == ([b"bb"], [b"dddd"])
        assert lines_around(fh, 5, 9, 15, 3, 5) == ([b"bb"], [b"dddd"])  # exactly reached: no more
        assert lines_around(fh, 5, 9, 15, 4, 6) == ([b"a", b"bb"], [b"dddd", b"e"])
        assert lines_around(fh, 5, 9, 15, 100, 100) == ([b"a", b"bb"], [b"dddd", b"e"])
        assert lines_around(fh, 5, 9, 15, 0, 0) == ([], [])
        assert lines_around(fh, 0, 2, 15, 10, 0) == ([], [])  # the first line: nothing before
        assert lines_around(fh, 14, 15, 15, 0, 10) == ([], [])  # the last: nothing after
    # Empty lines are lines: one at the file's start (a byte before the drawn line), one just before it.
    path.write_bytes(b"\nab\ncd")
    with open(path, "rb") as fh:
        assert lines_around(fh, 1, 4, 6, 10, 10) == ([b""], [b"cd"])
    path.write_bytes(b"x\n\nab\n")
    with open(path, "rb") as fh:
        assert lines_around(fh, 3, 6, 6, 1, 0) == ([b""], [])
        assert lines_around(fh, 3, 6, 6, 2, 0) == ([b"x", b""], [])


def test_lines_longer_than_a_read_and_windows_that_wrap(tmp_path):
    """Lines of 150,000 and 70,000 bytes (several 64 KiB reads back and forth), the last without a newline; the
    16 KiB windows of a file this size wrap from its end to its start."""
    short, long, last = b"s" * 5, b"L" * 150_000, b"T" * 70_000
    data = short + b"\n" + long + b"\n" + last
    size = len(data)  # 220,007
    path = tmp_path / "long.txt"
    path.write_bytes(data)
    at_long, at_last = len(short) + 1, len(short) + len(long) + 2  # where the long and the last lines start
    cases = {0: (short, 6), 5: (short, 6), at_long: (long, 150_001), at_long + 1: (long, 150_001),
             at_long + 100_000: (long, 150_001), at_last - 1: (long, 150_001), at_last: (last, 70_000),
             at_last + 66_000: (last, 70_000), size - 1: (last, 70_000)}
    with open(path, "rb") as fh:
        assert {offset: _line_at(fh, offset) for offset in cases} == cases
        ends = {offset: _ends_in_window(fh, size, offset, WINDOW)
                for offset in (0, at_long, at_last - 10, at_last, size - 10, size - WINDOW, size - WINDOW - 1)}
    # From the start: the short line's end. Inside a long line: none, or its end. The last line ends at the file's
    # end; a window wrapping past it also holds the short line's end; one ending a byte before the end holds none.
    assert ends == {0: 1, at_long: 0, at_last - 10: 1, at_last: 0, size - 10: 2, size - WINDOW: 1,
                    size - WINDOW - 1: 0}


def test_a_drawn_line_reads_its_neighbourhood_not_the_file(tmp_path):
    """Only the drawn lines are read (a 1% sample of a terabyte reads about 1% of it): finding a short line in the
    middle of 1 MB reads at most a 64 KiB block back and one forward, not the rest of the file."""
    data = b"".join(b"%099d\n" % i for i in range(10_000))  # 1,000,000 bytes of 100-byte lines
    path = tmp_path / "big.txt"
    path.write_bytes(data)

    class Counting:
        def __init__(self, fh):
            self.fh, self.read_bytes = fh, 0

        def seek(self, offset):
            return self.fh.seek(offset)

        def read(self, n=-1):
            got = self.fh.read(n)
            self.read_bytes += len(got)
            return got

    with open(path, "rb") as fh:
        counting = Counting(fh)
        assert _line_at(counting, 500_050) == (b"%099d" % 5000, 100)
        assert counting.read_bytes <= 2 * 65536


def test_records_kept_by_a_coin_in_proportion_to_their_size(tmp_path):
    """A record of s characters is kept with p = min(1, fraction * s / m), m the mean size so far (this one
    included; an empty first record: the fraction itself), at least 1e-9; bad and too long records never. Its
    coin is `keeps` of the seed, the file's identity and its place."""
    texts = ["", "a" * 10, "b" * 30, 5, "c" * 20, "d" * 200, "e" * 400, "f" * 2000, "h" * 4000, "g", ""]
    path = tmp_path / "coin.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    f = 0.25
    p = [0.25, f * 10 * 2 / 10, f * 30 * 3 / 40, 0.0, f * 20 * 4 / 60, f * 200 * 5 / 260, f * 400 * 6 / 660,
         1.0, 0.0, f * 1 * 8 / 2661, 1e-9]  # "f" * 2000 would be 1.32; "h" * 4000 is too long (3000 bytes at most)
    assert p[1:3] == [0.5, 0.5625]
    kept = [0] * len(texts)
    for seed in range(200):
        got = list(coin_records(str(path), ("text",), f, seed, "coin.jsonl", max_record_bytes=3000))
        assert [type(r).__name__ for _, r in got] == ["Document"] * 3 + ["BadRecord"] + ["Document"] * 4 + [
            "BadRecord"] + ["Document"] * 2
        assert [got[i][1].reason for i in (3, 8)] == ["not_a_string", "too_long"]
        for i, (q, _) in enumerate(got):
            assert q == (p[i] if p[i] and keeps(seed, "coin.jsonl", i, p[i]) else 0.0), (seed, i, q)
            kept[i] += q > 0
    assert kept == [55, 98, 121, 0, 71, 194, 183, 200, 0, 0, 0]  # about 200 p (50, 100, 112, 0, 67, 192, 182, 200)
    assert [q for q, _ in coin_records(str(path), ("text",), f, 3, "coin.jsonl", max_record_bytes=3000)] == [
        0.25, 0.5, 0.5625, 0.0, f * 20 * 4 / 60, f * 200 * 5 / 260, f * 400 * 6 / 660, 1.0, 0.0, 0.0, 0.0]


def test_a_coin_never_keeps_with_a_probability_above_one(tmp_path):
    """p = min(1, fraction * s / m), the first record's (no mean yet, an empty one) min(1, fraction): at a fraction
    of 1.5 records of the mean size are kept with probability 1, never 1.5 (1 / p would count a record as two
    thirds of one)."""
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["", "a" * 10, "b" * 10]))
    assert [q for q, _ in coin_records(str(path), ("text",), 1.5, 0, "c.jsonl")] == [1.0, 1.0, 1.0]


def test_a_txt_file_is_one_record_unless_read_a_line_a_record(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("line one\nline two\n")
    whole = list(coin_records(str(path), ("text",), 1.0, 0, "t.txt"))
    assert [(q, r.values) for q, r in whole] == [(1.0, ("line one\nline two\n",))]
    lines = list(coin_records(str(path), ("text",), 1.0, 0, "t.txt", txt_lines=True))
    assert [(q, r.values) for q, r in lines] == [(1.0, ("line one",)), (1.0, ("line two",))]


def test_the_coin_keeps_hashes_below_the_fraction():
    """Kept when the keyed hash (8 bytes of blake2b, big-endian) is below fraction * 2**64: a share `fraction` of
    the records, and a hash exactly at the boundary is not below it."""
    assert sum(keeps(0, "f.jsonl", i, 0.3) for i in range(10_000)) == 3031
    assert [i for i in range(20) if keeps(0, "f.jsonl", i, 0.3)] == [9, 10, 15, 18, 19]
    assert not any(keeps(0, "f.jsonl", i, 0.0) for i in range(1000))
    assert all(keeps(0, "f.jsonl", i, 1.0) for i in range(1000))
    h = int.from_bytes(hashlib.blake2b(b"0:f.jsonl:1646", digest_size=8).digest(), "big")
    assert h == 13485751820839643136 and h % 2048 == 0  # exactly a float: the boundary is a fraction
    assert not keeps(0, "f.jsonl", 1646, h / 2**64)
    assert keeps(0, "f.jsonl", 1646, (h + 2048) / 2**64)


# ---------------------------------------------------------------- estimates of whole jobs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three real corpora (English books, code, 50 languages): three .jsonl files and one .jsonl.zst."""
    import zstandard

    root = tmp_path_factory.mktemp("estimate_corpus")
    en = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_bytes().splitlines(keepends=True)
    (root / "en_a.jsonl").write_bytes(b"".join(en[::2]))
    (root / "en_b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(en[1::2])))
    (root / "code.jsonl").write_bytes(require_shared(SHARED / "corpora" / "code_small.jsonl").read_bytes())
    (root / "ml.jsonl").write_bytes(require_shared(SHARED / "corpora" / "multilingual_dev.jsonl").read_bytes())
    return root


def _truth(corpus: Path) -> int:
    from pipelines.config import load_config
    from pipelines.plan import plan_job
    from pipelines.estimate import _Tokens
    from transforms.core.records import Document
    from transforms.io.readers import read_records

    config, _ = load_config(["LMData", "--input_dir", str(corpus), *TOKENIZER])
    plan = plan_job(config)
    docs = [r for f in plan.files for r in read_records(f.path, plan.keys) if isinstance(r, Document)]
    return sum(_Tokens(plan)(docs))


def test_the_token_interval_holds_the_truth_as_often_as_it_says(corpus):
    """40 seeded samples of 5% (a few hundred kilobytes): the printed 95% interval holds the true token count in
    at least 90% of them (the bench corpora at 1%: `make bench`)."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    truth = _truth(corpus)
    config, _ = load_config(["LMData", "--input_dir", str(corpus), "--output_dir", str(corpus / "never"),
                             *TOKENIZER])
    hits, widths = 0, []
    for seed in range(40):
        e = estimate(config, "5%", seed, job=False)
        hits += e.tokens.low <= truth <= e.tokens.high
        widths.append(e.tokens.relative)
    assert hits >= 36, (hits, truth)
    assert max(widths) < 0.25
    assert not (corpus / "never").exists()


def _near(interval: Interval, truth: float) -> bool:
    """One run: the truth within twice the 95% half-width (3.9 standard errors: a miss once in 10,000 runs); the
    95% intervals themselves are calibrated over many runs above."""
    return abs(interval.value - truth) <= 2 * interval.half_width


def test_the_prediction_matches_the_job(corpus, tmp_path, monkeypatch):
    import pipelines.estimate as module
    from pipelines.config import load_config
    from pipelines.estimate import estimate, render

    args = ["LMData", "--input_dir", str(corpus), "--output_dir", str(tmp_path / "out"), *TOKENIZER,
            "--max_seq_length", "256"]
    config, _ = load_config(args)
    attributed = []  # the sample job's rows told apart by document: checked row by row against its positions
    spied = module._document_costs
    monkeypatch.setattr(module, "_document_costs", lambda *a: attributed.append(spied(*a)) or attributed[-1])
    e = estimate(config, "20%", 0)
    assert len(attributed) == 1 and attributed[0] is not None and len(attributed[0]) == 4
    text = render(e, "LMData")
    assert "tokens" in text and "vCPU-hours" in text and "nothing was written" in text
    assert not (tmp_path / "out").exists()
    params = run_job(args + ["--display_pbar", "False"])
    post = params["post-process"]
    for name, interval, true in (("rows", e.rows, post["n_examples"]),
                                 ("loss-valid tokens", e.loss_valid_tokens, post["loss_valid_tokens"])):
        assert _near(interval, true), (name, interval, true)
    assert _near(e.documents, params["input"]["documents_read"])
    disk = sum(p.stat().st_size for p in (tmp_path / "out").glob("*.h5"))
    assert _near(e.bytes_on_disk, disk), (e.bytes_on_disk, disk)
    assert e.bytes_on_disk.relative < 0.15


def test_bytes_on_disk_by_document_by_hand():
    """A file drawn by byte (12 bytes; draws of 6, 3 and 2 bytes whose documents' rows cost 2, 4 and 6 bytes: the
    Hansen-Hurwitz total 18 2/3, variance 87 1/9, 2 df) and one kept by a coin (two records of 10 and 30 of its
    100 characters, kept with p 0.5 and 1, costing 4 and 12: the ratio form gives 0.4 a character, 40, no
    residual): 58 2/3 bytes of chunks, +- t(2) * sqrt(87 1/9); then the files' own 7,000 bytes and 56 a row
    for 1,000 +- 50 rows."""
    from pipelines.estimate import _Share, _bytes_by_document

    by_byte_share = _Share(12.0, (6, 3, 2), (1, 1, 1), (0, 1, 2), ((1, 0, 7), (1, 0, 4), (1, 0, 3)))
    by_coin_share = _Share(100.0, (10.0, 30.0), (5, 9), (0, 1), ((5, 0, 20), (9, 0, 40)), (0.5, 1.0))
    assert by_poisson([4, 12], [0.5, 1.0], [10.0, 30.0], 100.0) == Stratum(40.0, 0.0, 1)
    got = _bytes_by_document([by_byte_share, by_coin_share], [np.array([2.0, 4.0, 6.0]), np.array([4.0, 12.0])],
                             Interval(1000.0, 50.0), (7000.0, 56.0))
    assert got.value == pytest.approx(58 + 2 / 3 + 7000 + 56_000)
    assert got.half_width == pytest.approx(student_t(2) * math.sqrt(87 + 1 / 9) + 56 * 50)


def test_bytes_on_disk_by_row_by_hand():
    """Rows 100 +- 10%, chunks of 1, 2 and 3 bytes (mean 2): 200 bytes +- the rows' 10% and the mean's
    t(n - 1) sd / sqrt(n) / mean, n the documents (never more than the rows' 3, never fewer than 2); then the
    files' own 500 bytes and 5 a row. No rows sampled: the files' own bytes alone."""
    from pipelines.estimate import _bytes_by_row

    for documents, n in ((3, 3), (10, 3), (1.5, 2)):
        got = _bytes_by_row(Interval(100.0, 10.0), [1, 2, 3], documents, (500.0, 5.0))
        spread = student_t(n - 1) / math.sqrt(n) / 2
        assert got.value == pytest.approx(200 + 500 + 500)
        assert got.half_width == pytest.approx(200 * math.hypot(0.1, spread) + 5 * 10), documents
    assert _bytes_by_row(Interval(100.0, 10.0), [], 3, (500.0, 5.0)) == Interval(1000.0, 50.0)


def test_the_rows_a_document_weighs_and_the_sizes_a_remainder_draws_from():
    """Weights of the sample job's documents (its records with tokens): their tokens where rows are windows or bins
    of tokens, one each where a record is a row (Chat, DPO, Summarization). A mixture source's documents: their
    tokens, and how many each stands for (bytes: 12 / (3 * 6) and 12 / (3 * 2); coin: 1 / p)."""
    from types import SimpleNamespace

    from pipelines.estimate import _document_lengths, _row_weights, _Share

    share = _Share(12.0, (6, 3, 2), (1, 0, 3), (0, 1, 2), ((5, 0, 1), (0, -1, 1), (7, 0, 1)))

    def plan(one_row, rows):
        return SimpleNamespace(traits=SimpleNamespace(one_row_per_record=one_row, rows=rows))

    assert _row_weights(plan(False, "windows"), share) == [5.0, 7.0]
    assert _row_weights(plan(False, "pairs"), share) == [1.0, 1.0]
    assert _row_weights(plan(True, "chat"), share) == [1.0, 1.0]
    coin = _Share(100.0, (10.0, 30.0), (5, 9), (0, 1), ((5, 0, 20), (9, 0, 40)), (0.5, 1.0))
    got = _document_lengths([(share, 0), (coin, 1)], 3)
    assert got[0][0].tolist() == [1.0, 3.0] and got[0][1] == pytest.approx([2 / 3, 2.0])
    assert got[1][0].tolist() == [5.0, 9.0] and got[1][1].tolist() == [2.0, 1.0] and got[2] is None


def test_what_an_hdf5_shard_costs_beyond_its_chunks():
    """Measured (this h5py): a few kB a file, about 56 bytes a row (an entry of its chunk index)."""
    from pipelines.estimate import _hdf5_costs

    per_file, per_row = _hdf5_costs(2048, 3)
    assert 2_000 < per_file < 12_000 and 50 < per_row < 64


def test_a_drawn_document_is_packed_among_the_text_around_it(tmp_path, monkeypatch):
    """With `context`, each drawn document of the share is written between the end of the text before it and the
    start of the text after it in its file (whole lines read; the farthest document cut so that each side holds
    a row's worth of characters, by the drawn document's characters per token, or what the file has): the job on
    the sample packs it among what the job packs it among."""
    import pipelines.estimate as module
    from pipelines.config import load_config
    from pipelines.plan import plan_job

    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    texts = [" ".join(words[(i + j) % 8] for j in range(20 + 7 * i)) for i in range(6)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    config, _ = load_config(["LMData", "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "o"),
                             *TOKENIZER, "--max_seq_length", "16"])
    plan = plan_job(config)
    f = plan.files[0]
    size = Path(f.path).stat().st_size
    target = tmp_path / "sample" / "a.jsonl"
    around = []
    spied = module._context
    monkeypatch.setattr(module, "_context", lambda *a: around.append(spied(*a)) or around[-1])
    drawn = module._by_byte(plan, module._Counter(None, module._Tokens(plan)), f, size, 0.3, 0,
                            str(tmp_path / "w"), str(target), True)
    share = drawn.share
    written = [json.loads(line)["text"] for line in target.read_text().splitlines()]
    assert len(written) == len(share.records) > len(share.drawn) >= 1
    assert set(around[0]) == set(range(len(share.drawn)))
    for j, (before, after) in around[0].items():
        me = written[share.drawn[j]]
        i = texts.index(me)
        need = 16 * len(me) / share.tokens[j]  # a row's worth of characters
        before = [json.loads(data)["text"] for data, _ in before]
        after = [json.loads(data)["text"] for data, _ in after]
        assert "".join(before) == "".join(texts[:i])[-len("".join(before)):] if before else i == 0
        assert "".join(after) == "".join(texts[i + 1:])[:len("".join(after))]
        for side, lines in ((before, texts[:i]), (after, texts[i + 1:])):
            assert sum(map(len, side)) <= need + 1
            assert sum(map(len, side)) >= min(int(need), sum(map(len, lines)))
    assert sum(t for t, _, _ in share.records) == drawn.whole[3]  # the job on the sample's tokens, context in


def test_estimate_on_the_command_line(corpus, capsys):
    from pipelines.create_hdf5_dataset import main

    assert main(["estimate", "LMData", "--input_dir", str(corpus), *TOKENIZER, "--sample", "2MB",
                 "--sample_seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "estimate of the LMData job" in out and "note: en_b.jsonl.zst: read whole" in out
    assert main(["estimate", "LMData", "--input_dir", str(corpus), *TOKENIZER, "--sample", "lots"]) == 2
    assert main(["estimate", "--help"]) == 0


def test_a_mixtures_availability_and_largest_total(corpus, tmp_path):
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    mixture = json.dumps([{"source": str(corpus / "en_*.jsonl"), "name": "en", "weight": 0.5},
                          {"source": str(corpus / "code.jsonl"), "name": "code", "weight": 0.5}])
    config, _ = load_config(["LMData", "--mixture", mixture, "--output_dir", str(tmp_path / "o"), *TOKENIZER])
    e = estimate(config, "20%", 0)
    assert set(e.per_source) == {"en", "code"}
    real = run_job(["LMData", "--mixture", mixture, "--output_dir", str(tmp_path / "r"), *TOKENIZER,
                    "--display_pbar", "False"])["mixture"]
    for name, interval in e.per_source.items():
        assert _near(interval, real["sources"][name]["tokens_available"]), name
    assert _near(e.mixture_total, real["total_tokens_target"])


@pytest.mark.parametrize("mode", ["Chat", "DPO"])
def test_chat_records_are_counted_as_their_template_renders_them(tmp_path, mode):
    """Conversations (a .jsonl drawn by byte and a .jsonl.zst kept by coin), some too long for a row, some refused
    by the reader's check: the estimate's tokens are the template's tokens of the records the job keeps."""
    import zstandard

    from pipelines.config import load_config
    from pipelines.estimate import estimate

    qwen = require_shared(SHARED / "tokenizers" / "qwen2.5-instruct")
    rng = np.random.default_rng(5)
    words = ["alpha", "βeta", "γάμμα", "delta", "日本語", "naïve", "x", "the", "of", "and"]

    def text(lo, hi):
        return " ".join(rng.choice(words, int(rng.integers(lo, hi))))

    lines = []
    for i in range(1500):
        if mode == "DPO":
            record = {"prompt": text(2, 40), "chosen": text(1, 30), "rejected": "no " + text(1, 30)}
        else:
            record = {"messages": [m for t in range(int(rng.integers(1, 4))) for m in (
                {"role": "user", "content": text(1, 30 if i % 9 else 300)},
                {"role": "assistant", "content": text(1, 30)})]}
        if i % 50 == 7:  # refused by the reader's check: a role the template does not know / no chosen side
            record = {"messages": [{"role": "narrator", "content": "x"}]} if mode == "Chat" else {"prompt": "q"}
        lines.append(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"".join(lines[::2]))
    (tmp_path / "in" / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[1::2])))
    common = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(qwen),
              "--max_seq_length", "256", *(["--prompt_key", "prompt"] if mode == "DPO" else [])]
    config, _ = load_config([mode, "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "never"),
                             *common])
    e = estimate(config, "25%", 0)
    assert not (tmp_path / "never").exists()
    # The truth: a one-source mixture counts exactly the tokens of the records it could take.
    mixture = json.dumps([{"source": str(tmp_path / "in"), "weight": 1}])
    params = run_job([mode, "--mixture", mixture, "--output_dir", str(tmp_path / "out"), *common,
                      "--display_pbar", "False"])
    inp = params["input"]
    assert inp["bad"] > 0 and (mode == "DPO" or inp["dropped_by_reason"]["too_long"] > 0)
    truth = sum(s["tokens_available"] for s in params["mixture"]["sources"].values())
    assert _near(e.tokens, truth), (e.tokens, truth)
    assert _near(e.documents, inp["good"]), (e.documents, inp)
    assert _near(e.rows, params["post-process"]["n_examples"]), (e.rows, params["post-process"])
    assert e.tokens.relative < 0.2
