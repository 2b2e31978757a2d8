"""The fake envs: valid Gymnasium envs, deterministic per seed, ending both ways."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from cadence.testing import DictObservationEnv, FailingEnv, ImageEnv

FAKES = {
    "dict": DictObservationEnv,
    "image": ImageEnv,
    "image_channel_first": lambda: ImageEnv(channel_first=True),
}


def _episode_ends(env: gym.Env, seed: int, num_steps: int) -> tuple[list, int, int]:
    """The observations of ``num_steps`` random steps, and the terminations and truncations."""
    observation, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations, terminations, truncations = [observation], 0, 0
    for _ in range(num_steps):
        observation, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(observation)
        assert (info["terminated"], info["truncated"]) == (terminated, truncated)
        observations.append(observation)
        terminations += terminated
        truncations += truncated
        if terminated or truncated:
            observations.append(env.reset()[0])
    return observations, terminations, truncations


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


@pytest.mark.parametrize("make", FAKES.values(), ids=FAKES.keys())
def test_fakes_pass_gymnasiums_env_checker(make):
    check_env(make(), skip_render_check=True)


@pytest.mark.parametrize("make", FAKES.values(), ids=FAKES.keys())
def test_fakes_are_deterministic_per_seed_and_end_both_ways(make):
    first, terminations, truncations = _episode_ends(make(), seed=3, num_steps=200)
    again, _, _ = _episode_ends(make(), seed=3, num_steps=200)
    other, _, _ = _episode_ends(make(), seed=4, num_steps=200)
    assert all(_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not _equal(first[0], other[0])
    assert terminations > 0 and truncations > 0


def test_image_env_frames_and_render():
    env = ImageEnv(size=8, render_mode="rgb_array")
    frame, _ = env.reset(seed=0)
    assert frame.shape == (8, 8, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(env.render(), frame)
    channel_first, _ = ImageEnv(size=8, channel_first=True).reset(seed=0)
    np.testing.assert_array_equal(channel_first, frame.transpose(2, 0, 1))
    with pytest.raises(ValueError, match="multiple of 4"):
        ImageEnv(size=10)


def test_failing_env_fails_where_asked():
    env = FailingEnv(fail_at_step=2)
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(RuntimeError, match="failed at step 2"):
        env.step(0)
    with pytest.raises(RuntimeError, match="fail on construction"):
        FailingEnv(fail_on_init=True)
