"""BitFlipEnv: goal Dict observations, sparse reward, ending on success or after n steps,
and the environment contract through make_env."""

import numpy as np
import pytest
import torch

from cadence.envs.make import make_env
from cadence.envs.suites import BIT_FLIP_ID, BitFlipEnv
from cadence.testing.contract import check_environment


def test_flipping_the_differing_bits_reaches_the_goal_with_reward_zero():
    env = BitFlipEnv(n_bits=6)
    observation, _ = env.reset(seed=3)
    differing = np.flatnonzero(observation["achieved_goal"] != observation["desired_goal"])
    assert len(differing) > 0, "a goal equal to the start state is never drawn"
    for step, bit in enumerate(differing):
        observation, reward, terminated, truncated, info = env.step(int(bit))
        last = step == len(differing) - 1
        assert reward == (0.0 if last else -1.0)
        assert terminated == last and not truncated
        assert info["is_success"] == float(last)
    np.testing.assert_array_equal(observation["achieved_goal"], observation["desired_goal"])
    np.testing.assert_array_equal(observation["observation"], observation["achieved_goal"])


def test_an_episode_is_cut_after_n_bits_steps_without_success():
    env = BitFlipEnv(n_bits=4)
    observation, _ = env.reset(seed=0)
    same = np.flatnonzero(observation["achieved_goal"] == observation["desired_goal"])
    bit = int(same[0]) if len(same) else 0  # flipping it back and forth never succeeds
    outcomes = [env.step(bit)[1:4] for _ in range(4)]
    rewards, terminated, truncated = zip(*outcomes, strict=True)
    assert rewards == (-1.0,) * 4
    assert not any(terminated)
    assert truncated == (False, False, False, True)


def test_compute_reward_is_batched_and_matches_step_rewards():
    env = BitFlipEnv(n_bits=3)
    achieved = np.array([[1, 0, 1], [1, 1, 1]], np.float32)
    desired = np.array([[1, 0, 1], [0, 1, 1]], np.float32)
    np.testing.assert_array_equal(env.compute_reward(achieved, desired, {}), [0.0, -1.0])


def test_invalid_arguments_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="n_bits must be >= 1"):
        BitFlipEnv(n_bits=0)
    with pytest.raises(ValueError, match="action must be an int in"):
        env = BitFlipEnv(n_bits=3)
        env.reset(seed=0)
        env.step(5)


def test_registered_id_takes_n_bits_and_reports_is_success_as_env_info():
    env = make_env(BIT_FLIP_ID, num_envs=2, backend="serial", seed=0, env_kwargs={"n_bits": 5})
    try:
        assert env.action_spec.num_values == 5
        assert env.observation_spec["desired_goal"].shape == (5,)
        time_step = env.reset()
        assert set(time_step.env_info) == {"is_success"}
        assert time_step.observation["desired_goal"].dtype == torch.float32
    finally:
        env.close()


def test_bit_flip_passes_the_environment_contract():
    def make(seed):
        return make_env(
            BIT_FLIP_ID, num_envs=3, backend="serial", seed=seed, env_kwargs={"n_bits": 3}
        )

    report = check_environment(make, num_steps=120)
    assert report.terminations > 0, "random flips of 3 bits should sometimes succeed"
    assert report.truncations > 0
