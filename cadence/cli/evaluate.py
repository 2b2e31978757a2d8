"""``cadence eval``: evaluates a run's policy over episodes and prints the mean return."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cadence.cli.common import (
    add_checkpoint_option,
    checkpoint_kwargs,
    log_to_terminal,
    positive_int,
)
from cadence.cli.run_dir import load_run


def add_command(commands: Any) -> None:
    """Adds ``eval`` to the sub-commands ``commands``."""
    command = commands.add_parser("eval", help="evaluate a trained policy", allow_abbrev=False)
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--episodes", type=positive_int, default=10, metavar="N", help="episodes (default 10)"
    )
    add_checkpoint_option(command)
    command.set_defaults(run=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    """Evaluates a run's checkpoint (``--checkpoint``) and prints the mean return."""
    config, play_module = load_run(args.run_dir, "cadence.trainer.play", args.checkpoint)
    log_to_terminal()
    stats = play_module.evaluate(config, args.run_dir, args.episodes, **checkpoint_kwargs(args))
    print(
        f"return {stats['mean_return']:.2f} +- {stats['std_return']:.2f} "
        f"(mean length {stats['mean_length']:.1f} env steps) over {int(stats['episodes'])} episodes"
    )
    return 0
