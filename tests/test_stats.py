"""lab/runs/statistics.py: intervals against tabulated t values, intervals and paired tests
against hand computations on tiny constructed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posattn.lab.runs.statistics import (
    mean_interval,
    paired_bootstrap,
    paired_bootstrap_tasks,
    paired_permutation,
    sign_flip_p_value,
)


@pytest.mark.parametrize(
    ("p", "dof", "expected"),
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 4, 2.7764),
        (0.975, 9, 2.2622),
        (0.975, 30, 2.0423),
        (0.95, 5, 2.0150),
        (0.995, 3, 5.8409),
        (0.975, 1e6, 1.9600),
    ],
)
def test_interval_half_width_is_the_printed_t_quantile(p, dof, expected):
    # n = dof + 1 values; the half width over s / sqrt(n) is t((1 + confidence) / 2, n - 1)
    values = np.random.default_rng(dof if dof < 100 else 0).normal(size=int(dof) + 1)
    interval = mean_interval(values, confidence=2 * p - 1)
    scale = values.std(ddof=1) / math.sqrt(values.size)
    assert (interval.high - interval.mean) / scale == pytest.approx(expected, abs=5e-5)
    assert (interval.mean - interval.low) / scale == pytest.approx(expected, abs=5e-5)


def test_mean_interval_by_hand():
    # values 1, 2, 3: mean 2, s = 1, half width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051
    interval = mean_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert interval.mean == 2.0 and interval.n == 3
    assert interval.low == pytest.approx(2 - half, abs=1e-9)
    assert interval.high == pytest.approx(2 + half, abs=1e-9)
    assert interval.to_dict() == {"mean": 2.0, "interval": [interval.low, interval.high], "runs": 3}
    # equal values: a zero-width interval; one value: no interval
    same = mean_interval([0.7] * 5)
    assert (same.mean, same.low, same.high) == pytest.approx((0.7, 0.7, 0.7), abs=1e-15)
    one = mean_interval([4.0])
    assert (one.mean, one.low, one.high, one.n) == (4.0, None, None, 1)
    assert one.to_dict() == {"mean": 4.0, "interval": None, "runs": 1}
    # 90%: t(0.95, 4) = 2.1318; values 0, 0, 0, 0, 5: mean 1, s = sqrt(5)
    ninety = mean_interval([0, 0, 0, 0, 5], confidence=0.9)
    assert ninety.high - 1 == pytest.approx(2.1318 * math.sqrt(5) / math.sqrt(5), abs=1e-4)
    with pytest.raises(ValueError):
        mean_interval([])


def test_mean_interval_on_a_grid_has_at_least_the_grids_spread():
    # two seeds both read 0.30 on a grid of step 0.05: s = 0.05 / sqrt(12), t(0.975, 1) = 12.7062
    tied = mean_interval([0.3, 0.3], resolution=0.05)
    half = 12.706204736174698 * (0.05 / math.sqrt(12)) / math.sqrt(2)
    assert tied.mean == pytest.approx(0.3) and tied.high == pytest.approx(0.3 + half, abs=1e-12)
    assert tied.low == pytest.approx(0.3 - half, abs=1e-12)
    # a spread wider than the grid's is kept as measured
    wide = mean_interval([1.0, 2.0, 3.0], resolution=0.5)
    assert wide.high == pytest.approx(2 + 4.302652729911275 / math.sqrt(3), abs=1e-9)
    assert mean_interval([0.3], resolution=0.05).bounds is None
    with pytest.raises(ValueError, match=r"resolution=-0\.1"):
        mean_interval([1.0, 2.0], resolution=-0.1)


def test_mean_interval_is_cut_to_the_scale_it_is_declared_on():
    # Two seeds at 10% and 95%: mean 52.5, half-width t(0.975, 1) * s / sqrt(2) with
    # s = 85 / sqrt(2), so the whole interval runs far past both ends of 0-100.
    t = 12.706204736174707
    whole = mean_interval([10.0, 95.0])
    assert whole.low == pytest.approx(52.5 - t * 42.5)
    assert whole.high == pytest.approx(52.5 + t * 42.5)
    cut = mean_interval([10.0, 95.0], bounds=(0.0, 100.0))
    assert (cut.mean, cut.low, cut.high, cut.n) == (52.5, 0.0, 100.0, 2)
    # Inside the bounds the interval is the whole one; one value still has none.
    narrow = mean_interval([50.0, 51.0, 52.0], bounds=(0.0, 100.0))
    assert narrow.bounds == mean_interval([50.0, 51.0, 52.0]).bounds
    assert mean_interval([99.0], bounds=(0.0, 100.0)).bounds is None
    # One side cut only.
    high = mean_interval([98.0, 100.0], bounds=(0.0, 100.0))
    assert high.low == pytest.approx(99.0 - t) and high.high == 100.0
    with pytest.raises(ValueError, match=r"outside bounds=\(0\.0, 1\.0\)"):
        mean_interval([50.0, 60.0], bounds=(0.0, 1.0))  # percent given on a 0-1 scale
    with pytest.raises(ValueError, match=r"bounds=\(1\.0, 0\.0\)"):
        mean_interval([0.5], bounds=(1.0, 0.0))


def test_paired_bootstrap_all_equal_gives_zero_difference_and_p_one():
    rng = np.random.default_rng(3)
    a = (rng.random((3, 40)) > 0.5).astype(float)
    result = paired_bootstrap(a, a.copy(), resamples=2000)
    assert (result.difference, result.low, result.high, result.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert result.runs == 3


def test_paired_bootstrap_constant_shift_gives_the_shift_and_a_zero_width_interval():
    rng = np.random.default_rng(4)
    b = rng.integers(0, 2, size=(4, 25)).astype(float)
    result = paired_bootstrap(b + 1.0, b, resamples=2000)
    assert result.difference == 1.0
    assert result.low == pytest.approx(1.0, abs=1e-12)
    assert result.high == pytest.approx(1.0, abs=1e-12)
    assert result.p_value == pytest.approx(2 / 2001)  # every replicate above 0: the floor


def test_paired_bootstrap_by_hand_on_one_run_of_two_examples():
    # one run, differences (1, 0) on two examples: replicates are the mean of two draws from
    # {1, 0}: 1 (prob 1/4), 0.5 (1/2), 0 (1/4); the difference is 0.5
    result = paired_bootstrap([[1.0, 1.0]], [[0.0, 1.0]], resamples=10000, seed=7)
    assert result.difference == 0.5
    assert (result.low, result.high) == (0.0, 1.0)
    # P*(<= 0) ~ 1/4, so p ~ 2 * 1/4 = 0.5
    assert result.p_value == pytest.approx(0.5, abs=0.03)


def test_paired_bootstrap_is_reproducible_and_resamples_runs():
    rng = np.random.default_rng(5)
    a = rng.random((5, 200))
    b = a - 0.05 + 0.02 * rng.standard_normal((5, 1))  # a run effect: seeds disagree a bit
    first, second = paired_bootstrap(a, b), paired_bootstrap(a, b)
    assert first == second
    assert first.low < 0.05 < first.high and first.low > 0
    assert first.difference == pytest.approx(float((a - b).mean()))
    # resampling runs: the interval is at least as wide as the spread of the run means allows
    run_means = (a - b).mean(axis=1)
    assert first.high - first.low > 0.5 * (run_means.std() / math.sqrt(5))


def test_paired_bootstrap_over_tasks_averages_task_differences():
    # task 1: shift 1 on 3 examples; task 2: shift 0 on 5 examples: the average is 0.5
    a = [np.ones((2, 3)), np.zeros((2, 5))]
    b = [np.zeros((2, 3)), np.zeros((2, 5))]
    result = paired_bootstrap_tasks(a, b, resamples=1000)
    assert result.difference == 0.5
    assert result.low == pytest.approx(0.5) and result.high == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same runs"):
        uneven = [np.ones((2, 3)), np.ones((3, 3))]
        paired_bootstrap_tasks(uneven, uneven)
    with pytest.raises(ValueError, match="one shape"):
        paired_bootstrap(np.ones((2, 3)), np.ones((2, 4)))


def test_exact_sign_flip_by_hand():
    # three seeds all positive: only all-plus and all-minus reach |sum| = 6, so p = 2/8
    assert sign_flip_p_value([1.0, 2.0, 3.0]) == 0.25
    # (1, -1, 3): sums of s.d over 8 sign vectors: +-3, +-1, +-5, +-3 -> |.| >= 3 in 6 of 8
    assert sign_flip_p_value([1.0, -1.0, 3.0]) == 0.75
    assert sign_flip_p_value([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_p_value([0.4]) == 1.0
    # five seeds all positive: 2 / 32
    assert sign_flip_p_value([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32


def test_paired_permutation_difference_interval_and_p():
    a, b = [3.0, 4.0, 5.0], [2.0, 2.0, 2.0]  # differences 1, 2, 3
    result = paired_permutation(a, b)
    half = 4.302652729911275 / math.sqrt(3)
    assert result.difference == 2.0 and result.p_value == 0.25 and result.runs == 3
    assert (result.low, result.high) == pytest.approx((2 - half, 2 + half), abs=1e-9)
    equal = paired_permutation([1.0, 2.0], [1.0, 2.0])
    assert (equal.difference, equal.low, equal.high, equal.p_value) == (0.0, 0.0, 0.0, 1.0)
    shift = paired_permutation([1.5, 2.5, 0.5, 4.5], [1.0, 2.0, 0.0, 4.0])
    assert (shift.difference, shift.low, shift.high) == (0.5, 0.5, 0.5)
    assert shift.p_value == 2 / 16
    one = paired_permutation([2.0], [1.0])
    assert (one.difference, one.bounds, one.p_value) == (1.0, None, 1.0)
    # cut to the limits of a difference on the scale, the mean and p unchanged
    cut = paired_permutation(a, b, bounds=(-3.0, 3.0))
    assert (cut.difference, cut.p_value) == (2.0, 0.25)
    assert (cut.low, cut.high) == pytest.approx((2 - half, 3.0), abs=1e-9)


def test_sign_flip_beyond_the_exact_limit_is_a_seeded_monte_carlo():
    d = np.linspace(0.1, 2.0, 20)  # all positive: the exact p would be 2 / 2^20
    p = sign_flip_p_value(d)
    assert p == sign_flip_p_value(d)
    assert p == pytest.approx(1 / (65536 + 1), abs=3 / 65537)
