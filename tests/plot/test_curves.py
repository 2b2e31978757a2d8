"""The curve arithmetic against hand-computed values: smoothing, the common grid, the
alignment by interpolation, and the bootstrap band."""

import numpy as np
import pytest

from cadence.plot.curves import align, bootstrap_band, common_grid, group_curve, moving_average


def test_moving_average_is_the_trailing_mean_with_shorter_windows_at_the_start():
    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    assert moving_average(values, 3).tolist() == [1.0, 1.5, 2.0, 3.0, 17 / 3]
    assert moving_average(values, 1).tolist() == values.tolist()
    assert moving_average(values, 99).tolist() == [1.0, 1.5, 2.0, 2.5, 4.0]
    with pytest.raises(ValueError, match=">= 1"):
        moving_average(values, 0)


def test_common_grid_is_the_union_of_x_inside_the_range_every_run_covers():
    xs = [np.array([0.0, 10.0, 20.0, 30.0]), np.array([5.0, 15.0, 25.0])]
    assert common_grid(xs).tolist() == [5.0, 10.0, 15.0, 20.0, 25.0]
    same = [np.array([256.0, 512.0]), np.array([256.0, 512.0])]
    assert common_grid(same).tolist() == [256.0, 512.0]


def test_common_grid_is_empty_where_ranges_do_not_overlap_and_even_when_too_fine():
    assert common_grid([np.array([0.0, 1.0]), np.array([2.0, 3.0])]).size == 0
    fine = [np.arange(0.0, 100.0), np.arange(0.5, 100.5)]
    assert common_grid(fine, max_points=5).tolist() == [0.5, 25.125, 49.75, 74.375, 99.0]


def test_align_interpolates_each_run_linearly_at_the_grid():
    xs = [np.array([0.0, 10.0, 20.0]), np.array([5.0, 15.0])]
    ys = [np.array([0.0, 10.0, 40.0]), np.array([1.0, 3.0])]
    aligned = align(xs, ys, np.array([5.0, 10.0, 15.0]))
    assert aligned.tolist() == [[5.0, 10.0, 25.0], [1.0, 2.0, 3.0]]


def test_bootstrap_band_of_two_runs_spans_them_and_of_equal_runs_is_their_value():
    # Resampled means of runs 0 and 2 are 0, 1 or 2 with probabilities 1/4, 1/2, 1/4:
    # both 2.5% tails fall on the extremes.
    low, high = bootstrap_band(np.array([[0.0, 5.0], [2.0, 5.0]]), seed=3)
    assert low.tolist() == [0.0, 5.0] and high.tolist() == [2.0, 5.0]
    low, high = bootstrap_band(np.array([[7.0, -1.0]]))
    assert low.tolist() == high.tolist() == [7.0, -1.0]


def test_bootstrap_band_equals_a_loop_over_the_same_resamples():
    values = np.array([[1.0, 0.0], [4.0, 2.0], [2.0, 8.0]])
    low, high = bootstrap_band(values, confidence=0.8, num_resamples=7, seed=11)
    draws = np.random.default_rng(11).integers(0, 3, size=(7, 3))
    means = np.array([[np.mean([values[s, g] for s in draw]) for g in range(2)] for draw in draws])
    np.testing.assert_allclose(low, np.percentile(means, 10.0, axis=0))
    np.testing.assert_allclose(high, np.percentile(means, 90.0, axis=0))


def test_bootstrap_band_matches_the_normal_interval_on_many_resamples_and_is_seeded():
    # Seeds 1..5: the bootstrap mean has sd sqrt(2)/sqrt(5) (population sd over sqrt(S)).
    values = np.arange(1.0, 6.0)[:, None]
    low, high = bootstrap_band(values, num_resamples=20000, seed=0)
    half_width = 1.96 * np.sqrt(2.0 / 5.0)
    assert low[0] == pytest.approx(3.0 - half_width, abs=0.15)
    assert high[0] == pytest.approx(3.0 + half_width, abs=0.15)
    again = bootstrap_band(values, num_resamples=20000, seed=0)
    assert (again[0] == low).all() and (again[1] == high).all()
    noisy = np.random.default_rng(1).normal(size=(5, 50))
    assert not np.array_equal(bootstrap_band(noisy, seed=1)[0], bootstrap_band(noisy, seed=2)[0])


def test_group_curve_smooths_each_run_then_averages_on_the_common_grid():
    xs = [np.array([0.0, 10.0, 20.0]), np.array([0.0, 10.0, 20.0, 30.0])]
    ys = [np.array([0.0, 2.0, 4.0]), np.array([2.0, 2.0, 6.0, 100.0])]
    curve = group_curve(xs, ys, smooth=2)
    # Smoothed: run 0 -> [0, 1, 3], run 1 -> [2, 2, 4, 53]; the grid stops at 20.
    assert curve.x.tolist() == [0.0, 10.0, 20.0]
    assert curve.mean.tolist() == [1.0, 1.5, 3.5]
    assert curve.num_runs == 2
    assert (curve.low <= curve.mean).all() and (curve.mean <= curve.high).all()
    assert curve.low.tolist() == [0.0, 1.0, 3.0] and curve.high.tolist() == [2.0, 2.0, 4.0]
