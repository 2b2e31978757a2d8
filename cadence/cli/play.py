"""``cadence play``: plays episodes with a run's policy, optionally on the run's own code."""

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
from cadence.trainer.snapshot import SNAPSHOT_FILE, use_snapshot


def add_command(commands: Any) -> None:
    """Adds ``play`` to the sub-commands ``commands``."""
    command = commands.add_parser("play", help="watch a trained policy", allow_abbrev=False)
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--episodes",
        type=positive_int,
        default=1,
        metavar="N",
        help="episodes to play (default 1)",
    )
    command.add_argument(
        "--video", type=Path, metavar="FILE.mp4", help="also write the episodes to an mp4"
    )
    command.add_argument(
        "--use-snapshot",
        action="store_true",
        help=f"run the cadence code saved in DIR/{SNAPSHOT_FILE}",
    )
    add_checkpoint_option(command)
    command.set_defaults(run=run_play)


def run_play(args: argparse.Namespace) -> int:
    """Plays episodes with a run's checkpoint (``--checkpoint``) and prints their returns."""
    if args.use_snapshot:
        use_snapshot(args.run_dir)
    config, play_module = load_run(args.run_dir, "cadence.trainer.play", args.checkpoint)
    log_to_terminal()
    result = play_module.play(
        config, args.run_dir, args.episodes, args.video, **checkpoint_kwargs(args)
    )
    for index, (episode_return, length) in enumerate(
        zip(result.returns, result.lengths, strict=True)
    ):
        print(f"episode {index + 1}: return {episode_return:.2f}, length {length} env steps")
    if args.video is not None:
        print(f"wrote {result.num_frames} frames to {args.video}")
    return 0
