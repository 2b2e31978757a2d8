"""The ``cadence`` command: its parser, and the exit code and message of each error.

Its sub-commands are ``list``, ``train``, ``play``, ``eval``, ``sweep``, ``plot`` and
``export``.

The only part of cadence that writes to the terminal. ``list``, ``--version`` and
``train NAME --help`` never import torch, so they answer in well under a second and work
even where the trainer cannot be imported: every cadence package imports its modules on
first use, Hydra and the config classes are imported by the commands that compose a config,
training and play code inside ``train``, ``play`` and ``eval``. ``python -m cadence`` runs
`main` as the ``cadence`` script does.

Each command is one module (``cadence.cli.train``, ``cadence.cli.play``, ...) with its
``add_command`` and its ``run_*`` function; `main` parses the line, runs the command and
turns the errors a user can fix into a message and an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import cadence
from cadence.cli import evaluate, export, listing, play, plot, sweep, train
from cadence.config import ConfigError
from cadence.data.errors import UnsupportedSpaceError
from cadence.envs.errors import EnvBuildError
from cadence.export.errors import ExportError
from cadence.trainer.errors import (
    CheckpointError,
    NonFiniteUpdateError,
    RunConfigMismatchError,
    RunStorageError,
)
from cadence.trainer.launch import RankFailedError
from cadence.trainer.snapshot import SnapshotError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``cadence`` with ``argv`` (default: ``sys.argv[1:]``) and returns the exit code.

    Exit codes: 0 success (a pre-empted run included: starting it again resumes
    it), 1 a missing file such as a run without checkpoints, or training stopped by
    a non-finite loss, an env that kept failing past its worker restarts or a run
    directory that could not be written (a full disk), 2 a
    usage or config error, an environment that cannot be built (unknown id, missing
    dependency, a ``module:Id`` that does not import, an env that raises) or whose spaces
    the config's algorithm does not take, or a run none of whose checkpoints verifies,
    130 training interrupted by a second Ctrl-C (no final checkpoint; the message names
    the one the same command resumes from); the message goes to stderr.
    """
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        _check_extra(parser, args, extra)
    except SystemExit as stop:  # argparse exits on --help, --version and usage errors
        return int(stop.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    _import_from_working_directory()
    try:
        return args.run(args)
    except (ConfigError, UnsupportedSpaceError, SnapshotError) as error:  # the config, the env
        print(f"cadence {args.command}: {error}", file=sys.stderr)
        return 2
    except (CheckpointError, RunConfigMismatchError, EnvBuildError) as error:  # nothing written
        print(f"cadence {args.command}: {error}", file=sys.stderr)
        return 2
    except ExportError as error:  # a policy that cannot be exported, a missing package
        print(f"cadence {args.command}: {error}", file=sys.stderr)
        return 2
    except (FileNotFoundError, NonFiniteUpdateError, RunStorageError, RankFailedError) as error:
        print(f"cadence {args.command}: {error}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cadence`` and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="cadence",
        description="Train, watch and evaluate reinforcement-learning agents.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"cadence {cadence.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (listing, train, play, evaluate, sweep, plot, export):
        command.add_command(commands)
    return parser


def _check_extra(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> None:
    """Takes overrides that came after an option (``--root-dir D a=1``); refuses the rest."""
    if args.command in ("train", "sweep"):
        options = [item for item in extra if item.startswith("-")]
        if options:
            args.parser.error(f"unrecognized arguments: {' '.join(options)}")
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")


def _import_from_working_directory() -> None:
    """Makes the working directory's modules importable, as ``python -m`` does, so that
    ``env.name=my_module:MyEnv-v0`` and ``module:Class`` wrappers of the user's own work
    from the ``cadence`` script too (its ``sys.path`` starts at the script's directory)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
