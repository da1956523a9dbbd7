"""The estimate's wall time: what any job pays once, the rest scaled (transforms.core.estimate.scaled_seconds)."""

from __future__ import annotations

import pytest

from transforms.core.estimate import scaled_seconds


def test_the_fixed_price_is_paid_once_not_scaled_with_the_data():
    # A 1% sample job of 1.0 s whose job of one record took 0.5 s: 0.5 + 0.5 / 0.01, not 1.0 / 0.01.
    assert scaled_seconds(0.5, 1.0, 0.01) == pytest.approx(50.5)
    # The whole data in the sample: the sample job's own seconds.
    assert scaled_seconds(0.5, 3.0, 1.0) == 3.0


def test_a_sample_job_faster_than_the_job_of_one_record_costs_the_fixed_price():
    assert scaled_seconds(0.8, 0.6, 0.01) == 0.8  # timer noise: never a negative share of the data


def test_no_share_is_no_division_by_zero():
    assert scaled_seconds(0.5, 0.5, 0.0) == 0.5
