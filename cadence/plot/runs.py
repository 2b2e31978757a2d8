"""Finding run directories and reading what a learning curve needs from each.

A run directory holds ``config.yaml`` (the resolved config) and ``metrics.jsonl`` (one
log point a line, see `cadence.trainer.metrics`). `find_runs` turns the user's arguments
(run directories, globs of them, or directories that hold runs, such as a sweep's) into
run directories; `load_run` reads one; `metric_series` gives one metric of a run against
env steps or wall time.
"""

from __future__ import annotations

import difflib
import glob
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import yaml

from cadence.trainer.metrics import COUNTERS, read_metrics

XAxis = Literal["env_steps", "wall_time"]


EVAL_METRICS = ("eval/episode_return", "eval/episode_length")
"""What every evaluation logs (`cadence.trainer.trainer`): names known before a run's first
evaluation, so asking for one of them is not taken for a misspelling."""

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
_GLOB_CHARS = frozenset("*?[")


class PlotError(ValueError):
    """What the user asked to plot cannot be drawn; the message says what to do instead."""


class NoMetricsError(PlotError):
    """A run directory without a metric yet (a run before the end of its first iteration)."""


@attrs.frozen(eq=False)  # a dict and lists: compared by identity
class Run:
    """One run directory as the plot sees it.

    Attributes:
        directory: the run directory.
        config: its ``config.yaml`` flattened to dotted keys (``algorithm.learning_rate``).
        records: its log points in order, each a dict of counters and metrics.
    """

    directory: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def seed(self) -> Any:
        return self.config.get("seed")


def find_runs(patterns: Sequence[str]) -> list[Path]:
    """The run directories that ``patterns`` name, each once, in the order found.

    A pattern is a run directory (it holds ``config.yaml``), a directory holding runs at
    any depth (a sweep directory: hidden directories such as extracted snapshots are not
    searched), a run's ``config.yaml`` or ``metrics.jsonl``, or a glob (``**`` included) of
    any of these; the shell's own expansion of a glob works as well.

    Raises:
        PlotError: a pattern matches nothing, or names no run directory.
    """
    found: dict[Path, Path] = {}  # resolved path -> the path as the user gave it
    for pattern in patterns:
        is_glob = bool(_GLOB_CHARS & set(pattern))
        matches = sorted(glob.glob(pattern, recursive=True)) if is_glob else [pattern]
        runs = [run for match in matches for run in _runs_under(Path(match))]
        if not runs:
            raise PlotError(
                f"{pattern} {_what_it_names(pattern, is_glob, matches)}: give run directories "
                f"(each with {CONFIG_FILE} and {METRICS_FILE}, e.g. "
                "runs/ppo_cartpole/seed0-1a2b3c), a glob of them, or a directory that holds "
                "runs (e.g. a sweep directory)"
            )
        for run in runs:
            found.setdefault(run.resolve(), run)
    return list(found.values())


def _what_it_names(pattern: str, is_glob: bool, matches: list[str]) -> str:
    if is_glob:
        return "matches no run" if matches else "matches no file"
    return "holds no run" if Path(pattern).exists() else "does not exist"


def _runs_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path.parent] if path.name in (CONFIG_FILE, METRICS_FILE) else []
    if not path.is_dir():
        return []
    if (path / CONFIG_FILE).is_file():
        return [path]
    return sorted(
        config.parent
        for config in path.rglob(CONFIG_FILE)
        if not any(part.startswith(".") for part in config.relative_to(path).parts)
    )


def load_run(directory: Path) -> Run:
    """Reads a run's config and log points.

    Raises:
        PlotError: the config is not a mapping, or the run has logged nothing yet.
    """
    directory = Path(directory)
    try:
        config = yaml.safe_load((directory / CONFIG_FILE).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise PlotError(f"{directory}: cannot read {CONFIG_FILE}: {error}") from None
    if not isinstance(config, dict):
        raise PlotError(f"{directory}/{CONFIG_FILE} is not a cadence config (not a mapping)")
    records = read_metrics(directory)
    if not records:
        raise NoMetricsError(
            f"{directory} has no metrics ({METRICS_FILE} is missing or empty): a run logs its "
            "first point after its first training iteration; let it train, or leave it out"
        )
    return Run(directory, flatten(config), records)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one level of dotted keys; lists and empty mappings are leaves.

    >>> flatten({"a": {"b": 1, "c": [2, 3]}, "d": {}})
    {'a.b': 1, 'a.c': [2, 3], 'd': {}}
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_metric(runs: Sequence[Run], metric: str) -> None:
    """Raises `PlotError` unless every run logged ``metric`` at least once (finite).

    A name that no run logged at all (nor an evaluation would) is most likely misspelt:
    the message says so and lists the close names and every metric the runs logged.
    Otherwise it names the runs without it and lists the metrics they all have.
    """
    missing = [run for run in runs if not _has_metric(run, metric)]
    if not missing:
        return
    logged = set.union(*(_logged_keys(run) for run in runs))
    if metric not in logged and metric not in EVAL_METRICS:
        raise PlotError(_unknown_metric_message(runs, metric, logged))
    shared = set.intersection(*(_metric_keys(run) for run in runs))
    names = ", ".join(str(run.directory) for run in missing[:3])
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    hint = (
        " (no evaluation yet: trainer.eval_interval=0, or fewer iterations than it)"
        if metric.startswith("eval/") and any(_never_evaluated(run) for run in missing)
        else ""
    )
    raise PlotError(
        f"{names}{more} logged no {metric!r}{hint}. Metrics every run has: "
        f"{', '.join(sorted(shared)) or 'none'}. Choose one with --metric"
    )


def _unknown_metric_message(runs: Sequence[Run], metric: str, logged: set[str]) -> str:
    names = sorted(set.union(*(_metric_keys(run) for run in runs)))
    close = difflib.get_close_matches(metric, sorted(logged | set(EVAL_METRICS)), n=3)
    guess = f" Did you mean {' or '.join(repr(name) for name in close)}?" if close else ""
    return (
        f"no run logged a metric named {metric!r}.{guess} Metrics the runs logged: "
        f"{', '.join(names) or 'none'}. Choose one with --metric"
    )


def _never_evaluated(run: Run) -> bool:
    return not any(key.startswith("eval/") for key in _logged_keys(run))


def _logged_keys(run: Run) -> set[str]:
    """Every metric name in the run's log points, whatever its values (null included)."""
    return {key for record in run.records for key in record if key not in COUNTERS}


def _has_metric(run: Run, metric: str) -> bool:
    return any(_finite(record.get(metric)) for record in run.records)


def _metric_keys(run: Run) -> set[str]:
    return {
        key
        for record in run.records
        for key, value in record.items()
        if key not in COUNTERS and _finite(value)
    }


def metric_series(run: Run, metric: str, x: XAxis) -> tuple[np.ndarray, np.ndarray]:
    """The run's finite values of ``metric`` against ``x``, sorted by ``x``.

    Returns:
        ``(xs, ys)``, each ``[N]`` float64; where one x appears twice, the later point.
    """
    points = [
        (float(record[x]), float(record[metric]))
        for record in run.records
        if _finite(record.get(metric)) and _finite(record.get(x))
    ]
    by_x = dict(points)  # a later log point at the same x wins
    xs = np.array(sorted(by_x), dtype=np.float64)
    return xs, np.array([by_x[value] for value in xs], dtype=np.float64)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
