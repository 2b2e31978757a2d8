"""Pins the public names of `cadence.config`."""

import cadence.config


def test_public_names():
    assert sorted(cadence.config.__all__) == [
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
    assert all(hasattr(cadence.config, name) for name in cadence.config.__all__)


def test_config_error_is_a_value_error():
    assert issubclass(cadence.config.ConfigError, ValueError)
