"""Tensor-native Pendulum-v1 against Gymnasium's, step by step."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from cadence.data.specs import BoundedTensorSpec, spec_from_space
from cadence.envs.make import make_env
from cadence.envs.tensor import make_pendulum
from cadence.envs.tensor.pendulum import angle_normalize

NUM_ENVS = 6


def random_torques(seed: int, scale: float = 3.0):
    """Uniform torques in ``[-scale, scale]``: beyond 2 they exercise the clipping."""
    rng = np.random.default_rng(seed)

    def act(step: int, state: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(rng.uniform(-scale, scale, (NUM_ENVS, 1)).astype(np.float32))

    return act


def test_matches_gymnasium_through_the_200_step_limit(lockstep):
    env = make_pendulum(NUM_ENVS, seed=3, dtype=torch.float64)
    stats = lockstep(env, "Pendulum-v1", random_torques(0), num_steps=450)
    assert stats.terminations == 0
    assert stats.truncations == 2 * NUM_ENVS
    assert stats.episode_lengths == [200] * (2 * NUM_ENVS)
    assert stats.max_state_error < 1e-9


def test_max_episode_steps_and_gravity_options_match_gymnasium(lockstep):
    env = make_pendulum(NUM_ENVS, seed=4, dtype=torch.float64, max_episode_steps=25, g=9.81)
    stats = lockstep(
        env, "Pendulum-v1", random_torques(1), num_steps=80, max_episode_steps=25, g=9.81
    )
    assert stats.episode_lengths == [25] * (3 * NUM_ENVS)


def test_float32_state_tracks_gymnasium_closely():
    env = make_pendulum(1, seed=0)
    env.reset()
    gym_env = gym.make("Pendulum-v1").unwrapped
    gym_env.reset(seed=0)
    gym_env.state = env.physical_state[0].double().numpy()
    for t in range(30):
        torque = np.array([math.sin(t)], dtype=np.float32)
        time_step = env.step(torch.from_numpy(torque)[None])
        expected, reward, *_ = gym_env.step(torque)
        np.testing.assert_allclose(time_step.observation[0].numpy(), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(time_step.reward[0]), reward, rtol=1e-5, atol=1e-5)


def test_torque_is_clipped_but_prev_action_is_what_was_passed():
    env = make_pendulum(2, dtype=torch.float64)
    env.reset()
    start = torch.tensor([[0.5, 0.0], [0.5, 0.0]])
    env.set_physical_state(start)
    time_step = env.step(torch.tensor([[2.0], [50.0]]))
    assert torch.equal(env.physical_state[0], env.physical_state[1])
    assert time_step.reward[0] == time_step.reward[1]
    assert time_step.prev_action[:, 0].tolist() == [2.0, 50.0]


def test_specs_match_gymnasium():
    env = make_pendulum(NUM_ENVS)
    expected = spec_from_space(gym.make("Pendulum-v1").observation_space)
    np.testing.assert_array_equal(env.observation_spec.minimum, expected.minimum)
    np.testing.assert_array_equal(env.observation_spec.maximum, expected.maximum)
    assert env.observation_spec.shape == (3,) and env.observation_spec.dtype == torch.float32
    assert env.action_spec == BoundedTensorSpec((1,), torch.float32, -2.0, 2.0)
    assert env.max_episode_steps == 200


def test_time_step_shapes_and_dtypes():
    env = make_pendulum(NUM_ENVS)
    for time_step in (env.reset(), env.step(env.action_spec.sample((NUM_ENVS,)))):
        assert time_step.step_type.shape == (NUM_ENVS,) and time_step.step_type.dtype == torch.int64
        assert time_step.reward.dtype == torch.float32 and time_step.reward.shape == (NUM_ENVS,)
        assert time_step.discount.dtype == torch.float32 and time_step.discount.shape == (NUM_ENVS,)
        assert time_step.observation.shape == (NUM_ENVS, 3)
        assert time_step.prev_action.shape == (NUM_ENVS, 1)
        assert time_step.prev_action.dtype == torch.float32
        assert time_step.env_id.tolist() == list(range(NUM_ENVS))


def test_reset_distribution_is_gymnasiums():
    env = make_pendulum(20000, seed=0)
    env.reset()  # start states from the per-env seeded streams
    state = env.physical_state.T
    theta, theta_dot = state
    assert theta.min() >= -math.pi and theta.max() < math.pi
    assert theta_dot.min() >= -1.0 and theta_dot.max() < 1.0
    assert abs(float(theta.std()) - 2 * math.pi / 12**0.5) < 0.05
    assert abs(float(theta_dot.std()) - 2 / 12**0.5) < 0.02


def test_angle_normalize_matches_gymnasium():
    from gymnasium.envs.classic_control.pendulum import angle_normalize as gym_normalize

    angles = np.linspace(-20.0, 20.0, 1001)
    np.testing.assert_allclose(
        angle_normalize(torch.from_numpy(angles)).numpy(), gym_normalize(angles), atol=1e-12
    )


def test_render_draws_the_rod_upright_at_theta_zero():
    env = make_pendulum(1, dtype=torch.float64)
    env.reset()
    env.set_physical_state(torch.tensor([[0.0, 0.0]]))
    frame = env.render(0)
    assert frame.shape == (500, 500, 3) and frame.dtype == np.uint8
    rod = np.all(frame == (204, 77, 77), axis=-1)
    assert rod[:250].sum() > 10 * rod[260:].sum() > 0


def test_make_env_builds_it():
    env = make_env("Pendulum-v1", 2, backend="tensor", seed=1, env_kwargs={"g": 9.81})
    assert env.dynamics.g == 9.81
    assert env.step(torch.zeros(2, 1)).step_type.tolist() == [0, 0]
