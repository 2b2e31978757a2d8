"""Typed experiment configs: named configs composed with Hydra, overrides, validation, YAML."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ConfigError": "errors",
        "Problem": "errors",
        "ALGORITHM_CONFIGS": "experiment",
        "AlgorithmConfig": "experiment",
        "ExperimentConfig": "experiment",
        "config_help": "help",
        "default_root_dir": "loading",
        "list_configs": "catalog",
        "load_config": "loading",
        "from_yaml": "serialize",
        "to_yaml": "serialize",
    },
)

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
