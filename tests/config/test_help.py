"""Tests of `config_help`: every key with its value, type and doc."""

import attrs

from cadence.config import config_help, load_config
from cadence.config.help import format_value, iter_leaves


def test_help_lists_every_key_with_value_type_and_doc():
    text = config_help("ppo_cartpole")
    lines = text.splitlines()
    config = load_config("ppo_cartpole")
    for key, field, _, _ in iter_leaves(config):
        matches = [i for i, line in enumerate(lines) if line.startswith(f"  {key}=")]
        assert len(matches) == 1, key
        assert lines[matches[0] + 1].strip() == field.metadata["doc"]
    assert "  env.num_envs=8  (int)" in lines
    assert "  trainer.unroll_length=32  (int)" in lines
    assert "  algorithm.target_kl=null  (float | None)" in lines
    backends = "{'serial', 'thread', 'parallel', 'vector', 'tensor', 'prefer_tensor', 'auto'}"
    assert f"  env.backend=serial  ({backends})" in lines


def test_help_shows_the_named_configs_values_not_class_defaults():
    assert "  algorithm.learning_rate=0.0007  (float)" in config_help("a2c_cartpole").splitlines()


def test_every_field_has_a_doc():
    for _, field, _, _ in iter_leaves(load_config("ppo_cartpole_pixels")):
        assert field.metadata.get("doc"), field.name
    for _, field, _, _ in iter_leaves(attrs.evolve(load_config("a2c_cartpole"))):
        assert field.metadata.get("doc"), field.name


def test_format_value_writes_hydra_override_syntax():
    assert format_value(None) == "null"
    assert format_value(True) == "true"
    assert format_value((64, 64)) == "[64, 64]"
    assert format_value({"a": 1}) == "{a: 1}"
    assert format_value("CartPole-v1") == "CartPole-v1"
    assert format_value("has space") == "'has space'"
    assert format_value("1e-5") == "'1e-5'"


def test_help_applies_group_overrides_and_lists_the_switched_algorithms_keys():
    from cadence.config.help import group_overrides

    overrides = ["algorithm=dqn", "env.num_envs=3", "not an override"]
    assert group_overrides(overrides) == ["algorithm=dqn"]
    lines = config_help("ppo_cartpole", ["algorithm=dqn"]).splitlines()
    assert lines[0].startswith("Config 'ppo_cartpole algorithm=dqn': ")
    assert "  algorithm.name=dqn  (str)" in lines
    assert not any(line.startswith("  algorithm.clip_coef=") for line in lines)
