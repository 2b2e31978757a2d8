"""`config_help`: every key of a named config with its value, type and doc."""

from __future__ import annotations

import typing
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from cadence.config.experiment import ALGORITHM_CONFIGS
from cadence.config.loading import compose_config, register_defaults
from cadence.data.typed_fields import type_name


def config_help(name: str, overrides: Sequence[str] = ()) -> str:
    """A text listing every dotted key of named config ``name`` with ``overrides`` applied.

    ``cadence train NAME algorithm=dqn --help`` passes its group overrides (see
    `group_overrides`), so the keys listed are those of the config that would run.

    Each key comes as the override that sets its current value, then its type,
    then its doc on the next line, e.g.::

        env.num_envs=8  (int)
            Environments stepped together as one batch.

    Raises:
        ConfigError: no named config ``name``, or it does not validate.
    """
    config = compose_config(name, overrides)
    lines = [
        f"Config '{' '.join([name, *overrides])}': {config.description}",
        "Override any key with KEY=VALUE (Hydra syntax); "
        f"algorithm=NAME switches the algorithm ({', '.join(ALGORITHM_CONFIGS)}): NAME's "
        "defaults replace this config's algorithm keys, and algorithm.KEY=VALUE still applies.",
        "",
    ]
    for key, field, annotation, value in iter_leaves(config):
        lines.append(f"  {key}={format_value(value)}  ({type_name(annotation)})")
        lines.append(f"      {field.metadata.get('doc', '')}")
    return "\n".join(lines)


def group_overrides(overrides: Sequence[str]) -> list[str]:
    """Those of ``overrides`` that choose a config group (``algorithm=dqn``), which
    change the keys a config has; value overrides (``env.num_envs=16``) are left out."""
    register_defaults()
    groups = {
        key for key, node in ConfigStore.instance().repo.items() if isinstance(node, dict)
    } - {"hydra"}
    parser = OverridesParser.create()
    chosen = []
    for override in overrides:
        try:
            key = parser.parse_override(override).key_or_group
        except HydraException:  # not an override: loading the config reports it
            continue
        if key in groups:
            chosen.append(override)
    return chosen


def iter_leaves(config: Any, prefix: str = "") -> Iterator[tuple[str, attrs.Attribute, Any, Any]]:
    """(dotted key, attrs field, annotation, value) of every leaf of ``config``, in field order."""
    hints = typing.get_type_hints(type(config))
    for field in attrs.fields(type(config)):
        value = getattr(config, field.name)
        if attrs.has(type(value)):
            yield from iter_leaves(value, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}", field, hints[field.name], value


def format_value(value: Any) -> str:
    """``value`` as Hydra's override grammar reads it: null, true, [64, 64], {a: 1}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and not _is_plain(value):
        return repr(value)
    return str(value)


def _is_plain(text: str) -> bool:
    """Whether Hydra reads ``text`` unquoted back as this same string."""
    special = set(" ,=[]{}()'\"\\:$*?")
    looks_typed = text.lower() in {"null", "true", "false", "nan", "inf", ""} or _is_number(text)
    return not looks_typed and not (set(text) & special)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
