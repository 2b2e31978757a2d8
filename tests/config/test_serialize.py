"""Tests of `to_yaml` / `from_yaml`: the written config alone reproduces the run."""

import pytest

from cadence.config import (
    ConfigError,
    ExperimentConfig,
    from_yaml,
    list_configs,
    load_config,
    to_yaml,
)


@pytest.mark.parametrize("name", list(list_configs()))
def test_yaml_round_trip_of_every_named_config(name):
    config = load_config(name)
    assert from_yaml(to_yaml(config)) == config


def test_yaml_round_trip_keeps_overrides_and_awkward_values():
    config = load_config(
        "ppo_cartpole",
        [
            "algorithm.learning_rate=1e-5",
            "algorithm.target_kl=0.02",
            "+env.env_kwargs.mode='1e-5'",
            "+env.env_kwargs.flag=true",
            "env.max_episode_steps=200",
        ],
    )
    text = to_yaml(config)
    assert from_yaml(text) == config
    assert from_yaml(text).env.env_kwargs == {"mode": "1e-5", "flag": True}


def test_from_yaml_checks_like_a_named_config():
    text = to_yaml(load_config("ppo_cartpole")).replace("num_envs: 8", "num_envs: 0")
    with pytest.raises(ConfigError, match=r"env.num_envs=0: must be >= 1"):
        from_yaml(text, source="'run/config.yaml'")


def test_from_yaml_refuses_broken_yaml():
    with pytest.raises(ConfigError, match="Invalid config"):
        from_yaml("name: [unclosed")


def test_reading_a_config_back_resolves_nothing_outside_the_file(monkeypatch):
    monkeypatch.setenv("CADENCE_TEST_SECRET", "leaked")
    text = to_yaml(ExperimentConfig(name="demo")).replace(
        "description: ''", "description: ${oc.env:CADENCE_TEST_SECRET}"
    )
    assert "${oc.env:CADENCE_TEST_SECRET}" in text
    assert from_yaml(text).description == "${oc.env:CADENCE_TEST_SECRET}"
