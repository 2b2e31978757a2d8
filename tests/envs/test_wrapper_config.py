"""``env.wrappers``: names resolved and arguments checked when the config is built, and the
training envs of every CPU back end wrapped in order (user wrappers included)."""

from __future__ import annotations

import pickle
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from cadence.config import ConfigError, load_config
from cadence.envs import EnvFrameStack, FrameSkip, ObservationMask
from cadence.envs.config import EnvConfig
from cadence.envs.wrapper_config import gym_wrappers, resolve_wrapper
from cadence.trainer.run import make_training_env

MASK_AND_STACK = "env.wrappers=[{name:ObservationMask,keep:[0,2]},{name:EnvFrameStack,num_stack:3}]"


def _config_error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as error:
        load_config("ppo_cartpole", overrides)
    return str(error.value)


# -- resolving names -----------------------------------------------------------------------


def test_names_resolve_to_cadence_then_gymnasium_then_import_paths():
    assert resolve_wrapper("ObservationMask") is ObservationMask
    assert resolve_wrapper("TimeAwareObservation") is gym.wrappers.TimeAwareObservation
    assert resolve_wrapper("gymnasium.wrappers:ClipReward") is gym.wrappers.ClipReward


def test_recipes_apply_in_order_innermost_first_and_pickle():
    recipes = gym_wrappers(
        [{"name": "ObservationMask", "keep": [0, 2]}, {"name": "EnvFrameStack", "num_stack": 3}]
    )
    env = gym.make("CartPole-v1")
    for recipe in pickle.loads(pickle.dumps(recipes)):
        env = recipe(env)
    assert isinstance(env, EnvFrameStack) and isinstance(env.env, ObservationMask)
    assert env.observation_space.shape == (3, 2)


def test_an_empty_list_imports_nothing(monkeypatch):
    # A module set to None in sys.modules cannot be imported: resolving a name would fail.
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    assert EnvConfig(wrappers=[]).wrappers == []
    assert gym_wrappers([]) == []
    with pytest.raises(ImportError):
        EnvConfig(wrappers=[{"name": "FrameSkip", "skip": 2}])


# -- refused when the config is built ------------------------------------------------------


@pytest.mark.parametrize(
    ("wrappers", "message"),
    [
        (
            "[{name:FrameSkp,skip:4}]",
            "item 0 ({'name': 'FrameSkp', 'skip': 4}): unknown wrapper 'FrameSkp'; did you "
            "mean FrameSkip",
        ),
        (
            "[{name:FrameSkip,skip:2},{name:FrameSkip,skp:4}]",
            "item 1 ({'name': 'FrameSkip', 'skp': 4}): FrameSkip takes no argument 'skp' "
            "(it takes: skip)",
        ),
        ("[{name:ObservationMask}]", "ObservationMask: missing a required argument: 'keep'"),
        ("[{name:TimeAwareObservation,flaten:false}]", "takes no argument 'flaten'"),
        ("[{skip:4}]", "item 0 ({'skip': 4}): expected a mapping {name: WRAPPER, ...}"),
        ("[{name:no_such_module_xyz:Wrapper}]", "cannot import 'no_such_module_xyz:Wrapper'"),
        ("[{name:'collections:OrderedDict'}]", "is not a gymnasium.Wrapper subclass"),
    ],
)
def test_bad_names_and_arguments_are_refused_naming_the_item(wrappers, message):
    text = _config_error([f"env.wrappers={wrappers}"])
    assert "env.wrappers=[" in text and message in text


def test_the_tensor_back_end_refuses_wrappers_when_the_config_is_built():
    text = _config_error(["env.wrappers=[{name:FrameSkip,skip:2}]", "env.backend=tensor"])
    assert "env.backend='tensor'" in text and "cannot apply env.wrappers" in text


# -- the training envs ---------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["serial", "parallel"])
def test_the_training_envs_are_wrapped_in_order(backend):
    config = load_config(
        "ppo_cartpole", [MASK_AND_STACK, f"env.backend={backend}", "env.num_envs=2"]
    )
    with make_training_env(config, config.env.num_envs, config.seed) as env:
        assert tuple(env.observation_spec.shape) == (3, 2)
        time_step = env.reset()
        assert tuple(time_step.observation.shape) == (2, 3, 2)
        time_step = env.step(torch.zeros(2, dtype=torch.int64))
        # The stack holds the masked observations of the reset and of this step.
        assert time_step.observation[:, 0].equal(time_step.observation[:, 1])
        assert not time_step.observation[:, 1].equal(time_step.observation[:, 2])


def test_auto_picks_a_gymnasium_back_end_for_a_tensor_native_env_with_wrappers():
    # 64 CartPoles would be tensor-native under "auto"; the wrappers need Gymnasium envs.
    config = load_config(
        "ppo_cartpole",
        ["env.wrappers=[{name:FrameSkip,skip:2}]", "env.backend=auto", "env.num_envs=64"],
    )
    with make_training_env(config, config.env.num_envs, config.seed, backend="auto") as env:
        assert type(env).__name__ in ("SerialEnvironment", "ParallelEnvironment")


def test_a_users_own_wrapper_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "my_cadence_wrappers.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym

            class Scaled(gym.ObservationWrapper):
                def __init__(self, env, factor):
                    super().__init__(env)
                    self.factor = factor

                def observation(self, observation):
                    return observation * self.factor
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides = ["env.backend=serial", "env.num_envs=1"]
    wrapped = load_config(
        "ppo_cartpole", [*overrides, "env.wrappers=[{name:my_cadence_wrappers:Scaled,factor:3}]"]
    )
    plain = load_config("ppo_cartpole", overrides)
    with make_training_env(wrapped, 1, 0) as env, make_training_env(plain, 1, 0) as reference:
        np.testing.assert_allclose(
            env.reset().observation.numpy(), 3 * reference.reset().observation.numpy()
        )
    text = _config_error(["env.wrappers=[{name:my_cadence_wrappers:Scaled,scale:3}]"])
    assert "Scaled takes no argument 'scale' (it takes: factor)" in text


def test_frame_skip_by_name_repeats_actions():
    config = load_config(
        "ppo_cartpole",
        ["env.wrappers=[{name:FrameSkip,skip:500}]", "env.backend=serial", "env.num_envs=1"],
    )
    assert isinstance(gym_wrappers(config.env.wrappers)[0](gym.make("CartPole-v1")), FrameSkip)
    with make_training_env(config, 1, 0) as env:
        env.reset()
        # A constant action drops the pole within 500 inner steps: one step ends the episode.
        assert bool(env.step(torch.zeros(1, dtype=torch.int64)).is_last()[0])
