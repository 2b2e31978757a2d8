"""The ``cadence`` command: ``list``, ``train``, ``play``, ``eval``, ``sweep``, ``plot``, ``export``.

The only part of cadence that writes to the terminal. ``list``, ``--version`` and
``train NAME --help`` never import torch, so they answer in well under a second and work
even where the trainer cannot be imported: every cadence package imports its modules on
first use, Hydra and the config classes are imported by the commands that compose a config,
training and play code inside ``train``, ``play`` and ``eval``. ``python -m cadence`` runs
`main` as the ``cadence`` script does.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import cadence
from cadence.config import ConfigError, list_configs
from cadence.data.errors import UnsupportedSpaceError
from cadence.envs.errors import EnvBuildError
from cadence.export.errors import ExportError
from cadence.launch import RankFailedError
from cadence.trainer.errors import (
    CheckpointError,
    NonFiniteUpdateError,
    RunConfigMismatchError,
    RunStorageError,
)

SNAPSHOT_FILE = "snapshot.tar.gz"
CONFIG_FILE = "config.yaml"
# `cadence.algorithms.registry.RECORD_FILE`, named here: the commands that need no algorithm
# import none, and a snapshot's registry (`--use-snapshot`) may predate the record.
ALGORITHM_RECORD_FILE = "algorithm.json"


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
    except (ConfigError, UnsupportedSpaceError) as error:  # the config, or it and the env
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
    _add_list(commands)
    _add_train(commands)
    _add_play(commands)
    _add_eval(commands)
    _add_sweep(commands)
    _add_plot(commands)
    _add_export(commands)
    return parser


def _add_list(commands: Any) -> None:
    command = commands.add_parser("list", help="list the named configs", allow_abbrev=False)
    command.set_defaults(run=run_list)


def _add_train(commands: Any) -> None:
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
        type=_positive_int,
        metavar="N",
        help="train with N learner processes on this machine (trainer.num_ranks=N; as "
        "torchrun --nproc-per-node N -m cadence train does; see docs/ddp.md)",
    )
    command.add_argument(
        "-h", "--help", action="store_true", help="show this help (and NAME's keys)"
    )
    command.set_defaults(run=run_train, parser=command)


def _add_sweep(commands: Any) -> None:
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
    command.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=DIST",
        help="a swept key: loguniform(a,b), uniform(a,b), int(a,b) or choice(v1,v2,...); "
        "repeat for more",
    )
    command.add_argument(
        "--trials", type=_positive_int, metavar="T", help="complete or pruned trials to reach"
    )
    command.add_argument(
        "--objective",
        default="eval/episode_return",
        metavar="METRIC",
        help="metric of metrics.jsonl to optimize (default eval/episode_return)",
    )
    command.add_argument("--direction", choices=["maximize", "minimize"], default="maximize")
    command.add_argument(
        "--seeds", type=_positive_int, default=1, metavar="S", help="runs per trial (default 1)"
    )
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
    command.add_argument(
        "--summary", action="store_true", help="print the summary of the existing study and exit"
    )
    command.add_argument(
        "--top", type=_positive_int, default=10, metavar="K", help="trials in the summary"
    )
    command.set_defaults(run=run_sweep, parser=command)


def _add_plot(commands: Any) -> None:
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
        type=_positive_int,
        default=1,
        metavar="N",
        help="moving average over each run's last N points (default 1: none)",
    )
    command.set_defaults(run=run_plot)


def _add_play(commands: Any) -> None:
    command = commands.add_parser("play", help="watch a trained policy", allow_abbrev=False)
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--episodes",
        type=_positive_int,
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
    _add_checkpoint_option(command)
    command.set_defaults(run=run_play)


def _add_eval(commands: Any) -> None:
    command = commands.add_parser("eval", help="evaluate a trained policy", allow_abbrev=False)
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--episodes", type=_positive_int, default=10, metavar="N", help="episodes (default 10)"
    )
    _add_checkpoint_option(command)
    command.set_defaults(run=run_eval)


def _add_export(commands: Any) -> None:
    command = commands.add_parser(
        "export",
        help="write a trained policy as an ONNX or TorchScript file",
        allow_abbrev=False,
        description="Write the deterministic policy of a run's checkpoint (observation to "
        "action, with the run's observation normalisation and action rescaling) as one "
        "self-contained file, and a JSON sidecar beside it naming its inputs and outputs. "
        "ONNX needs `pip install 'cadence[export]'`. See docs/export.md.",
    )
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--format", choices=["onnx", "torchscript"], required=True, help="the file format"
    )
    command.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the file to write (default DIR/export/policy.onnx or policy.pt); the sidecar "
        "is FILE.json",
    )
    _add_checkpoint_option(command)
    command.set_defaults(run=run_export)


def _add_checkpoint_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--checkpoint",
        type=_checkpoint_choice,
        default="latest",
        metavar="latest|best|N",
        help="which checkpoint acts: the latest (default), the best (highest evaluation "
        "return among checkpoints saved at an evaluated iteration; pruning keeps it), or "
        "that of iteration N",
    )


def _checkpoint_choice(text: str) -> str:
    if text in ("latest", "best") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"must be 'latest', 'best' or an iteration, got {text!r}")


def _checkpoint_kwargs(args: argparse.Namespace) -> dict[str, str]:
    # Passed only when asked for, so that the code of an older --use-snapshot still runs.
    return {} if args.checkpoint == "latest" else {"checkpoint": args.checkpoint}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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


def run_list(args: argparse.Namespace) -> int:
    """Prints each named config with its one-line description."""
    configs = list_configs()
    width = max(map(len, configs), default=0)
    for name, description in configs.items():
        print(f"{name:<{width}}  {description}")
    return 0


_OUTCOME_MESSAGES = {
    None: "already complete",
    "preempted": "preempted: checkpointed, and the same command resumes",
}


def run_train(args: argparse.Namespace) -> int:
    """Loads and checks the config (no directory is created before that), then trains it."""
    from cadence.config import config_help, load_config  # Hydra and the config classes

    if args.help:
        args.parser.print_help()
        if args.name is not None:  # algorithm=NAME on the line: the keys of that config
            from cadence.config.help import group_overrides

            print(f"\n{config_help(args.name, group_overrides(args.overrides))}")
        return 0
    if args.name is None:
        args.parser.print_usage(sys.stderr)
        print("cadence train: NAME is required (see `cadence list`)", file=sys.stderr)
        return 2
    if args.root_dir is not None:  # a run of an algorithm registered from Python resumes
        from cadence.algorithms.registry import register_recorded

        register_recorded(args.root_dir)
    config = load_config(args.name, args.overrides, root_dir=args.root_dir)
    num_ranks = _num_ranks(config.trainer.num_ranks, args.nproc)
    if num_ranks != config.trainer.num_ranks:
        overrides = [*args.overrides, f"trainer.num_ranks={num_ranks}"]
        config = load_config(args.name, overrides, root_dir=args.root_dir)
    _log_to_terminal()
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0: warnings only
        logging.getLogger("cadence").setLevel(logging.WARNING)
    if num_ranks > 1 and "WORLD_SIZE" not in os.environ:
        from cadence.launch import launch_ranks  # starts the ranks, as torchrun would

        outcome = launch_ranks(config, resume_with_changes=args.resume_with_changes)
    else:
        from cadence.envs.parallel import EnvironmentWorkerError
        from cadence.trainer.preemption import interrupted_note
        from cadence.trainer.run import train  # torch: imported only to train

        try:
            outcome = train(config, resume_with_changes=args.resume_with_changes)
        except EnvironmentWorkerError as error:  # its restarts spent: the env's traceback
            print(f"cadence train: {error}\n{_stopped_by_env(config.root_dir)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # a second Ctrl-C: one line, not a traceback
            print(f"cadence train: {interrupted_note(config.root_dir)}", file=sys.stderr)
            return 130  # the shell's code for SIGINT
    if os.environ.get("RANK", "0") == "0":
        print(f"{config.root_dir}: {_OUTCOME_MESSAGES.get(outcome, outcome)}")
    return 0


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


def _num_ranks(configured: int, nproc: int | None) -> int:
    """The ranks to train with: ``--nproc``, or torchrun's world size, or the config's.

    Under torchrun a config left at one rank takes the world size; a config (or
    ``--nproc``) that asks for another number than torchrun started is refused.
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
        _log_to_terminal()
        logging.getLogger("cadence.trainer").setLevel(logging.WARNING)  # one line per trial
        if study.run(args.trials) == "preempted":
            print(f"{study.directory}: preempted; the same command resumes the sweep")
            return 0
    print(study.summary(args.top))
    return 0


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


def run_play(args: argparse.Namespace) -> int:
    """Plays episodes with a run's checkpoint (``--checkpoint``) and prints their returns."""
    if args.use_snapshot:
        use_snapshot(args.run_dir)
    config, play_module = _load_run(args.run_dir, "cadence.trainer.play", args.checkpoint)
    _log_to_terminal()
    result = play_module.play(
        config, args.run_dir, args.episodes, args.video, **_checkpoint_kwargs(args)
    )
    for index, (episode_return, length) in enumerate(
        zip(result.returns, result.lengths, strict=True)
    ):
        print(f"episode {index + 1}: return {episode_return:.2f}, length {length} env steps")
    if args.video is not None:
        print(f"wrote {result.num_frames} frames to {args.video}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    """Evaluates a run's checkpoint (``--checkpoint``) and prints the mean return."""
    config, play_module = _load_run(args.run_dir, "cadence.trainer.play", args.checkpoint)
    _log_to_terminal()
    stats = play_module.evaluate(config, args.run_dir, args.episodes, **_checkpoint_kwargs(args))
    print(
        f"return {stats['mean_return']:.2f} +- {stats['std_return']:.2f} "
        f"(mean length {stats['mean_length']:.1f} env steps) over {int(stats['episodes'])} episodes"
    )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Exports a run's checkpoint (``--checkpoint``) and prints the files written."""
    if args.format == "onnx":
        from cadence.export.errors import require_onnx_exporter

        require_onnx_exporter()  # before torch and the run are loaded
    config, export_module = _load_run(args.run_dir, "cadence.export.run", args.checkpoint)
    _log_to_terminal()  # which checkpoint was loaded, where the files went
    result = export_module.export_run(
        config, args.run_dir, args.format, args.out, checkpoint=args.checkpoint
    )
    print(f"wrote {result.path}")
    print(f"wrote {result.sidecar}")
    return 0


def _load_run(
    run_dir: Path, module_name: str, checkpoint: str = "latest"
) -> tuple[Any, ModuleType]:
    """The run's config (from its config.yaml) and the module ``module_name``.

    Both are imported by name at call time, so after `use_snapshot` they come
    from the snapshot, whose config classes match the code that wrote the run.

    Raises:
        ConfigError: ``run_dir`` is not a run directory (the message says which one is
            meant), or it has checkpoints but none of iteration ``checkpoint``.
    """
    config_module = importlib.import_module("cadence.config")
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(_not_a_run_message(Path(run_dir)))
    _check_checkpoint_exists(Path(run_dir), checkpoint)
    _register_the_runs_algorithm(Path(run_dir))
    try:
        config = config_module.from_yaml(path.read_text(), source=f"'{path}'")
    except config_module.ConfigError as error:  # the snapshot's own class, not ours
        raise ConfigError(str(error)) from None
    return config, importlib.import_module(module_name)


def _register_the_runs_algorithm(run_dir: Path) -> None:
    """Registers the algorithm the run recorded (one registered from Python when it
    trained: `cadence.algorithms.registry.record_registration`), importing only what the
    record names; an algorithm this process does not know is refused with how to fix it.

    The registry is imported by name at call time, so after `use_snapshot` it is the
    snapshot's (one old enough to lack `register_recorded` wrote no record either).

    Raises:
        ConfigError: the run's algorithm is not registered and the run recorded none.
    """
    registry = importlib.import_module("cadence.algorithms.registry")
    record = run_dir / ALGORITHM_RECORD_FILE
    if record.is_file():
        registry.register_recorded(run_dir)
        return
    name = _algorithm_name(run_dir / CONFIG_FILE)
    if name is None or name in registry.algorithm_names():
        return
    raise ConfigError(
        f"{run_dir} trained algorithm {name!r}, which is not registered in this process, and "
        f"the run recorded no import path for it (it was registered from a script's "
        f"__main__, or before cadence recorded registrations). Either register it in Python "
        "with cadence.algorithms.register_algorithm(NAME, 'module:ConfigClass', "
        "'module:make_algorithm') and evaluate it from there, or install a package with a "
        "'cadence.algorithms' entry point for it (docs/adding-an-algorithm.md), "
        f'or write {record} as {{"name": "{name}", "config": "module:ConfigClass", '
        '"builder": "module:make_algorithm", "sys_path": ["folder of module"]}'
    )


def _algorithm_name(config_file: Path) -> str | None:
    """``algorithm.name`` in a run's config.yaml (None where it has none)."""
    import yaml

    try:
        tree = yaml.safe_load(config_file.read_text())
    except yaml.YAMLError:
        return None  # `from_yaml` says what is wrong with it
    algorithm = tree.get("algorithm") if isinstance(tree, dict) else None
    return algorithm.get("name") if isinstance(algorithm, dict) else None


def _not_a_run_message(path: Path) -> str:
    """Why ``path`` is no run directory, naming the run directory meant if there is one."""
    if not path.exists():
        return f"{path} does not exist; pass a run directory (one holding {CONFIG_FILE})"
    # The path as typed first (runs/x/checkpoints -> runs/x), then resolved (.. or links).
    parents = [*path.parents, *path.resolve().parents]
    run = next((p for p in parents if (p / CONFIG_FILE).is_file()), None)
    if run is not None:
        inside = path.resolve().relative_to(run.resolve()).parts
        if len(inside) >= 2 and inside[0] == "checkpoints" and inside[1].isdigit():
            return (
                f"{path} is a checkpoint of the run directory {run}; pass the run directory "
                f"and the checkpoint's iteration: {run} --checkpoint {int(inside[1])}"
            )
        return f"{path} is inside the run directory {run}; pass that directory"
    runs = _runs_under(path)
    if runs:
        shown = ", ".join(str(run) for run in runs[:_RUNS_SHOWN])
        more = f" and {len(runs) - _RUNS_SHOWN} more" if len(runs) > _RUNS_SHOWN else ""
        return f"{path} holds {len(runs)} run directories: {shown}{more}; pass one of them"
    return f"{path} is not a run directory: {CONFIG_FILE} is missing"


_RUNS_SHOWN = 3


def _runs_under(path: Path, max_depth: int = 4) -> list[Path]:
    """The run directories below ``path`` (not inside one another), sorted, at most
    ``max_depth`` levels down (runs/NAME/seedS-DIGEST, or a sweep's trials)."""
    runs = []
    for directory, subdirectories, files in os.walk(path):
        depth = len(Path(directory).relative_to(path).parts)
        if CONFIG_FILE in files and depth > 0:
            runs.append(Path(directory))
            subdirectories.clear()
        elif depth >= max_depth:
            subdirectories.clear()
        subdirectories.sort()
    return sorted(runs)


def _check_checkpoint_exists(run_dir: Path, checkpoint: str) -> None:
    """Refuses ``--checkpoint N`` of a run that has checkpoints but not that one, listing
    those it has; a run without any is left to the loader ("no checkpoint yet")."""
    if not checkpoint.isdigit():
        return
    from cadence.trainer.checkpoint import CheckpointManager  # torch, which the run needs

    checkpoints = CheckpointManager(run_dir / "checkpoints")
    saved = checkpoints.iterations()
    if not saved or int(checkpoint) in saved:
        return
    others = "latest or best" if checkpoints.eval_returns() else "latest"
    raise ConfigError(
        f"{run_dir} has no checkpoint of iteration {checkpoint}; it has iterations "
        f"{', '.join(map(str, saved))}: pass --checkpoint with one of them, or {others}"
    )


def use_snapshot(run_dir: Path) -> Path:
    """Makes ``import cadence`` load the package saved in ``run_dir/snapshot.tar.gz``.

    The archive is extracted once into ``run_dir/.snapshot-<digest>/`` (or a
    temporary directory when the run directory is read-only), put first on
    ``sys.path``, and every ``cadence`` module imported so far is dropped from
    ``sys.modules`` so that the next import of one finds the snapshot's.

    Returns:
        The directory holding the snapshot's ``cadence`` package.

    Raises:
        ConfigError: the run has no snapshot, or the archive is not a cadence package.
    """
    archive = Path(run_dir) / SNAPSHOT_FILE
    if not archive.is_file():
        raise ConfigError(f"{run_dir} has no {SNAPSHOT_FILE} to run")
    root = _extracted_snapshot(archive)
    sys.path.insert(0, str(root))
    for name in [name for name in sys.modules if name == "cadence" or name.startswith("cadence.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    return root


def _extracted_snapshot(archive: Path) -> Path:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    cached = archive.parent / f".snapshot-{digest}"
    if (cached / "cadence").is_dir():
        if _matches_archive(archive, cached):
            return cached
        # Someone changed the extracted code: never import it; extract afresh.
        print(
            f"cadence: {cached} no longer matches {archive.name}; extracting it again",
            file=sys.stderr,
        )
        shutil.rmtree(cached, ignore_errors=True)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".snapshot-tmp-", dir=archive.parent))
    except OSError:  # a read-only run directory: a temporary copy, for this process only
        staging = Path(tempfile.mkdtemp(prefix="cadence-snapshot-"))
        _extract(archive, staging)
        return staging
    _extract(archive, staging)
    try:
        staging.rename(cached)  # atomic: a concurrent `play` sees all of it or none
    except OSError:  # another process won the race; its copy is the same archive
        return cached if (cached / "cadence").is_dir() else staging
    return cached


def _matches_archive(archive: Path, root: Path) -> bool:
    """Whether the files under ``root`` are exactly the archive's regular files."""
    with tarfile.open(archive, "r:gz") as tar:
        expected = {
            member.name: tar.extractfile(member).read() for member in tar if member.isfile()
        }
    found = {
        str(path.relative_to(root)): path
        for path in (root / "cadence").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    if set(found) != set(expected):
        return False
    return all(path.read_bytes() == expected[name] for name, path in found.items())


def _extract(archive: Path, target: Path) -> None:
    """Extracts the ``cadence/`` tree of ``archive``, refusing links and paths outside it."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            parts = Path(member.name).parts
            if (
                not (member.isfile() or member.isdir())
                or ".." in parts
                or parts[:1] != ("cadence",)
            ):
                raise ConfigError(
                    f"{archive} is not a cadence snapshot: unexpected entry {member.name!r}"
                )
        tar.extractall(target, members=members, filter="data")
    if not (target / "cadence" / "__init__.py").is_file():
        raise ConfigError(f"{archive} is not a cadence snapshot: cadence/__init__.py is missing")


def _import_from_working_directory() -> None:
    """Makes the working directory's modules importable, as ``python -m`` does, so that
    ``env.name=my_module:MyEnv-v0`` and ``module:Class`` wrappers of the user's own work
    from the ``cadence`` script too (its ``sys.path`` starts at the script's directory)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _log_to_terminal() -> None:
    """cadence's own INFO lines (what it loaded, chose and wrote) and every library's
    warnings; other libraries' INFO chatter (PyOpenGL's, when MuJoCo renders) stays out."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    logging.getLogger("cadence").setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
