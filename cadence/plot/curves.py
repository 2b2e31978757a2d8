"""The numbers of a learning-curve plot: smoothing, a common x grid, mean and bootstrap band.

The seeds of one config log at different x (wall time always, env steps when their
evaluation points differ), so each run's curve is interpolated linearly onto one grid
before they are averaged. The grid covers only the x range every run of the group has
data for: past the end of its shortest run a group's mean would silently average fewer
seeds. The band is the percentile bootstrap over seeds of the mean (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993, ch. 13), with one set of resampled seeds for
the whole grid, drawn from a seeded generator, so the same runs give the same picture.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

MAX_GRID_POINTS = 1000


@attrs.frozen(eq=False)  # arrays: compared by identity
class Curve:
    """One group's line and band.

    Attributes:
        x: the grid, ``[G]``.
        mean: the mean over runs at each grid point, ``[G]``.
        low: the lower end of the confidence band, ``[G]``.
        high: its upper end, ``[G]``.
        num_runs: how many runs (seeds) every point averages.
    """

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    num_runs: int


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """The trailing mean of the last ``window`` values at each point (fewer at the start).

    >>> moving_average(np.array([1.0, 2.0, 3.0, 4.0]), 2).tolist()
    [1.0, 1.5, 2.5, 3.5]

    Args:
        values: ``[N]``.
        window: points per mean; 1 leaves the values as they are.

    Returns:
        ``[N]`` float64.
    """
    if window < 1:
        raise ValueError(f"the smoothing window must be >= 1, got {window}")
    values = np.asarray(values, dtype=np.float64)
    sums = np.concatenate([[0.0], np.cumsum(values)])
    end = np.arange(1, len(values) + 1)
    start = np.maximum(end - window, 0)
    return (sums[end] - sums[start]) / (end - start)


def common_grid(xs: Sequence[np.ndarray], max_points: int = MAX_GRID_POINTS) -> np.ndarray:
    """The x grid on which every run of a group has data.

    The union of the runs' own x values inside ``[max of their firsts, min of their
    lasts]``, so runs logged at the same x are compared there without interpolation; more
    than ``max_points`` of them are replaced by as many evenly spaced points.

    Args:
        xs: each run's sorted x values, ``[N_i]``.
        max_points: the largest grid.

    Returns:
        ``[G]`` sorted float64; empty when the runs' x ranges do not overlap.
    """
    low = max(float(x[0]) for x in xs)
    high = min(float(x[-1]) for x in xs)
    if low > high:
        return np.empty(0)
    union = np.unique(np.concatenate([np.asarray(x, dtype=np.float64) for x in xs]))
    grid = union[(union >= low) & (union <= high)]
    if len(grid) > max_points:
        grid = np.linspace(low, high, max_points)
    return grid


def align(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], grid: np.ndarray) -> np.ndarray:
    """Each run's values linearly interpolated at ``grid`` (inside every run's range).

    Args:
        xs: each run's sorted x values, ``[N_i]``.
        ys: each run's values, ``[N_i]``.
        grid: ``[G]``, from `common_grid`.

    Returns:
        ``[S, G]``: row s is run s at the grid points.
    """
    return np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)])


def bootstrap_band(
    values: np.ndarray,
    confidence: float = 0.95,
    num_resamples: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile-bootstrap confidence interval of the mean over runs at each point.

    Each resample draws S runs with replacement from the S rows; its mean is taken at
    every column with the same draw. With one run the band is that run itself.

    Args:
        values: ``[S, G]``, S runs at G points.
        confidence: the interval's coverage, in (0, 1).
        num_resamples: bootstrap resamples.
        seed: seed of the resampling, so that the band is reproducible.

    Returns:
        ``(low, high)``, each ``[G]``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    values = np.asarray(values, dtype=np.float64)
    num_runs = values.shape[0]
    draws = np.random.default_rng(seed).integers(0, num_runs, size=(num_resamples, num_runs))
    # How often each run is drawn in each resample: the resampled means are one matmul.
    counts = np.zeros((num_resamples, num_runs))
    np.add.at(counts, (np.arange(num_resamples)[:, None], draws), 1.0)
    means = counts @ values / num_runs  # [num_resamples, G]
    tail = 100.0 * (1.0 - confidence) / 2.0
    return np.percentile(means, tail, axis=0), np.percentile(means, 100.0 - tail, axis=0)


def group_curve(
    xs: Sequence[np.ndarray],
    ys: Sequence[np.ndarray],
    smooth: int = 1,
    confidence: float = 0.95,
    seed: int = 0,
) -> Curve:
    """One group's curve: each run smoothed, aligned on the common grid, then averaged.

    Args:
        xs: each run's sorted x values, ``[N_i]``, at least one point each.
        ys: each run's values, ``[N_i]``.
        smooth: moving-average window applied to each run before alignment (1: none).
        confidence: coverage of the bootstrap band.
        seed: seed of the bootstrap.

    Returns:
        The `Curve`; its grid is empty when the runs share no x range.
    """
    ys = [moving_average(y, smooth) for y in ys]
    grid = common_grid(xs)
    values = align(xs, ys, grid)
    low, high = bootstrap_band(values, confidence, seed=seed)
    return Curve(grid, values.mean(axis=0), low, high, len(xs))
