"""Tests of named configs: composing with Hydra, overrides, and the errors they give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cadence.algorithms.a2c.config import A2CConfig
from cadence.algorithms.ppo.config import PPOConfig
from cadence.config import ConfigError, ExperimentConfig, list_configs, load_config
from cadence.config.experiment import ALGORITHM_CONFIGS
from cadence.config.loading import NAMED_CONFIG_DIR

# Every YAML file in the named-config directory (other issues add their own).
NAMED = sorted(path.stem for path in NAMED_CONFIG_DIR.glob("*.yaml"))
# The named configs of the first end-to-end training issue: they must always be there.
REQUIRED = ["a2c_cartpole", "ppo_cartpole", "ppo_cartpole_pixels", "ppo_hopper", "ppo_pendulum"]


def _error(name: str, overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(name, overrides)
    return caught.value


def test_list_configs_names_every_yaml_with_a_description():
    configs = list_configs()
    assert list(configs) == NAMED
    assert set(REQUIRED) <= set(configs)
    assert all(description.strip() for description in configs.values())


@pytest.mark.parametrize("name", NAMED)
def test_every_named_config_loads_and_validates(name):
    config = load_config(name)
    assert isinstance(config, ExperimentConfig)
    assert config.name == name
    assert config.description == list_configs()[name]
    assert os.path.isabs(config.root_dir)


def test_named_configs_choose_env_and_algorithm():
    cartpole = load_config("ppo_cartpole")
    assert (cartpole.env.name, cartpole.env.backend, cartpole.env.num_envs) == (
        "CartPole-v1",
        "serial",
        8,
    )
    assert cartpole.trainer.unroll_length == 32
    assert isinstance(cartpole.algorithm, PPOConfig)
    assert isinstance(load_config("a2c_cartpole").algorithm, A2CConfig)
    assert load_config("ppo_pendulum").env.name == "Pendulum-v1"
    assert load_config("ppo_hopper").env.name == "Hopper-v5"
    assert load_config("ppo_cartpole_pixels").env.name == "cadence/PixelCartPole-v1"


def test_named_yaml_files_are_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "config/named/*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["cadence"]
    assert set(REQUIRED) <= set(NAMED)


def test_overrides_apply_with_hydra_grammar():
    config = load_config(
        "ppo_cartpole", ["env.num_envs=16", "algorithm.learning_rate=3e-4", "seed=3"]
    )
    assert config.env.num_envs == 16
    assert config.algorithm.learning_rate == 3e-4
    assert config.seed == 3


def test_overrides_convert_to_the_annotated_types():
    config = load_config("ppo_cartpole", ["trainer.num_env_steps=1e6", "algorithm.gamma=1"])
    assert config.trainer.num_env_steps == 1_000_000 and isinstance(
        config.trainer.num_env_steps, int
    )
    assert config.algorithm.gamma == 1.0 and isinstance(config.algorithm.gamma, float)


def test_new_env_kwargs_are_added_with_or_without_plus():
    for override in (
        "+env.env_kwargs.render_mode=rgb_array",
        "env.env_kwargs.render_mode=rgb_array",
    ):
        config = load_config("ppo_cartpole", [override])
        assert config.env.env_kwargs == {"render_mode": "rgb_array"}


def test_algorithm_group_switches_the_algorithm():
    config = load_config("a2c_cartpole", ["algorithm=ppo", "~algorithm.ent_coef"])
    assert isinstance(config.algorithm, PPOConfig)
    assert config.algorithm.learning_rate == 7e-4  # the named config's value still applies


def test_unknown_key_is_named_with_close_matches():
    error = _error("ppo_cartpole", ["algorithm.no_such_key=1"])
    assert [problem.key for problem in error.problems] == ["algorithm.no_such_key"]
    assert "unknown key" in str(error)
    assert "did you mean algorithm.learning_rate" in str(
        _error("ppo_cartpole", ["algorithm.learnin_rate=1"])
    )
    assert "did you mean env.num_envs" in str(_error("ppo_cartpole", ["algorithm.num_envs=1"]))


def test_unknown_key_added_with_plus_is_refused_by_validation():
    error = _error("ppo_cartpole", ["+algorithm.num_envs=1"])
    assert "algorithm.num_envs: unknown key; did you mean env.num_envs" in str(error)


def test_range_errors_name_key_value_and_constraint():
    error = _error("ppo_cartpole", ["env.num_envs=-3", "algorithm.gamma=2"])
    assert "  env.num_envs=-3: must be >= 1" in str(error).splitlines()
    assert "  algorithm.gamma=2.0: must be <= 1" in str(error).splitlines()


def test_type_errors_name_the_expected_type():
    error = _error("ppo_cartpole", ["trainer.num_env_steps=abc"])
    assert "trainer.num_env_steps='abc': expected int, got str" in str(error)


def test_literal_choice_errors_list_the_choices():
    error = _error("ppo_cartpole", ["env.backend=gpu"])
    assert (
        "env.backend='gpu': expected one of 'serial', 'thread', 'parallel', 'vector', 'tensor', "
        "'prefer_tensor', 'auto'" in str(error)
    )
    names = ", ".join(f"'{name}'" for name in ALGORITHM_CONFIGS)
    assert f"algorithm.name='nope': expected one of {names}" in str(
        _error("ppo_cartpole", ["algorithm.name=nope"])
    )


def test_unknown_algorithm_group_choice_lists_the_choices():
    error = _error("ppo_cartpole", ["algorithm=nope"])
    choices = ", ".join(sorted(ALGORITHM_CONFIGS))
    assert f"algorithm: no such choice; expected one of {choices}" in str(error)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("trainer.num_env_steps=1000", "got the string 'trainer.num_env_steps=1000'; write ["),
        ({"env.num_envs": 4}, "got dict"),
        (["env.num_envs=4", 4], "got int 4 in it"),
    ],
)
def test_overrides_that_are_not_a_list_of_strings_are_a_type_error(overrides, message):
    with pytest.raises(TypeError, match='list of "key=value" strings') as caught:
        load_config("ppo_cartpole", overrides)
    assert message in str(caught.value)


def test_unparsable_override_is_named():
    error = _error("ppo_cartpole", ["env.num_envs=[1"])
    assert error.problems[0].key == "env.num_envs=[1"


def test_unknown_config_name_suggests_close_names():
    error = _error("ppo_cartpol", [])
    assert "Unknown config 'ppo_cartpol'; did you mean ppo_cartpole" in str(error)


def test_default_root_dir_depends_on_config_not_on_description(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = load_config("ppo_cartpole")
    assert Path(first.root_dir).parent == tmp_path / "runs" / "ppo_cartpole"
    assert Path(first.root_dir).name.startswith("seed0-")
    assert load_config("ppo_cartpole", ["description=other"]).root_dir == first.root_dir
    assert load_config("ppo_cartpole", ["env.num_envs=4"]).root_dir != first.root_dir
    assert not (tmp_path / "runs").exists()  # loading creates nothing


def test_root_dir_argument_wins_and_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config("ppo_cartpole", ["root_dir=from_override"], root_dir="mine")
    assert config.root_dir == str(tmp_path / "mine")
    assert load_config("ppo_cartpole", ["root_dir=other"]).root_dir == str(tmp_path / "other")


def test_loading_leaves_the_working_directory_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    load_config("ppo_cartpole")
    assert Path.cwd() == tmp_path
    assert list(tmp_path.iterdir()) == []  # no Hydra outputs/ or .hydra/


def test_broken_named_yaml_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text("defaults:\n  - cadence_defaults\nenv: [unclosed\n")
    monkeypatch.setattr("cadence.config.loading.NAMED_CONFIG_DIR", tmp_path)
    error = _error("broken", [])
    assert error.problems[0].key == "(YAML)" and "broken.yaml" in error.problems[0].message


def test_a_free_form_mapping_takes_any_key_from_the_command_line():
    config = load_config(
        "ppo_cartpole", ["env.env_kwargs={max_episode_steps: 50, sutton_barto_reward: true}"]
    )
    assert config.env.env_kwargs == {"max_episode_steps": 50, "sutton_barto_reward": True}
    config = load_config("sac_pendulum", ["env.env_kwargs.g=9.0"])
    assert config.env.env_kwargs == {"g": 9.0}
    with pytest.raises(
        ConfigError, match="env.env_kwarg: unknown key; did you mean env.env_kwargs"
    ):
        load_config("ppo_cartpole", ["env.env_kwarg={a: 1}"])


@pytest.mark.parametrize(
    ("name", "override", "hint"),
    [
        ("ppo_cartpole", "algorithm.lr=1e-3", "did you mean algorithm.learning_rate?"),
        ("sac_pendulum", "algorithm.actor_lr=1e-3", "did you mean algorithm.actor_learning_rate?"),
        (
            "sac_pendulum",
            "algorithm.lr=3e-4",
            "did you mean algorithm.actor_learning_rate or algorithm.critic_learning_rate "
            "or algorithm.alpha_learning_rate?",
        ),
        (
            "ppo_cartpole",
            "data_transformers.names=[observation_normaliser]",
            "item 0: expected one of 'untransformed_time_step', 'hindsight_experience'",
        ),
        (
            "ppo_cartpole",
            "data_transformers.names=[UntransformedTimeStep]",
            "; did you mean 'untransformed_time_step'?",
        ),
        (
            "ppo_cartpole",
            "data_transformers.names=[observation_normaliser]",
            "; did you mean 'observation_normalizer'?",
        ),
    ],
)
def test_suggestions_match_abbreviations_camel_case_and_british_spelling(name, override, hint):
    assert hint in str(_error(name, [override]))
