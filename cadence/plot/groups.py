"""Which runs are seeds of one config, and how to name each group in a legend.

Two runs are one group when their resolved configs are equal once the keys of a run's
identity are set aside: the seed, the name, the run directory, and settings that do not
change what is learned (progress output, checkpoint cadence, thread count, worker
timeouts). A group is labelled by the keys whose values tell the groups apart, and the
plot titled by what all of them share.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import Any

from cadence.plot.runs import Run

# Keys that name or schedule a run without changing what it learns. trainer.device is
# not one: float results differ between devices.
IDENTITY_KEYS = frozenset(
    {
        "name",
        "description",
        "seed",
        "root_dir",
        "trainer.progress_bar",
        "trainer.progress_interval_s",
        "trainer.checkpoint_interval",
        "trainer.keep_checkpoints",
        "trainer.num_threads",
        "env.spin_us",
        "env.step_timeout_s",
        "env.build_timeout_s",
        "env.pin_workers",
    }
)
_MISSING = "unset"  # a key one config has and another lacks (another algorithm's)
_LABEL_WIDTH = 60


def training_config(run: Run) -> dict[str, Any]:
    """The run's flat config without its identity keys: what its seeds share."""
    return {key: value for key, value in run.config.items() if key not in IDENTITY_KEYS}


def group_runs(runs: Sequence[Run]) -> list[list[Run]]:
    """The runs grouped by `training_config`, groups in order of first appearance, each
    group's runs in order of seed."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(_canonical(training_config(run)), []).append(run)
    return [sorted(group, key=lambda run: _canonical(run.seed)) for group in groups.values()]


def shared_seeds(group: Sequence[Run]) -> dict[str, list[Run]]:
    """The seeds that more than one run of a group has, each with its runs.

    Such runs are drawn (no data is dropped) but are not independent seeds: a rerun of one
    seed in another directory repeats its numbers, and averaging repeats narrows the band.

    >>> from pathlib import Path
    >>> runs = [Run(Path(d), {"seed": s}, []) for d, s in [("a", 0), ("b", 1), ("c", 0)]]
    >>> {seed: [str(run.directory) for run in same] for seed, same in shared_seeds(runs).items()}
    {'0': ['a', 'c']}
    """
    by_seed: dict[str, list[Run]] = {}
    for run in group:
        by_seed.setdefault(_value(run.config, "seed"), []).append(run)
    return {seed: same for seed, same in by_seed.items() if len(same) > 1}


def describing_config(group: Sequence[Run]) -> dict[str, Any]:
    """A group's `training_config` plus its ``name`` (its runs' names joined by ``/`` in the
    rare case that equal configs carry different names): what labels choose from."""
    names = dict.fromkeys(str(run.config.get("name")) for run in group)
    return {"name": "/".join(names), **training_config(group[0])}


def distinguishing_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """The keys whose values tell the configs apart, fewest first.

    Names come first: ``name`` (the named config), then the ``*.name`` keys
    (``algorithm.name``, ``env.name``), each kept only where it separates configs that
    the names before it did not. Any other key that differs is kept unless a kept name
    already implies it (it is constant among the configs that share those names): the
    options of another algorithm are not listed beside its name, while two learning
    rates of one algorithm are.

    >>> distinguishing_keys([
    ...     {"name": "ppo_cartpole", "algorithm.name": "ppo", "algorithm.learning_rate": 5e-4},
    ...     {"name": "ppo_cartpole", "algorithm.name": "ppo", "algorithm.learning_rate": 1e-3},
    ...     {"name": "a2c_cartpole", "algorithm.name": "a2c", "algorithm.learning_rate": 7e-4},
    ... ])
    ['name', 'algorithm.learning_rate']
    """
    keys = sorted({key for config in configs for key in config})
    differing = [key for key in keys if len({_value(c, key) for c in configs}) > 1]
    name_keys = sorted(
        (key for key in differing if key == "name" or key.endswith(".name")),
        key=lambda key: (key != "name", key),
    )
    chosen: list[str] = []
    for key in name_keys:
        if _num_classes(configs, [*chosen, key]) > _num_classes(configs, chosen):
            chosen.append(key)
    names_only = list(chosen)
    for key in differing:
        if key not in name_keys and _num_classes(configs, [*names_only, key]) > _num_classes(
            configs, names_only
        ):
            chosen.append(key)
    return chosen


def group_labels(groups: Sequence[Sequence[Run]]) -> list[str]:
    """One legend label per group: its values of the `distinguishing_keys`, ``name`` bare
    and the others as ``key=value`` overrides, then the number of seeds (and of runs,
    where some share a seed).

    Floats are shown to 4 significant digits (a sweep's sampled ``0.000234567...`` as
    ``0.0002346``) unless two labels would then read the same.
    """
    configs = [describing_config(group) for group in groups]
    keys = distinguishing_keys(configs) or ["name"]  # one group is called by its name
    pairs = list(zip(configs, groups, strict=True))
    labels = [_label(config, group, keys, short=True) for config, group in pairs]
    if len(set(labels)) < len(labels):
        labels = [_label(config, group, keys, short=False) for config, group in pairs]
    return labels


def _label(config: dict[str, Any], group: Sequence[Run], keys: list[str], short: bool) -> str:
    parts = [
        _value(config, key, short) if key == "name" else f"{key}={_value(config, key, short)}"
        for key in keys
    ]
    seeds = _count(group)
    return textwrap.fill(", ".join([*parts[:-1], f"{parts[-1]} {seeds}"]), _LABEL_WIDTH)


def _count(group: Sequence[Run]) -> str:
    """``(3 seeds)``, or ``(3 runs, 1 seed)`` where runs share a seed (`shared_seeds`)."""
    num_seeds = len({_value(run.config, "seed") for run in group})
    seeds = f"{num_seeds} seed{'s' if num_seeds != 1 else ''}"
    return f"({seeds})" if num_seeds == len(group) else f"({len(group)} runs, {seeds})"


def shared_title(groups: Sequence[Sequence[Run]]) -> str:
    """What every run shares, as a title: the config name (else the algorithm) and the env.

    >>> shared_title([])
    'learning curves'
    """
    configs = [describing_config(group) for group in groups]
    if not configs:
        return "learning curves"

    def shared(key: str) -> str | None:
        values = {_value(config, key) for config in configs}
        return values.pop() if len(values) == 1 and _MISSING not in values else None

    subject = shared("name") or shared("algorithm.name")
    env = shared("env.name")
    if subject and env:
        return f"{subject} on {env}"
    return subject or env or "learning curves"


def _num_classes(configs: Sequence[dict[str, Any]], keys: Sequence[str]) -> int:
    return len({tuple(_value(config, key) for key in keys) for config in configs})


def _value(config: dict[str, Any], key: str, short: bool = False) -> str:
    """A config value as an override's right-hand side (``0.001``, ``[64,64]``, ``null``),
    a float to 4 significant digits when ``short``."""
    if key not in config:
        return _MISSING
    value = config[key]
    if isinstance(value, str):
        return value
    if short and isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
