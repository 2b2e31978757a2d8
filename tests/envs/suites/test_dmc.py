"""cadence/DMC-v0: the DeepMind Control Suite from its state or from pixels (the dmc extra)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("dm_control", reason="the dmc extra is not installed")

import cadence.envs.suites  # noqa: E402,F401 - registers the cadence/ ids
from cadence.envs.distractors import BackgroundDistractor  # noqa: E402
from cadence.envs.make import make_env  # noqa: E402
from cadence.envs.mujoco_setup import route_mujoco_warnings  # noqa: E402
from cadence.envs.suites import DMC_ID  # noqa: E402
from cadence.envs.wrapper_config import gym_wrappers  # noqa: E402
from cadence.testing.contract import check_environment  # noqa: E402


def test_state_and_pixel_observations():
    state = gym.make(DMC_ID, domain="cheetah", task="run")
    observation, _ = state.reset(seed=0)
    assert observation.shape == (17,) and observation.dtype == np.float32
    pixels = gym.make(DMC_ID, domain="cheetah", task="run", pixels=True)
    frame, _ = pixels.reset(seed=0)
    assert frame.shape == (3, 64, 64) and frame.dtype == np.uint8
    moved, *_ = pixels.step(np.ones(6, np.float32))
    assert not np.array_equal(frame, moved)
    state.close()
    pixels.close()


# dm_control's own cheetah and walker models use an attribute that MuJoCo 3.17 (the dmc
# extra's alone) deprecates.
pytestmark = pytest.mark.filterwarnings(
    "ignore:compiler attribute 'settotalmass':cadence.envs.mujoco_setup.MujocoWarning"
)


def _state_episode(seed: int) -> np.ndarray:
    env = gym.make(DMC_ID, domain="cheetah", task="run")
    observations = [env.reset(seed=seed)[0]]
    for _ in range(4):
        observations.append(env.step(np.full(6, 0.5, np.float32))[0])
    env.close()
    return np.stack(observations)


def test_an_episode_is_reproduced_by_its_seed():
    first, again, other = _state_episode(1), _state_episode(1), _state_episode(2)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_mujocos_warnings_come_through_cadence_not_dm_controls_log():
    gym.make(DMC_ID, domain="cheetah", task="run").close()
    assert route_mujoco_warnings()  # True: the callback installed is cadence's


def test_the_noisy_pixel_stack_keeps_the_contract_with_action_repeat():
    """The stack of the noisy DMC configs: action repeat 2, background, sensor, jitter."""
    wrappers = gym_wrappers(
        [
            {"name": "FrameSkip", "skip": 2},
            {"name": "BackgroundDistractor", "mask": "segmentation", "reward_coupling": 1.0},
            {"name": "CameraJitter", "max_shift": 4},
        ]
    )

    def make(seed: int):
        return make_env(
            DMC_ID,
            2,
            "serial",
            seed,
            max_episode_steps=5,
            gym_wrappers=wrappers,
            env_kwargs={"domain": "cheetah", "task": "run", "pixels": True},
        )

    assert check_environment(make, num_steps=12).truncations >= 2


def test_the_segmentation_background_replaces_sky_and_floor_only():
    clean = gym.make(DMC_ID, domain="walker", task="walk", pixels=True)
    noisy = BackgroundDistractor(
        gym.make(DMC_ID, domain="walker", task="walk", pixels=True), seed=1, mask="segmentation"
    )
    plain, _ = clean.reset(seed=3)
    distracted, _ = noisy.reset(seed=3)
    for _ in range(3):
        action = np.full(6, 0.3, np.float32)
        plain, clean_reward, *_ = clean.step(action)
        distracted, reward, *_ = noisy.step(action)
    background = noisy.background_mask(distracted)
    assert 0.2 < background.mean() < 0.95
    np.testing.assert_array_equal(distracted[:, ~background], plain[:, ~background])
    assert (distracted[:, background] != plain[:, background]).any()
    assert reward == clean_reward
