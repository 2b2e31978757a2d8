"""`to_yaml` / `from_yaml`: the resolved config tree as text, and back, unchanged."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cadence.config.errors import ConfigError, Problem
from cadence.config.experiment import ExperimentConfig
from cadence.config.structure import structure
from cadence.data.config_history import (
    MODEL_BASED_ADDED_KEYS,
    REMOVED_KEYS,
    removed_key_warning,
)

logger = logging.getLogger(__name__)


def to_dict(config: Any) -> dict[str, Any]:
    """The attrs config ``config`` as nested plain dicts (tuples become lists)."""
    return attrs.asdict(config, value_serializer=_tuple_to_list)


def _tuple_to_list(instance: Any, field: attrs.Attribute | None, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def to_yaml(config: ExperimentConfig) -> str:
    """The whole resolved ``config`` as YAML; `from_yaml` reads it back equal.

    Example:
        >>> config = ExperimentConfig(name="demo")
        >>> from_yaml(to_yaml(config)) == config
        True
    """
    # OmegaConf writes and reads YAML with the same scalar rules (1e-5 is a
    # float to both), which plain PyYAML does not guarantee.
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(config)))


def from_yaml(text: str, source: str = "from YAML") -> ExperimentConfig:
    """The `ExperimentConfig` written as YAML in ``text``, checked like a named config.

    Args:
        text: YAML such as a run's ``config.yaml``; keys it leaves out take the
            class defaults, but for the model-based keys added since runs were first
            written (`MODEL_BASED_ADDED_KEYS`), which take the value that builds what the
            run's writer built (where the text has their section); keys earlier versions
            wrote that were removed since (`REMOVED_KEYS`) are dropped with a warning, so
            that an older run still resumes, evaluates and plays.
        source: what the text came from, for the first line of an error.

    Raises:
        ConfigError: the text is not YAML, or the tree is not a valid config.
    """
    try:
        # No resolvers: a run's config.yaml is plain values, and reading one back must not
        # reach outside the file (${oc.env:...} and the like stay literal text).
        data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except (yaml.YAMLError, OmegaConfBaseException) as error:
        raise ConfigError(f"Invalid config {source}:", [Problem("(YAML)", str(error))]) from None
    drop_removed_keys(data, source)
    if isinstance(data, dict):
        _fill_added_keys(data)
    return structure(ExperimentConfig, data, source)


def drop_removed_keys(tree: Any, source: str) -> None:
    """Removes from the config ``tree`` (nested dicts, as a run's ``config.yaml`` holds
    them) every key of `REMOVED_KEYS`, logging `removed_key_warning` for each."""
    for dotted in REMOVED_KEYS:
        *sections, key = dotted.split(".")
        parent = tree
        for section in sections:
            parent = parent.get(section) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and key in parent:
            logger.warning(removed_key_warning(dotted, parent.pop(key), source))


MODEL_BASED = ("dreamer", "denoised_mdp", "sac_latent")


def _fill_added_keys(data: dict[str, Any]) -> None:
    algorithm = data.get("algorithm")
    if not isinstance(algorithm, dict) or algorithm.get("name") not in MODEL_BASED:
        return
    for dotted, value in MODEL_BASED_ADDED_KEYS.items():
        *parents, leaf = dotted.split(".")
        section: Any = data
        for key in parents:
            section = section.get(key) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf not in section:
            section[leaf] = value
