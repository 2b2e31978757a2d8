"""Named configs: composing them with Hydra, applying overrides, checking the result.

A named config is a YAML file in ``cadence/config/named/`` that starts with the
defaults list::

    defaults:
      - cadence_defaults   # every key with its class default, built from the attrs classes
      - algorithm: ppo     # the algorithm's keys with their defaults
      - _self_             # then this file's values

so the file holds only what differs from the defaults, every key can still be
overridden on the command line with Hydra's grammar (``env.num_envs=16``,
``algorithm=a2c``), and defaults are written once, in the attrs classes.
"""

from __future__ import annotations

import hashlib
import os
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cadence.config.catalog import NAMED_CONFIG_DIR, named_config_paths
from cadence.config.catalog import list_configs as list_configs  # its old home; still works
from cadence.config.errors import ConfigError, Problem, close_matches, unknown_key_problem
from cadence.config.experiment import ALGORITHM_CONFIGS, ExperimentConfig
from cadence.config.serialize import to_dict
from cadence.config.structure import structure
from cadence.data.config_history import ADDED_KEYS
from cadence.trainer.config import DISPLAY_ONLY_FIELDS, TrainerConfig

DEFAULTS_NAME = "cadence_defaults"


def load_config(
    name: str, overrides: Sequence[str] = (), *, root_dir: str | os.PathLike[str] | None = None
) -> ExperimentConfig:
    """The named config ``name`` with ``overrides`` applied, checked and built.

    Args:
        name: a named config (see `list_configs`).
        overrides: a list of Hydra overrides such as ``["env.num_envs=16", "algorithm=a2c"]``;
            a single override is a list of one, never a bare string.
        root_dir: the run directory; it wins over a ``root_dir=`` override. Without
            either, ``runs/<name>/seed<seed>-<digest>`` (see `default_root_dir`).
            Relative paths are made absolute, so ``config.yaml`` means the same
            from any working directory.

    Returns:
        The config, with ``root_dir`` set.

    Raises:
        ConfigError: an unknown name, an override Hydra refuses, an unknown key,
            a value of the wrong type, or a value a validator refuses.
        TypeError: ``overrides`` is a string, or holds something other than strings.

    Example:
        >>> load_config("ppo_cartpole", ["env.num_envs=16"]).env.num_envs
        16
    """
    config = compose_config(name, overrides)
    root_dir = root_dir if root_dir is not None else config.root_dir or default_root_dir(config)
    return attrs.evolve(config, root_dir=os.path.abspath(os.path.expanduser(root_dir)))


def compose_config(name: str, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """The named config with ``overrides``, as written: ``root_dir`` may still be None."""
    return structure(ExperimentConfig, compose_tree(name, overrides), f"'{name}'")


def default_root_dir(config: ExperimentConfig) -> str:
    """``runs/<name>/seed<seed>-<digest>`` under the current directory.

    The digest hashes the config without ``root_dir``, ``description``, the budget
    ``trainer.num_env_steps`` (and its schedules' ``trainer.schedule_horizon``) and the
    display-only keys (`DISPLAY_ONLY_FIELDS`:
    ``trainer.progress_bar``, ``trainer.progress_interval_s``): the same command reaches
    the same directory (and resumes the run there) whatever it shows, a changed
    hyperparameter a new one, and a changed budget the same one, where training refuses
    it unless asked to resume with changes.
    """
    # The budget is left out: a longer run of the same experiment is the same directory,
    # where `cadence train` refuses the change unless asked to --resume-with-changes. The
    # display-only keys are hashed at their defaults rather than dropped, so a directory
    # made before they left the digest (with the defaults) keeps its name.
    display = {
        attribute.name: attribute.default
        for attribute in attrs.fields(TrainerConfig)
        if attribute.name in DISPLAY_ONLY_FIELDS
    }
    trainer = attrs.evolve(config.trainer, num_env_steps=1, **display)
    tree = to_dict(attrs.evolve(config, root_dir=None, description="", trainer=trainer))
    # The schedules' horizon goes with the budget (docs/resume.md); left out, not hashed
    # at its default, so that directories made before the key existed keep their names.
    del tree["trainer"]["schedule_horizon"]
    _drop_added_at_old_meaning(tree)
    tree["trainer"] = _with_removed_defaults(tree["trainer"])
    content = OmegaConf.to_yaml(OmegaConf.create(tree))
    digest = hashlib.sha256(content.encode()).hexdigest()[:8]
    return os.path.join("runs", config.name, f"seed{config.seed}-{digest}")


def _drop_added_at_old_meaning(tree: dict[str, Any]) -> None:
    """Removes from ``tree`` each key added since run directories were first named
    (`ADDED_KEYS`) whose value is the one that means what runs before it did: the same
    experiment keeps its directory's name (and the same command resumes it)."""
    for dotted, old_meaning in ADDED_KEYS.items():
        *sections, key = dotted.split(".")
        parent: Any = tree
        for section in sections:
            parent = parent.get(section) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and key in parent and parent[key] == old_meaning:
            del parent[key]


REMOVED_DEFAULTS = {"cpu_matmul": ("num_threads", "auto")}
"""Removed ``trainer`` keys that the default run directory's digest still hashes, each at
the default it had, after the key it followed: a directory made before one went keeps its
name (the same command resumes it)."""


def _with_removed_defaults(trainer: dict[str, Any]) -> dict[str, Any]:
    """``trainer`` with `REMOVED_DEFAULTS` put back where they stood."""
    restored = {}
    for key, value in trainer.items():
        restored[key] = value
        for removed, (after, default) in REMOVED_DEFAULTS.items():
            if key == after:
                restored[removed] = default
    return restored


def compose_tree(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The named config with ``overrides`` as a plain dict, composed by Hydra.

    Hydra's compose API neither changes the working directory nor creates
    output directories, unlike ``@hydra.main``.

    Raises:
        ConfigError: an unknown name, an unparsable override, or one Hydra refuses.
        TypeError: ``overrides`` is not a list of strings (see `check_overrides`).
    """
    check_overrides(overrides)
    _check_name(name)
    _check_override_syntax(name, overrides)
    register_defaults()
    try:
        with initialize_config_dir(config_dir=str(NAMED_CONFIG_DIR), version_base="1.3"):
            tree = compose(config_name=name, overrides=list(overrides))
        tree = OmegaConf.to_container(tree, resolve=True)
        switched = _switched_algorithm(name, overrides)
        if switched is not None:
            defaults = to_dict(ALGORITHM_CONFIGS[switched]())
            _drop_foreign_keys(tree["algorithm"], defaults, _overridden_keys(overrides))
        return tree
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as error:
        raise _hydra_error(name, error) from None


def check_overrides(overrides: Any) -> None:
    """Refuses ``overrides`` unless it is a list (or tuple) of ``"key=value"`` strings.

    A bare string is a sequence of characters: taken as overrides, each character
    would be refused as one override, hiding the mistake.

    Raises:
        TypeError: saying what ``overrides`` is and how to write it.
    """
    if isinstance(overrides, str):
        raise TypeError(
            'overrides must be a list of "key=value" strings, got the string '
            f"{overrides!r}; write [{overrides!r}]"
        )
    if isinstance(overrides, Mapping) or not isinstance(overrides, Sequence):
        raise TypeError(
            'overrides must be a list of "key=value" strings, got '
            f"{type(overrides).__name__} {overrides!r}"
        )
    for override in overrides:
        if not isinstance(override, str):
            raise TypeError(
                'overrides must be a list of "key=value" strings, got '
                f"{type(override).__name__} {override!r} in it"
            )


def _switched_algorithm(name: str, overrides: Sequence[str]) -> str | None:
    """The algorithm an ``algorithm=NAME`` override switches to, if it is not the named
    config's own (whose ``algorithm:`` keys were written for that one)."""
    parser = OverridesParser.create()
    chosen = None
    for override in parser.parse_overrides(list(overrides)):
        if override.key_or_group == "algorithm" and not override.is_delete():
            chosen = override.value()
    if not isinstance(chosen, str):
        return None
    defaults = OmegaConf.load(NAMED_CONFIG_DIR / f"{name}.yaml").get("defaults", [])
    own = next(
        (d["algorithm"] for d in defaults if isinstance(d, Mapping) and "algorithm" in d), None
    )
    return None if chosen == own else chosen


def _overridden_keys(overrides: Sequence[str]) -> set[str]:
    return {o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))}


def _drop_foreign_keys(
    section: dict[str, Any], defaults: dict[str, Any], keep: set[str], prefix: str = "algorithm."
) -> None:
    """Drops the named config's algorithm keys that the switched-to algorithm does not have.

    A named config's ``algorithm:`` keys were written for its own algorithm: with
    ``cadence train ppo_cartpole algorithm=dqn``, PPO's ``clip_coef`` means nothing, while
    a shared key such as ``learning_rate`` still applies. Keys set on the command line
    (``keep``) stay, so a mistyped one is still reported.
    """
    for key in list(section):
        dotted = f"{prefix}{key}"
        if key not in defaults:
            if not any(k == dotted or k.startswith(f"{dotted}.") for k in keep):
                del section[key]
        elif isinstance(section[key], dict) and isinstance(defaults[key], dict):
            _drop_foreign_keys(section[key], defaults[key], keep, f"{dotted}.")


def register_defaults() -> None:
    """Stores the class defaults in Hydra's ConfigStore (idempotent).

    ``cadence_defaults`` holds every key but the algorithm's; the group
    ``algorithm`` holds one entry per `ALGORITHM_CONFIGS` name.
    """
    store = ConfigStore.instance()
    defaults = to_dict(ExperimentConfig(name="defaults"))
    for key in ("name", "algorithm"):
        del defaults[key]
    store.store(name=DEFAULTS_NAME, node=_open_mappings(defaults, ExperimentConfig))
    # Algorithms come and go (`unregister_algorithm`): the group holds exactly today's.
    store.repo.pop("algorithm", None)
    for algorithm, config_class in ALGORITHM_CONFIGS.items():
        node = _open_mappings(to_dict(config_class()), config_class)
        store.store(group="algorithm", name=algorithm, node=node)


def _open_mappings(tree: dict[str, Any], config_class: type) -> Any:
    """``tree`` as an OmegaConf node whose free-form mappings (fields typed ``dict``, such
    as ``env.env_kwargs``) take any key: ``env.env_kwargs={render_mode: rgb_array}`` and
    ``env.env_kwargs.render_mode=...`` then work as they read, while a mistyped key of a
    config class is still refused."""
    node = OmegaConf.create(tree)
    for path in _mapping_fields(config_class):
        child = OmegaConf.select(node, path)
        if child is not None:
            OmegaConf.set_struct(child, False)
    return node


def _mapping_fields(config_class: type, prefix: str = "") -> Iterator[str]:
    """The dotted paths of the ``dict``-typed fields of an attrs config class, nested ones too."""
    hints = typing.get_type_hints(config_class)
    for field in attrs.fields(config_class):
        hint = hints.get(field.name)
        origin = typing.get_origin(hint) or hint
        if attrs.has(origin):
            yield from _mapping_fields(origin, f"{prefix}{field.name}.")
        elif origin in (dict, Mapping):
            yield f"{prefix}{field.name}"


def _named_paths() -> list[Path]:
    return named_config_paths(NAMED_CONFIG_DIR)  # this module's, which tests may replace


def _check_name(name: str) -> None:
    names = [path.stem for path in _named_paths()]
    if name not in names:
        matches = close_matches(name, names)
        hint = f"; did you mean {' or '.join(matches)}?" if matches else ""
        raise ConfigError(f"Unknown config {name!r}{hint}\nKnown configs: {', '.join(names)}")


def _check_override_syntax(name: str, overrides: Sequence[str]) -> None:
    """Parses each override alone, so a grammar error names the override."""
    parser = OverridesParser.create()
    problems = []
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException as error:
            reason = str(error).splitlines()[0]
            problems.append(Problem(override, f"not a KEY=VALUE override ({reason})"))
    if problems:
        raise ConfigError(f"Invalid overrides of config '{name}':", problems)


def _hydra_error(name: str, error: Exception) -> ConfigError:
    summary = f"Invalid config '{name}':"
    if isinstance(error, MissingConfigException) and error.options:
        group = (error.missing_cfg_file or "").split("/")[0]
        choices = ", ".join(error.options)
        hint = attrs.fields_dict(ExperimentConfig).get(group)  # how to add a choice, if any
        hint = hint and hint.metadata.get("unknown_hint")
        problem = f"no such choice; expected one of {choices}{f'; {hint}' if hint else ''}"
        return ConfigError(summary, [Problem(group, problem)])
    refused = re.match(r"Could not override '([^']+)'", str(error))
    if refused:
        return ConfigError(summary, [_refused_key_problem(name, refused.group(1))])
    if isinstance(error, yaml.YAMLError):  # its later lines say which file and line
        return ConfigError(summary, [Problem("(YAML)", " ".join(str(error).split()))])
    return ConfigError(summary, [Problem("(Hydra)", str(error).splitlines()[0])])


def _refused_key_problem(name: str, key: str) -> Problem:
    """Hydra refuses to set a key its struct tree does not hold; say which keys it does."""
    base = compose_tree(name)
    parent = key.rpartition(".")[0]
    if parent and isinstance(_lookup(base, parent), Mapping) and parent in _free_dicts():
        return Problem(key, f"not in {parent}; add a new key with +{key}=VALUE")
    return unknown_key_problem(key, _dotted_keys(base))


def _free_dicts(cls: type = ExperimentConfig, prefix: str = "") -> set[str]:
    """The dotted keys of fields that hold a free-form dict (like env.env_kwargs)."""
    keys = set()
    hints = typing.get_type_hints(cls)
    for field in attrs.fields(cls):
        sections = field.metadata.get("registry", {}).values() or [hints[field.name]]
        for section in sections:
            if attrs.has(section):
                keys |= _free_dicts(section, f"{prefix}{field.name}.")
        if typing.get_origin(hints[field.name]) is dict:
            keys.add(f"{prefix}{field.name}")
    return keys


def _lookup(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _dotted_keys(tree: Mapping[str, Any]) -> list[str]:
    return [key for key, value in _walk(tree) if not isinstance(value, Mapping) or not value]


def _walk(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted key, value) of ``tree``: a nested dict's own key, then its keys."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _walk(value, f"{dotted}.")
        yield dotted, value
