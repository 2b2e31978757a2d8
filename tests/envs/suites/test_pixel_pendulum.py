"""cadence/PixelPendulum-v0: Pendulum-v1 drawn as 64x64 RGB frames on a flat background."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import cadence.envs.suites  # noqa: F401 - registers the cadence/ ids
from cadence.envs.make import make_env
from cadence.envs.suites import PIXEL_PENDULUM_ID
from cadence.envs.suites.pixel_pendulum import BACKGROUND, draw_pendulum
from cadence.testing.contract import check_environment


def _rod(frame: np.ndarray) -> np.ndarray:
    """``[H, W]`` True where a ``[3, H, W]`` frame is not the background."""
    return ~(frame == np.array(BACKGROUND)[:, None, None]).all(0)


def test_the_rod_points_along_its_angle():
    up, right = draw_pendulum(0.0, 64), draw_pendulum(np.pi / 2, 64)
    assert up.shape == (64, 64, 3) and up.dtype == np.uint8
    assert (up[5:25, 30:34] != BACKGROUND).any()  # the rod points up
    assert (up[30:34, 40:60] == BACKGROUND).all()
    assert (right[30:34, 40:60] != BACKGROUND).any()  # and now to the right
    assert (right[5:25, 30:34] == BACKGROUND).all()


def test_the_observation_draws_the_pendulums_angle_as_it_moves():
    env = gym.make(PIXEL_PENDULUM_ID)
    frame, _ = env.reset(seed=0)
    assert frame.shape == (3, 64, 64) and frame.dtype == np.uint8
    frames, angles = [frame], [env.unwrapped._pendulum.state[0]]
    for _ in range(15):
        frame, reward, *_ = env.step(np.array([2.0], np.float32))
        frames.append(frame)
        angles.append(env.unwrapped._pendulum.state[0])
        expected = draw_pendulum(float(angles[-1]), 64).transpose(2, 0, 1)
        np.testing.assert_array_equal(frame, expected)
        assert reward <= 0.0  # Pendulum-v1's cost
    assert np.ptp(angles) > 0.1
    assert (_rod(frames[0]) != _rod(frames[-1])).any()  # the rod moved in the picture


def test_it_keeps_the_env_contract_in_a_batch():
    def make(seed: int):
        return make_env(PIXEL_PENDULUM_ID, 2, "serial", seed, max_episode_steps=10)

    assert check_environment(make, num_steps=25).truncations >= 2
