"""`make_env`: ids, back ends, seeding and the options that reach every env."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from cadence.data.time_step import StepType
from cadence.envs import (
    EnvFrameStack,
    ImageChannelFirst,
    ParallelEnvironment,
    SerialEnvironment,
    ThreadEnvironment,
    UnknownEnvironmentError,
    make_env,
)
from cadence.envs.tensor import TensorEnvironment
from cadence.testing import ImageEnv


def test_an_unknown_id_is_named_with_close_registered_ids():
    with pytest.raises(UnknownEnvironmentError) as error:
        make_env("CartPol-v1")
    message = str(error.value)
    assert "'CartPol-v1'" in message
    assert "Did you mean" in message and "CartPole-v1" in message


def test_an_unknown_id_with_nothing_close_is_still_named():
    with pytest.raises(UnknownEnvironmentError, match="'Zzzqqq-v9'"):
        make_env("Zzzqqq-v9")


def test_tensor_backend_without_a_tensor_env_says_so():
    with pytest.raises(ValueError) as error:
        make_env("Hopper-v5", backend="tensor")
    message = str(error.value)
    assert "No tensor-native implementation of 'Hopper-v5'" in message
    assert "CartPole-v1" in message and "Pendulum-v1" in message  # what there is
    assert "backend='serial'" in message  # what to do instead


def test_tensor_backend_refuses_gym_wrappers():
    with pytest.raises(ValueError, match="cannot apply Gymnasium wrappers"):
        make_env(
            "CartPole-v1",
            backend="tensor",
            gym_wrappers=[functools.partial(EnvFrameStack, num_stack=2)],
        )


def test_refuses_a_bad_backend_and_batch_size():
    with pytest.raises(ValueError, match="backend must be one of"):
        make_env("CartPole-v1", backend="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        make_env("CartPole-v1", num_envs=0)


@pytest.mark.parametrize("backend", ["serial", "thread", "parallel"])
def test_env_i_is_seeded_seed_plus_i(backend):
    with make_env("CartPole-v1", 3, backend, seed=5) as env:
        observation = env.reset().observation.numpy()
    for i in range(3):
        expected, _ = gym.make("CartPole-v1").reset(seed=5 + i)
        np.testing.assert_array_equal(observation[i], expected)


def test_the_same_seed_gives_the_same_seeds_in_the_same_order():
    def first_observations(seed: int):
        with make_env("Pendulum-v1", 4, "serial", seed=seed) as env:
            return env.reset().observation

    assert first_observations(11).equal(first_observations(11))
    assert not first_observations(12).equal(first_observations(11))


@pytest.mark.parametrize(
    ("backend", "cls"),
    [
        ("serial", SerialEnvironment),
        ("thread", ThreadEnvironment),
        ("parallel", ParallelEnvironment),
        ("tensor", TensorEnvironment),
    ],
)
def test_each_backend_builds_its_class(backend, cls):
    with make_env("CartPole-v1", 2, backend) as env:
        assert isinstance(env, cls)
        assert env.batch_size == 2


def test_auto_prefers_the_tensor_env_for_large_batches_and_falls_back_without_one():
    with make_env("CartPole-v1", 64) as env:
        assert isinstance(env, TensorEnvironment)
    with make_env("CartPole-v1", 2) as env:  # one by one is faster on a CPU
        assert isinstance(env, SerialEnvironment)
    with make_env(
        "Pendulum-v1", 1, gym_wrappers=[functools.partial(EnvFrameStack, num_stack=2)]
    ) as env:
        assert isinstance(
            env, SerialEnvironment
        )  # wrappers need Gymnasium; one env needs no worker
        assert tuple(env.observation_spec.shape) == (2, 3)


def test_a_callable_with_env_kwargs_and_wrappers_in_order():
    wrappers = [ImageChannelFirst, functools.partial(EnvFrameStack, num_stack=3, axis=0)]
    with make_env(ImageEnv, 2, "serial", gym_wrappers=wrappers, env_kwargs={"size": 8}) as env:
        assert tuple(env.observation_spec.shape) == (9, 8, 8)  # channel-first, then stacked
        assert tuple(env.reset().observation.shape) == (2, 9, 8, 8)


def test_max_episode_steps_cuts_episodes_with_discount_one():
    with make_env("CartPole-v1", 2, "serial", max_episode_steps=3) as env:
        env.reset()
        action = env.action_spec.zeros((2,))
        steps = [env.step(action) for _ in range(4)]
    assert [int(s.step_type[0]) for s in steps] == [
        StepType.MID,
        StepType.MID,
        StepType.LAST,
        StepType.FIRST,
    ]
    assert steps[2].discount.tolist() == [1.0, 1.0]
