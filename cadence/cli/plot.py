"""``cadence plot``: draws learning curves of runs into an image and prints each line's end."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from cadence.cli.common import positive_int


def add_command(commands: Any) -> None:
    """Adds ``plot`` to the sub-commands ``commands``."""
    command = commands.add_parser(
        "plot",
        help="draw learning curves of runs",
        allow_abbrev=False,
        description="Draw learning curves from the runs' metrics.jsonl: runs whose configs "
        "differ only in the seed are one line, the mean over seeds with a 95% bootstrap "
        "confidence band, labelled by the keys that differ between lines. Needs "
        "`pip install 'cadence[plot]'`. See docs/plots.md.",
    )
    command.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_OR_GLOB",
        help="a run directory, a glob of them, or a directory that holds runs (a sweep's)",
    )
    command.add_argument(
        "--out", type=Path, required=True, metavar="FILE", help="the image: .png, .svg or .pdf"
    )
    command.add_argument(
        "--metric",
        default="eval/episode_return",
        metavar="KEY",
        help="metric of metrics.jsonl on the y axis (default eval/episode_return)",
    )
    command.add_argument(
        "--x",
        choices=["env_steps", "wall_time"],
        default="env_steps",
        help="x axis (default env_steps)",
    )
    command.add_argument("--title", help="title (default: what the runs share)")
    command.add_argument(
        "--smooth",
        type=positive_int,
        default=1,
        metavar="N",
        help="moving average over each run's last N points (default 1: none)",
    )
    command.set_defaults(run=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    """Draws the curves into ``--out`` and prints each line's last point and band."""
    from cadence.plot import PlotError, plot_runs

    logging.basicConfig(level=logging.WARNING, format="cadence plot: %(message)s")
    try:
        lines = plot_runs(
            args.runs, args.out, args.metric, args.x, title=args.title, smooth=args.smooth
        )
    except PlotError as error:
        print(f"cadence plot: {error}", file=sys.stderr)
        return 2
    for line in lines:
        curve = line.curve
        label = " ".join(line.label.split())
        print(
            f"{label}: {args.metric} {curve.mean[-1]:.4g} "
            f"[{curve.low[-1]:.4g}, {curve.high[-1]:.4g}] at {args.x} {curve.x[-1]:.6g}"
        )
    print(f"wrote {args.out}")
    return 0
