"""Pixel distractors: each seeded and reproducible, each changing only what it says it does."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cadence.envs.suites  # noqa: F401 - registers the cadence/ ids
from cadence.envs.distractors import BackgroundDistractor, CameraJitter, shift_frame
from cadence.envs.suites import PIXEL_PENDULUM_ID
from cadence.envs.suites.pixel_pendulum import BACKGROUND
from cadence.envs.wrapper_config import gym_wrappers

ACTIONS = np.random.default_rng(0).uniform(-2, 2, (12, 1)).astype(np.float32)


def _frames(env: gym.Env, seed: int = 0) -> tuple[list[np.ndarray], list[float]]:
    observation, _ = env.reset(seed=seed)
    frames, rewards = [observation], []
    for action in ACTIONS:
        observation, reward, *_ = env.step(action)
        frames.append(observation)
        rewards.append(reward)
    return frames, rewards


def _pendulum() -> gym.Env:
    return gym.make(PIXEL_PENDULUM_ID)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda env, seed: BackgroundDistractor(env, seed=seed, reward_coupling=1.0),
        lambda env, seed: CameraJitter(env, seed=seed),
    ],
    ids=["background", "jitter"],
)
def test_each_distractor_is_reproduced_by_its_seed(wrap):
    first, first_rewards = _frames(wrap(_pendulum(), 3))
    again, again_rewards = _frames(wrap(_pendulum(), 3))
    other, _ = _frames(wrap(_pendulum(), 4))
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert first_rewards == again_rewards
    assert not np.array_equal(np.stack(first), np.stack(other))


def test_the_background_changes_background_pixels_only_and_moves():
    clean, clean_rewards = _frames(_pendulum())
    wrapper = BackgroundDistractor(_pendulum(), seed=1)
    distracted, rewards = _frames(wrapper)
    for plain, noisy in zip(clean, distracted, strict=True):
        foreground = ~(plain == np.array(BACKGROUND)[:, None, None]).all(0)
        np.testing.assert_array_equal(noisy[:, foreground], plain[:, foreground])
        assert (noisy[:, ~foreground] != plain[:, ~foreground]).any()
    assert not np.array_equal(distracted[1], distracted[6])  # the scene moves
    assert rewards == clean_rewards  # no coupling: the task's reward


def test_the_noisy_sensor_adds_the_coupled_left_right_balance_to_the_reward():
    clean, clean_rewards = _frames(_pendulum())
    wrapper = BackgroundDistractor(_pendulum(), seed=1, reward_coupling=2.0)
    wrapper.reset(seed=0)
    added = []
    for action, clean_reward in zip(ACTIONS, clean_rewards, strict=True):
        _, reward, *_ = wrapper.step(action)
        scene = wrapper.scene_frame().astype(np.float64) / 255.0
        balance = scene[:, :, :32].mean() - scene[:, :, 32:].mean()
        assert reward == pytest.approx(clean_reward + 2.0 * balance)
        added.append(reward - clean_reward)
    assert np.std(added) > 0


def test_the_noisy_sensor_has_zero_mean_and_moves_within_an_episode():
    wrapper = BackgroundDistractor(_pendulum(), seed=0)
    first_readings = []
    for episode in range(200):
        wrapper.reset(seed=episode)
        first_readings.append(wrapper.sensor())
    # Deterministic (seeded); the mean intensity minus 0.5 would read ~-0.12 here.
    assert abs(np.mean(first_readings)) < 0.05 and np.std(first_readings) > 0.1
    readings = []
    for action in ACTIONS:
        wrapper.step(action)
        readings.append(wrapper.sensor())
    assert np.ptp(readings) > 0.01


def test_camera_jitter_shifts_the_whole_frame():
    clean, _ = _frames(_pendulum())
    wrapper = CameraJitter(_pendulum(), seed=2, max_shift=4)
    observation, _ = wrapper.reset(seed=0)
    shifts = [wrapper.shift]
    np.testing.assert_array_equal(observation, shift_frame(clean[0], *shifts[0]))
    for action, plain in zip(ACTIONS, clean[1:], strict=True):
        observation, *_ = wrapper.step(action)
        shifts.append(wrapper.shift)
        np.testing.assert_array_equal(observation, shift_frame(plain, *shifts[-1]))
    assert len(set(shifts)) > 1 and max(max(map(abs, s)) for s in shifts) <= 4


def test_shift_frame_moves_content_and_repeats_edges():
    frame = np.arange(2 * 5 * 5, dtype=np.uint8).reshape(2, 5, 5)
    shifted = shift_frame(frame, 1, -2)
    np.testing.assert_array_equal(shifted[:, 1:, :3], frame[:, :4, 2:])
    np.testing.assert_array_equal(shifted[:, 0, :3], frame[:, 0, 2:])  # top edge repeated


def test_a_config_names_the_distractors():
    recipes = gym_wrappers(
        [{"name": "BackgroundDistractor", "seed": 1}, {"name": "CameraJitter", "max_shift": 2}]
    )
    env = _pendulum()
    for recipe in recipes:
        env = recipe(env)
    assert env.reset(seed=0)[0].shape == (3, 64, 64)
