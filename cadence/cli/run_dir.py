"""Opening a run directory for ``play``, ``eval`` and ``export``: its config, its algorithm,
the checkpoint asked for, and what to pass instead when the path is no run directory."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from cadence.config import ConfigError

CONFIG_FILE = "config.yaml"
# `cadence.algorithms.registry.RECORD_FILE`, named here: the commands that need no algorithm
# import none, and a snapshot's registry (`--use-snapshot`) may predate the record.
ALGORITHM_RECORD_FILE = "algorithm.json"
RUNS_SHOWN = 3
"""Run directories a message about a folder of runs names."""


def load_run(run_dir: Path, module_name: str, checkpoint: str = "latest") -> tuple[Any, ModuleType]:
    """The run's config (from its config.yaml) and the module ``module_name``.

    Both are imported by name at call time, so after
    `cadence.trainer.snapshot.use_snapshot` they come from the snapshot, whose config
    classes match the code that wrote the run.

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
        shown = ", ".join(str(run) for run in runs[:RUNS_SHOWN])
        more = f" and {len(runs) - RUNS_SHOWN} more" if len(runs) > RUNS_SHOWN else ""
        return f"{path} holds {len(runs)} run directories: {shown}{more}; pass one of them"
    return f"{path} is not a run directory: {CONFIG_FILE} is missing"


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
