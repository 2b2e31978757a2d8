"""Starting a run directory again with a config that differs from its ``config.yaml``.

A run directory holds one run: starting it again with the same config resumes it.
Starting it with a different config is refused, naming each changed key, unless the
user asks for it (``cadence train ... --resume-with-changes``); then the new config
is recorded (``config.yaml`` rewritten, the change appended to
``config_changes.jsonl``) and training goes on from the checkpoint. Extending a
finished run's budget (``trainer.num_env_steps``) is such a change. The display-only
keys (`DISPLAY_ONLY_FIELDS`: ``trainer.progress_bar``, ``trainer.progress_interval_s``)
are not: the run goes on showing what it is told now, and ``config.yaml`` is left as it
is (a sweep trial saved with ``progress_bar: 'off'`` resumes under a plain ``cadence train``).

Some keys cannot change even then, because the checkpoint could not hold the same
run afterwards: the algorithm, the network (parameter shapes), the environment id,
the number of environments and the back end (env states are back-end specific),
the number of ranks (each has its part of the checkpoint), the seed and the name.
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from cadence.data.config_history import ADDED_KEYS, REMOVED_KEYS, removed_key_warning
from cadence.trainer.config import DISPLAY_ONLY_FIELDS
from cadence.trainer.errors import RunConfigMismatchError

logger = logging.getLogger(__name__)

FIXED_KEYS = (
    "name",
    "seed",
    "algorithm.name",
    "env.name",
    "env.num_envs",
    "env.backend",
    "trainer.num_ranks",
)
FIXED_SECTIONS = ("network.",)
IGNORED_KEYS = ("root_dir", "description", *(f"trainer.{name}" for name in DISPLAY_ONLY_FIELDS))

CHANGES_FILE = "config_changes.jsonl"
# The model-based keys that shape the checkpoint's parameters: no resume can change them.
MODEL_STRUCTURE_KEYS = tuple(
    f"algorithm.{key}"
    for key in (
        *(f"world_model.{g}_{part}_size" for g in "xyz" for part in ("belief", "state")),
        "world_model.z_prior_uses_y",
        "world_model.z_inputs",
        "world_model.joint_posterior",
        "world_model.layer_widths",
        "world_model.hidden_size",
        "world_model.mlp_hidden_size",
        "world_model.mlp_layers",
        "world_model.embedding_size",
        "world_model.conv_stack",
        "actor_critic.hidden_size",
        "actor_critic.num_layers",
        "sac.hidden_size",
        "sac.num_layers",
        "sac.actor_layers",
    )
)


def config_changes(old_yaml: str, new_yaml: str) -> dict[str, tuple[Any, Any]]:
    """Each dotted key whose value differs between two resolved configs: ``(old, new)``."""
    old, new = _flatten(yaml.safe_load(old_yaml) or {}), _flatten(yaml.safe_load(new_yaml) or {})
    old = {**{key: value for key, value in ADDED_KEYS.items() if key in new}, **old}
    old = {key: value for key, value in old.items() if key not in REMOVED_KEYS}
    return {
        key: (old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if key not in IGNORED_KEYS and old.get(key) != new.get(key)
    }


def check_resume_config(
    run_dir: Path, config_yaml: str, resume_with_changes: bool, iteration: int
) -> bool:
    """Refuses or records a change of config on resume; returns whether there was one.

    Raises:
        RunConfigMismatchError: the config differs and ``resume_with_changes`` is False,
            or a key that cannot change did.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return False
    old_yaml = path.read_text()
    recorded = _flatten(yaml.safe_load(old_yaml) or {})
    removed = sorted(REMOVED_KEYS.keys() & recorded.keys())
    for key in removed:
        logger.warning(removed_key_warning(key, recorded[key], str(path)))
    changes = config_changes(old_yaml, config_yaml)
    if not changes:
        if removed:  # the run goes on without them, and a later resume says nothing
            path.write_text(config_yaml)
        return False
    structure = [key for key in changes if key in MODEL_STRUCTURE_KEYS]
    if structure:
        raise RunConfigMismatchError(_structure_message(run_dir, changes, structure))
    fixed = [key for key in changes if key in FIXED_KEYS or key.startswith(FIXED_SECTIONS)]
    if fixed:
        raise RunConfigMismatchError(
            f"{run_dir} holds a run whose {', '.join(fixed)} cannot change on resume "
            f"(the checkpoint holds another run):\n{_describe(changes)}\n"
            "Start a new run in another directory (--root-dir)."
        )
    if not resume_with_changes:
        raise RunConfigMismatchError(
            f"{run_dir} holds a run with another config:\n{_describe(changes)}\n"
            "To continue it with these changes (e.g. a larger trainer.num_env_steps), add "
            "--resume-with-changes; to start a new run, choose another --root-dir."
        )
    record = {"iteration": iteration, "changes": {k: list(v) for k, v in changes.items()}}
    with open(Path(run_dir) / CHANGES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    path.write_text(config_yaml)
    return True


def first_budget(run_dir: Path) -> int | None:
    """The ``trainer.num_env_steps`` the run in ``run_dir`` was first started with: the
    old value of its first recorded change of budget, else its ``config.yaml``'s (None
    without one)."""
    changes = Path(run_dir) / CHANGES_FILE
    if changes.is_file():
        for line in changes.read_text(encoding="utf-8").splitlines():
            change = json.loads(line)["changes"].get("trainer.num_env_steps")
            if change is not None:
                return int(change[0])
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    budget = _flatten(yaml.safe_load(path.read_text()) or {}).get("trainer.num_env_steps")
    return int(budget) if budget is not None else None


def _structure_message(
    run_dir: Path, changes: dict[str, tuple[Any, Any]], structure: list[str]
) -> str:
    """Why a model-based run cannot resume with another network structure, and how to
    resume it with its own."""
    overrides = " ".join(f"{key}={_override_value(changes[key][0])}" for key in structure)
    return (
        f"{run_dir} holds a model-based run whose networks had another structure "
        f"({', '.join(structure)}); its checkpoint cannot load into these:\n"
        f"{_describe(changes)}\n"
        f"A run written by cadence {version('cadence')} before the Denoised MDP original's "
        'structure became the model-based default (docs/model-based.md, "Structure") '
        "resumes with its own structure when given it back:\n"
        f"  {overrides}\n"
        "or start a new run in another directory (--root-dir)."
    )


def _override_value(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _describe(changes: dict[str, tuple[Any, Any]]) -> str:
    return "\n".join(f"  {key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
