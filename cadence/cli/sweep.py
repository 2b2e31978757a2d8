"""``cadence sweep``: runs the Optuna trials of a named config, or prints a study's summary."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from cadence.cli.common import log_to_terminal, positive_int
from cadence.config import ConfigError


def add_command(commands: Any) -> None:
    """Adds ``sweep`` to the sub-commands ``commands``."""
    command = commands.add_parser(
        "sweep",
        help="sweep hyperparameters of a named config with Optuna",
        allow_abbrev=False,
        description="Run Optuna trials of the named config NAME, each a run directory per seed "
        "under the sweep directory, pruned on the evaluation curve; the study lives in a "
        "database that several `cadence sweep` processes share, and rerunning the command "
        "resumes it. Needs `pip install 'cadence[sweep]'`. See docs/sweeps.md.",
    )
    command.add_argument("name", metavar="NAME", help="a named config (see `cadence list`)")
    command.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="fixed overrides of every trial"
    )
    _add_trial_options(command)
    _add_study_options(command)
    command.add_argument(
        "--summary", action="store_true", help="print the summary of the existing study and exit"
    )
    command.add_argument(
        "--top", type=positive_int, default=10, metavar="K", help="trials in the summary"
    )
    command.set_defaults(run=run_sweep, parser=command)


def _add_trial_options(command: argparse.ArgumentParser) -> None:
    """What a trial is: the swept keys, the objective, its direction, the seeds."""
    command.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=DIST",
        help="a swept key: loguniform(a,b), uniform(a,b), int(a,b) or choice(v1,v2,...); "
        "repeat for more",
    )
    command.add_argument(
        "--trials", type=positive_int, metavar="T", help="complete or pruned trials to reach"
    )
    command.add_argument(
        "--objective",
        default="eval/episode_return",
        metavar="METRIC",
        help="metric of metrics.jsonl to optimize (default eval/episode_return)",
    )
    command.add_argument("--direction", choices=["maximize", "minimize"], default="maximize")
    command.add_argument(
        "--seeds", type=positive_int, default=1, metavar="S", help="runs per trial (default 1)"
    )


def _add_study_options(command: argparse.ArgumentParser) -> None:
    """Where the study lives and how it searches: name, directory, storage, pruner, sampler."""
    command.add_argument(
        "--study-name", metavar="N", help="study name (default NAME); one study per sweep"
    )
    command.add_argument(
        "--root-dir",
        "--sweep-dir",
        dest="sweep_dir",
        type=Path,
        metavar="DIR",
        help="the sweep's directory: its trials' run directories and, by default, its study "
        "(default runs/sweeps/N); --sweep-dir is the same option",
    )
    command.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna storage: sqlite:///FILE (default DIR/study.db), journal:///FILE, or a "
        "PostgreSQL/MySQL URL for processes on many machines",
    )
    command.add_argument(
        "--pruner",
        default="median",
        metavar="SPEC",
        help="median (default), percentile, hyperband, halving or none, with optional "
        "keyword arguments, e.g. 'median(n_startup_trials=5,n_warmup_steps=10000)'",
    )
    command.add_argument("--sampler", choices=["tpe", "random"], default="tpe")
    command.add_argument(
        "--heartbeat-interval",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between a running trial's heartbeats; a trial silent for 4 intervals "
        "is taken as dead and rerun from its checkpoints (default 30)",
    )


def run_sweep(args: argparse.Namespace) -> int:
    """Runs the sweep until ``--trials`` trials are finished, then prints its summary."""
    from cadence import sweep

    study_name = args.study_name or args.name
    sweep_dir = args.sweep_dir or Path("runs") / "sweeps" / study_name
    optuna = sweep.require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = None
    if not args.summary:
        if args.trials is None:
            raise ConfigError("--trials T is required (or --summary for an existing study)")
        params = tuple(sweep.parse_param(text) for text in args.param)
        spec = sweep.SweepSpec(
            args.name, tuple(args.overrides), params, args.objective, args.direction, args.seeds
        )
    study = sweep.open_sweep(
        spec,
        study_name,
        sweep_dir,
        storage=args.storage,
        pruner=args.pruner,
        sampler=args.sampler,
        heartbeat_interval=args.heartbeat_interval,
    )
    if spec is not None:
        log_to_terminal()
        logging.getLogger("cadence.trainer").setLevel(logging.WARNING)  # one line per trial
        if study.run(args.trials) == "preempted":
            print(f"{study.directory}: preempted; the same command resumes the sweep")
            return 0
    print(study.summary(args.top))
    return 0
