"""Learning curves of runs: `cadence plot`, the mean and bootstrap band over seeds.

`find_runs` and `load_run` read run directories, `group_runs` and `group_labels` decide
which runs are seeds of one config and how to name them, `group_curve` aligns and averages
them, and `plot_runs` does all of it and draws the figure (matplotlib, the ``plot`` extra).
"""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Curve": "curves",
        "bootstrap_band": "curves",
        "group_curve": "curves",
        "group_labels": "groups",
        "group_runs": "groups",
        "GroupCurve": "figure",
        "plot_runs": "figure",
        "PlotError": "runs",
        "Run": "runs",
        "find_runs": "runs",
        "load_run": "runs",
    },
)

__all__ = [
    "Curve",
    "GroupCurve",
    "PlotError",
    "Run",
    "bootstrap_band",
    "find_runs",
    "group_curve",
    "group_labels",
    "group_runs",
    "load_run",
    "plot_runs",
]
