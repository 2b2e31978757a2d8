"""Typed experiment configs: named configs composed with Hydra, overrides, validation, YAML."""

from cadence.config.errors import ConfigError, Problem
from cadence.config.experiment import ALGORITHM_CONFIGS, AlgorithmConfig, ExperimentConfig
from cadence.config.help import config_help
from cadence.config.loading import default_root_dir, list_configs, load_config
from cadence.config.serialize import from_yaml, to_yaml

__all__ = [
    "ALGORITHM_CONFIGS",
    "AlgorithmConfig",
    "ConfigError",
    "ExperimentConfig",
    "Problem",
    "config_help",
    "default_root_dir",
    "from_yaml",
    "list_configs",
    "load_config",
    "to_yaml",
]
