"""cadence/NoisyPendulum-v0: Pendulum-v1 plus oscillators the action cannot move."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cadence.envs.suites  # noqa: F401 - registers the cadence/ ids
from cadence.envs.make import make_env
from cadence.envs.suites import NOISY_PENDULUM_ID, NoisyPendulumEnv
from cadence.testing.contract import check_environment

SLICES = NoisyPendulumEnv.signal_slices(2, 4)


def _episode(seed: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    env = gym.make(NOISY_PENDULUM_ID)
    observation, _ = env.reset(seed=seed)
    observations, rewards, pendulum_rewards = [observation], [], []
    for action in actions:
        observation, reward, _, _, info = env.step(action)
        observations.append(observation)
        rewards.append(reward)
        pendulum_rewards.append(info["pendulum_reward"])
    return np.array(observations), np.array(rewards), np.array(pendulum_rewards)


def test_an_episode_is_reproduced_by_its_seed_and_differs_across_seeds():
    actions = np.random.default_rng(0).uniform(-2, 2, (50, 1)).astype(np.float32)
    first, second, other = _episode(3, actions), _episode(3, actions), _episode(4, actions)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert not np.allclose(first[0][:, 3:], other[0][:, 3:])


def test_the_action_moves_the_pendulum_and_no_distractor():
    rng = np.random.default_rng(1)
    pushed = _episode(5, np.full((60, 1), 2.0, dtype=np.float32))
    other = _episode(5, rng.uniform(-2, 2, (60, 1)).astype(np.float32))
    assert not np.allclose(pushed[0][:, SLICES["pendulum"]], other[0][:, SLICES["pendulum"]])
    for key in ("reward_distractors", "noise_distractors"):
        np.testing.assert_array_equal(pushed[0][:, SLICES[key]], other[0][:, SLICES[key]])


def test_the_reward_is_the_pendulums_plus_the_y_distractors_cosines():
    observations, rewards, pendulum_rewards = _episode(7, np.zeros((40, 1), dtype=np.float32))
    y_cosines = observations[1:, SLICES["reward_distractors"]][:, 0::2]
    np.testing.assert_allclose(
        rewards, pendulum_rewards + 3.0 * y_cosines.sum(1), rtol=1e-5, atol=1e-5
    )
    # The z-type distractors (and the y sines) are not in it: the reward is explained.


def test_the_distractors_are_as_strong_as_the_pendulum():
    rng = np.random.default_rng(2)
    observations, rewards, pendulum_rewards = _episode(
        8, rng.uniform(-2, 2, (200, 1)).astype(np.float32)
    )
    assert np.std(rewards - pendulum_rewards) > 0.5 * np.std(pendulum_rewards)
    assert observations[:, 3:].std(0).min() > 0.3


def test_it_keeps_the_env_contract_in_a_batch():
    def make(seed: int):
        return make_env(NOISY_PENDULUM_ID, 2, "serial", seed, max_episode_steps=30)

    report = check_environment(make, num_steps=70)
    assert report.truncations >= 2


@pytest.mark.parametrize("counts", [(0, 0), (1, 3)])
def test_the_layout_follows_the_counts(counts):
    env = NoisyPendulumEnv(*counts)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (3 + 2 * sum(counts),)
    slices = NoisyPendulumEnv.signal_slices(*counts)
    assert slices["noise_distractors"].stop == observation.shape[0]
