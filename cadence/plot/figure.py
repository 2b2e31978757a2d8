"""`plot_runs`: learning curves of run directories drawn into a PNG, SVG or PDF file.

matplotlib is an optional dependency (``pip install 'cadence[plot]'``), imported here on
first use only. The figure is a bare `matplotlib.figure.Figure`, never pyplot: nothing
global (no backend switch, no open windows) changes in the caller's process, and PNGs are
rendered by Agg.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import attrs

from cadence.plot.curves import Curve, group_curve
from cadence.plot.groups import group_labels, group_runs, shared_seeds, shared_title
from cadence.plot.runs import (
    NoMetricsError,
    PlotError,
    Run,
    XAxis,
    check_metric,
    find_runs,
    load_run,
    metric_series,
)

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'cadence[plot]'"
FORMATS = (".png", ".svg", ".pdf")
CUT_WARNING = 0.05  # warn when a group's curve stops this fraction of its range short
_X_LABELS = {"env_steps": "env steps", "wall_time": "wall time"}


@attrs.frozen(eq=False)  # runs and arrays: compared by identity
class GroupCurve:
    """One line of the figure: a group's label, its runs and its `Curve`."""

    label: str
    runs: tuple[Run, ...]
    curve: Curve


def require_matplotlib() -> ModuleType:
    """The ``matplotlib`` module.

    Raises:
        PlotError: it is not installed; the message gives the pip line.
    """
    try:
        import matplotlib
    except ImportError:
        raise PlotError(f"cadence plot needs matplotlib: {INSTALL_HINT}") from None
    return matplotlib


def plot_runs(
    patterns: Sequence[str],
    out: Path,
    metric: str = "eval/episode_return",
    x: XAxis = "env_steps",
    title: str | None = None,
    smooth: int = 1,
    seed: int = 0,
) -> list[GroupCurve]:
    """Draws the mean and 95% bootstrap band over seeds of each group of runs.

    Args:
        patterns: run directories, globs of them, or directories holding runs (`find_runs`).
        out: the image; its suffix (``.png``, ``.svg``, ``.pdf``) chooses the format.
        metric: the metric of ``metrics.jsonl`` on the y axis.
        x: ``"env_steps"`` or ``"wall_time"`` (seconds since the run started, resumes
            included) on the x axis.
        title: the figure's title (default: what the runs share, see `shared_title`).
        smooth: moving-average window over each run's points (1: none).
        seed: seed of the bootstrap resampling.

    Returns:
        The drawn groups, in legend order.

    Raises:
        PlotError: no run matched, a run has no metrics or lacks ``metric``, the format
            is not one of `FORMATS`, a group's runs share no x range, or matplotlib is
            missing.
    """
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise PlotError(f"--out {out}: the suffix must be one of {', '.join(FORMATS)}")
    if smooth < 1:
        raise PlotError(f"--smooth must be >= 1, got {smooth}")
    require_matplotlib()
    runs = _load_runs(find_runs(patterns))
    check_metric(runs, metric)
    groups = group_runs(runs)
    labels = group_labels(groups)
    for label, group in zip(labels, groups, strict=True):
        _warn_shared_seeds(label, group)
    curves = [
        GroupCurve(label, tuple(group), _curve(label, group, metric, x, smooth, seed))
        for label, group in zip(labels, groups, strict=True)
    ]
    _draw(curves, out, title or shared_title(groups), x, metric)
    return curves


def _load_runs(directories: Sequence[Path]) -> list[Run]:
    """The runs of ``directories``, leaving out (with a warning) those without a metric yet
    as long as one has some: a glob over a sweep or a seed batch often catches a run that
    has just started.

    Raises:
        PlotError: a run cannot be read, or none has a metric yet.
    """
    runs, fresh = [], []
    for directory in directories:
        try:
            runs.append(load_run(directory))
        except NoMetricsError as error:
            fresh.append(error)
    if not runs:
        raise fresh[0]
    if fresh:
        logger.warning(
            "left out %d run(s) without metrics yet (a run logs its first point after its "
            "first training iteration): %s",
            len(fresh),
            "; ".join(str(error).split(" has no metrics")[0] for error in fresh[:5]),
        )
    return runs


def _warn_shared_seeds(label: str, group: Sequence[Run]) -> None:
    """Warns of runs of one config that share a seed: each is drawn and counted as a seed
    of its own (dropping one would hide data the user asked for), but reruns of one seed
    repeat its numbers and so narrow the band without adding evidence."""
    for seed, runs in shared_seeds(group).items():
        logger.warning(
            "%s: %d runs share seed %s (%s); each is counted in the mean and band as a seed "
            "of its own, and repeats narrow the band. Name the runs to plot to leave some out",
            " ".join(label.split()),
            len(runs),
            seed,
            ", ".join(str(run.directory) for run in runs),
        )


def _curve(
    label: str, group: Sequence[Run], metric: str, x: XAxis, smooth: int, seed: int
) -> Curve:
    series = [metric_series(run, metric, x) for run in group]
    xs, ys = [s[0] for s in series], [s[1] for s in series]
    curve = group_curve(xs, ys, smooth=smooth, seed=seed)
    if len(curve.x) == 0:
        ranges = ", ".join(
            f"{run.directory}: {xr[0]:g}-{xr[-1]:g}" for run, xr in zip(group, xs, strict=True)
        )
        advice = (
            "runs at different speeds? plot them against --x env_steps"
            if x == "wall_time"
            else "let the shorter runs train further, or leave them out"
        )
        raise PlotError(
            f"the seeds of one config share no range of {x}, so no point has all of them "
            f"({ranges}); {advice}"
        )
    ends = [float(xr[-1]) for xr in xs]
    # A run that ends a log point early (no episode finished in its last iteration) is
    # not worth a warning; one that stopped well short of the others is.
    if max(ends) - curve.x[-1] > CUT_WARNING * (max(ends) - curve.x[0]):
        logger.warning(
            "%s: drawn up to %s %g, where the %s of %s ends; the longest run's reaches %g",
            " ".join(label.split()),
            x,
            curve.x[-1],
            metric,
            group[ends.index(min(ends))].directory,
            max(ends),
        )
    return curve


def _draw(curves: Sequence[GroupCurve], out: Path, title: str, x: XAxis, metric: str) -> None:
    require_matplotlib()
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.subplots()
    scale, unit = _x_scale(curves, x)
    for index, line in enumerate(curves):
        color = f"C{index % 10}"
        curve = line.curve
        xs = curve.x / scale
        axes.fill_between(xs, curve.low, curve.high, color=color, alpha=0.2, linewidth=0)
        marker = "o" if len(xs) < 2 else None  # a one-point curve is otherwise invisible
        axes.plot(xs, curve.mean, color=color, marker=marker, label=line.label)
    axes.set_xlabel(f"{_X_LABELS[x]}{unit}")
    axes.set_ylabel(metric)
    axes.set_title(f"{title}\nmean over seeds, 95% bootstrap confidence band", fontsize=11)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)


def _x_scale(curves: Sequence[GroupCurve], x: XAxis) -> tuple[float, str]:
    """Wall time in seconds, minutes or hours, whichever keeps the numbers short."""
    if x != "wall_time":
        return 1.0, ""
    end = max(float(line.curve.x[-1]) for line in curves)
    if end >= 3 * 3600:
        return 3600.0, " (h)"
    if end >= 3 * 60:
        return 60.0, " (min)"
    return 1.0, " (s)"
