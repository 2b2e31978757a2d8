"""``cadence train``: loads and checks a named config, then trains it in one or more ranks."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from cadence.cli.common import log_to_terminal, positive_int
from cadence.config import ConfigError

OUTCOME_MESSAGES = {
    None: "already complete",
    "preempted": "preempted: checkpointed, and the same command resumes",
}


def add_command(commands: Any) -> None:
    """Adds ``train`` to the sub-commands ``commands``."""
    # --help is our own flag: with a NAME it also lists that config's keys.
    command = commands.add_parser(
        "train",
        help="train a named config",
        add_help=False,
        allow_abbrev=False,
        description="Train the named config NAME with Hydra overrides KEY=VALUE "
        "(e.g. env.num_envs=16 algorithm.learning_rate=3e-4). "
        "`cadence train NAME --help` lists every key of NAME "
        "(`cadence train NAME algorithm=dqn --help` those of NAME with DQN).",
    )
    command.add_argument(
        "name", nargs="?", metavar="NAME", help="a named config (see `cadence list`)"
    )
    command.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, Hydra syntax"
    )
    command.add_argument(
        "--root-dir", metavar="DIR", help="run directory (default: runs/NAME/seedSEED-DIGEST)"
    )
    command.add_argument(
        "--resume-with-changes",
        action="store_true",
        help="continue the run in the directory although its config.yaml differs (e.g. a "
        "finished run given a larger trainer.num_env_steps); recorded in config_changes.jsonl. "
        "The algorithm, network, env name, num_envs, backend, num_ranks and seed cannot change",
    )
    command.add_argument(
        "--nproc",
        type=positive_int,
        metavar="N",
        help="train with N learner processes on this machine (trainer.num_ranks=N; as "
        "torchrun --nproc-per-node N -m cadence train does; see docs/ddp.md)",
    )
    command.add_argument(
        "-h", "--help", action="store_true", help="show this help (and NAME's keys)"
    )
    command.set_defaults(run=run_train, parser=command)


def run_train(args: argparse.Namespace) -> int:
    """Loads and checks the config (no directory is created before that), then trains it."""
    if args.help:
        _print_help(args)
        return 0
    if args.name is None:
        args.parser.print_usage(sys.stderr)
        print("cadence train: NAME is required (see `cadence list`)", file=sys.stderr)
        return 2
    config = _load_config(args)
    log_to_terminal()
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0: warnings only
        logging.getLogger("cadence").setLevel(logging.WARNING)
    if config.trainer.num_ranks > 1 and "WORLD_SIZE" not in os.environ:
        return _report(config, _launch(config, args.resume_with_changes))
    return _train_here(config, args.resume_with_changes)


def _report(config: Any, outcome: str | None) -> int:
    """Prints how the run ended (on rank 0 only) and returns the exit code 0."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{config.root_dir}: {OUTCOME_MESSAGES.get(outcome, outcome)}")
    return 0


def _print_help(args: argparse.Namespace) -> None:
    """``train --help``, and with a NAME the keys of that config."""
    args.parser.print_help()
    if args.name is not None:  # algorithm=NAME on the line: the keys of that config
        from cadence.config import config_help  # Hydra and the config classes
        from cadence.config.help import group_overrides

        print(f"\n{config_help(args.name, group_overrides(args.overrides))}")


def _load_config(args: argparse.Namespace) -> Any:
    """The config NAME with the overrides, and the ranks of ``--nproc`` or torchrun."""
    from cadence.config import load_config  # Hydra and the config classes

    if args.root_dir is not None:  # a run of an algorithm registered from Python resumes
        from cadence.algorithms.registry import register_recorded

        register_recorded(args.root_dir)
    config = load_config(args.name, args.overrides, root_dir=args.root_dir)
    num_ranks = resolve_num_ranks(config.trainer.num_ranks, args.nproc)
    if num_ranks != config.trainer.num_ranks:
        overrides = [*args.overrides, f"trainer.num_ranks={num_ranks}"]
        config = load_config(args.name, overrides, root_dir=args.root_dir)
    return config


def _launch(config: Any, resume_with_changes: bool) -> str | None:
    """Starts the ranks on this machine, as torchrun would, and waits for them."""
    from cadence.trainer.launch import launch_ranks
    from cadence.trainer.run import prepare_run

    if not prepare_run(config, resume_with_changes):
        return None
    return launch_ranks(config)


def _train_here(config: Any, resume_with_changes: bool) -> int:
    """Trains in this process and returns the exit code; an env that kept failing or a
    second Ctrl-C stops it with one message."""
    from cadence.envs.worker_errors import EnvironmentWorkerError
    from cadence.trainer.preemption import interrupted_note
    from cadence.trainer.run import train  # torch: imported only to train

    try:
        outcome = train(config, resume_with_changes=resume_with_changes)
    except EnvironmentWorkerError as error:  # its restarts spent: the env's traceback
        print(f"cadence train: {error}\n{_stopped_by_env(config.root_dir)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C: one line, not a traceback
        print(f"cadence train: {interrupted_note(config.root_dir)}", file=sys.stderr)
        return 130  # the shell's code for SIGINT
    return _report(config, outcome)


def _stopped_by_env(run_dir: str) -> str:
    """What a run stopped by its env keeps, and how to go on."""
    from cadence.trainer.checkpoint import CheckpointManager, latest_iteration

    checkpoints = Path(run_dir) / "checkpoints"
    if not CheckpointManager(checkpoints).has_checkpoints():
        return f"The run stopped before its first checkpoint; {run_dir} starts anew next time."
    return (
        f"The run stopped; once the env is fixed, the same command resumes {run_dir} from its "
        f"latest checkpoint (iteration {latest_iteration(checkpoints)})."
    )


def resolve_num_ranks(configured: int, nproc: int | None) -> int:
    """The ranks to train with: ``--nproc``, or torchrun's world size, or the config's.

    Under torchrun a config left at one rank takes the world size; a config (or
    ``--nproc``) that asks for another number than torchrun started is refused.

    Raises:
        ConfigError: ``--nproc`` under torchrun, or a number of ranks that disagrees.
    """
    world_size = os.environ.get("WORLD_SIZE")
    if world_size is not None:
        if nproc is not None:
            raise ConfigError("--nproc starts the ranks itself; under torchrun leave it out")
        if configured not in (1, int(world_size)):
            raise ConfigError(
                f"trainer.num_ranks={configured} but torchrun started {world_size} ranks "
                f"(WORLD_SIZE); start {configured} or leave trainer.num_ranks out"
            )
        return int(world_size)
    if nproc is not None and configured not in (1, nproc):
        raise ConfigError(f"--nproc {nproc} but trainer.num_ranks={configured}; give one of them")
    return nproc if nproc is not None else configured
