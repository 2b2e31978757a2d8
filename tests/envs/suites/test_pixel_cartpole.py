"""PixelCartPoleEnv: CartPole-v1's dynamics exactly, stacked anti-aliased frames that
show position, angle and (across frames) motion, pickling, and the environment contract."""

import pickle

import gymnasium as gym
import numpy as np
import pytest

from cadence.envs.make import make_env
from cadence.envs.suites import PIXEL_CARTPOLE_ID, PixelCartPoleEnv, draw_cartpole
from cadence.testing.contract import check_environment


def test_dynamics_rewards_and_terminations_are_cartpole_v1s():
    pixels, states = gym.make(PIXEL_CARTPOLE_ID, size=16), gym.make("CartPole-v1")
    pixels.reset(seed=4)
    states.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(300):
        action = int(rng.integers(2))
        _, reward, terminated, truncated, _ = pixels.step(action)
        state, expected_reward, expected_terminated, expected_truncated, _ = states.step(action)
        assert (reward, terminated, truncated) == (
            expected_reward,
            expected_terminated,
            expected_truncated,
        )
        np.testing.assert_array_equal(pixels.unwrapped._cartpole.state.astype(np.float32), state)
        if terminated or truncated:
            pixels.reset()
            states.reset()
    assert pixels.spec.max_episode_steps == 500


def test_observation_stacks_the_latest_frames_channel_first():
    env = PixelCartPoleEnv(size=24, num_frames=3)
    first, _ = env.reset(seed=0)
    assert first.shape == (3, 24, 24) and first.dtype == np.uint8
    assert env.observation_space.contains(first)
    assert (first == first[0]).all(), "before any step every slot holds the first frame"
    second, *_ = env.step(1)
    third, *_ = env.step(1)
    np.testing.assert_array_equal(third[:2], second[1:])  # older frames shift towards slot 0
    expected = np.rint(draw_cartpole(env._cartpole.state, 24) * 255).astype(np.uint8)
    np.testing.assert_array_equal(third[-1], expected)
    assert not np.array_equal(third[-1], third[-2]), "consecutive frames show motion"


def _frame(x=0.0, theta=0.0, size=32):
    return draw_cartpole((x, 0.0, theta, 0.0), size)


def _centroid_x(frame):
    columns = np.arange(frame.shape[1])
    return float((frame.sum(axis=0) * columns).sum() / frame.sum())


def test_frames_show_the_carts_position_and_the_poles_angle():
    upright = _frame()
    assert upright.min() == 0.0 and upright.max() > 0.5  # the pole, partly covering pixels
    assert _centroid_x(_frame(x=1.0)) > _centroid_x(upright) + 3  # pixels
    leaning_right, leaning_left = _frame(theta=0.2), _frame(theta=-0.2)
    assert _centroid_x(leaning_right) > _centroid_x(upright) > _centroid_x(leaning_left)
    # The cart stays in view up to the termination threshold.
    assert _frame(x=2.4).sum() == pytest.approx(upright.sum(), rel=0.05)


def test_anti_aliasing_shows_sub_pixel_motion():
    # At 32 pixels one world unit is ~5.7 pixels: a shift of 0.02 is a tenth of a pixel.
    still, moved = _frame(x=0.0), _frame(x=0.02)
    assert not np.array_equal(np.rint(still * 255), np.rint(moved * 255))
    assert _centroid_x(moved) > _centroid_x(still)


def test_pickled_env_continues_identically():
    env = PixelCartPoleEnv(size=16)
    env.reset(seed=2)
    for _ in range(5):
        env.step(0)
    copy = pickle.loads(pickle.dumps(env))
    for action in (1, 1, 0, 1):
        a, b = env.step(action), copy.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4]


def test_render_draws_rgb_frames_for_videos():
    env = PixelCartPoleEnv(size=16, render_mode="rgb_array", render_size=64)
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.max() == 255
    assert PixelCartPoleEnv(size=16).render() is None


@pytest.mark.parametrize(
    "kwargs", [{"size": 4}, {"num_frames": 0}, {"supersample": 0}, {"render_mode": "human"}]
)
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        PixelCartPoleEnv(**kwargs)


@pytest.mark.parametrize("backend", ["serial", "parallel"])
def test_contract_through_make_env(backend):
    # Workers start with Gymnasium's registry only: the cadence/ id must reach them too.
    report = check_environment(
        lambda seed: make_env(
            PIXEL_CARTPOLE_ID, 3, backend, seed, env_kwargs={"size": 16}, num_workers=2
        ),
        num_steps=60,
    )
    assert report.terminations > 0
