"""Tensor-native CartPole-v1 against Gymnasium's, step by step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from cadence.data.specs import DiscreteTensorSpec, spec_from_space
from cadence.envs.make import make_env
from cadence.envs.tensor import make_cartpole

NUM_ENVS = 8


def balancing_actions(state: torch.Tensor) -> torch.Tensor:
    """A linear controller that keeps the pole up for the whole 500 steps."""
    x, x_dot, theta, theta_dot = state.unbind(1)
    return (theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0).to(torch.int64)


def mixed_actions(seed: int):
    """Rows 0-3 act at random (poles fall), rows 4-7 balance (episodes hit the limit)."""
    rng = np.random.default_rng(seed)

    def act(step: int, state: torch.Tensor) -> torch.Tensor:
        action = balancing_actions(state)
        action[: NUM_ENVS // 2] = torch.from_numpy(rng.integers(0, 2, NUM_ENVS // 2))
        return action

    return act


def test_matches_gymnasium_through_falls_and_the_500_step_limit(lockstep):
    env = make_cartpole(NUM_ENVS, seed=3, dtype=torch.float64)
    stats = lockstep(env, "CartPole-v1", mixed_actions(0), num_steps=1010)
    assert stats.terminations >= 50  # random rows: poles fall within a few dozen steps
    assert stats.truncations == 2 * (NUM_ENVS // 2)
    assert max(stats.episode_lengths) == 500
    assert stats.max_state_error < 1e-9


def test_max_episode_steps_override_matches_gymnasium(lockstep):
    env = make_cartpole(NUM_ENVS, seed=4, dtype=torch.float64, max_episode_steps=30)
    stats = lockstep(env, "CartPole-v1", mixed_actions(1), num_steps=200, max_episode_steps=30)
    assert stats.truncations >= 4 * (NUM_ENVS // 2)
    assert max(stats.episode_lengths) == 30


def test_float32_state_tracks_gymnasium_closely():
    env = make_cartpole(1, seed=0)
    env.reset()
    gym_env = gym.make("CartPole-v1").unwrapped
    gym_env.reset(seed=0)
    gym_env.state = env.physical_state[0].double().numpy()
    for t in range(40):  # alternating pushes keep the pole up
        observation = env.step(torch.tensor([t % 2])).observation[0].numpy()
        expected, *_ = gym_env.step(t % 2)
        np.testing.assert_allclose(observation, expected, rtol=1e-5, atol=1e-5)


def test_specs_match_gymnasium():
    env = make_cartpole(NUM_ENVS)
    space = gym.make("CartPole-v1").observation_space
    expected = spec_from_space(space)
    assert env.observation_spec.shape == (4,)
    assert env.observation_spec.dtype == torch.float32
    np.testing.assert_array_equal(env.observation_spec.minimum, expected.minimum)
    np.testing.assert_array_equal(env.observation_spec.maximum, expected.maximum)
    assert env.action_spec == DiscreteTensorSpec((), torch.int64, 2)
    assert env.max_episode_steps == 500


def test_time_step_shapes_and_dtypes():
    env = make_cartpole(NUM_ENVS)
    for time_step in (env.reset(), env.step(env.action_spec.sample((NUM_ENVS,)))):
        assert time_step.step_type.shape == (NUM_ENVS,) and time_step.step_type.dtype == torch.int64
        assert time_step.reward.shape == (NUM_ENVS,) and time_step.reward.dtype == torch.float32
        assert time_step.discount.shape == (NUM_ENVS,) and time_step.discount.dtype == torch.float32
        assert time_step.env_id.tolist() == list(range(NUM_ENVS))
        assert time_step.observation.shape == (NUM_ENVS, 4)
        assert time_step.observation.dtype == torch.float32
        assert time_step.prev_action.shape == (NUM_ENVS,)
        assert time_step.prev_action.dtype == torch.int64
        assert time_step.env_info == {}


def test_reset_distribution_is_gymnasiums():
    env = make_cartpole(20000, seed=0)
    env.reset()  # start states from the per-env seeded streams
    state = env.physical_state.T
    assert state.shape == (4, 20000)
    assert state.min() >= -0.05 and state.max() < 0.05
    # Uniform on [-0.05, 0.05]: mean 0, standard deviation 0.1 / sqrt(12).
    assert torch.allclose(state.mean(1), torch.zeros(4), atol=2e-3)
    assert torch.allclose(state.std(1), torch.full((4,), 0.1 / 12**0.5), rtol=0.03)


def test_sutton_barto_reward():
    env = make_cartpole(1, sutton_barto_reward=True)
    env.reset()
    rewards, step_types = [], []
    for _ in range(60):  # always pushing right tips the pole over within ~10 steps
        time_step = env.step(torch.tensor([1]))
        rewards.append(float(time_step.reward[0]))
        step_types.append(int(time_step.step_type[0]))
    first_last = step_types.index(2)
    assert rewards[first_last] == -1.0
    assert all(r == 0.0 for r in rewards[:first_last])


def test_render_draws_the_pole_where_it_leans():
    env = make_cartpole(2, dtype=torch.float64)
    env.reset()
    env.set_physical_state(torch.tensor([[0.0, 0.0, 0.2, 0.0], [0.0, 0.0, -0.2, 0.0]]))
    right, left = env.render(0), env.render(1)
    assert right.shape == (400, 600, 3) and right.dtype == np.uint8
    pole_right = np.all(right == (202, 152, 101), axis=-1)
    pole_left = np.all(left == (202, 152, 101), axis=-1)
    assert pole_right[:, 300:].sum() > 10 * pole_right[:, :300].sum()
    assert pole_left[:, :300].sum() > 10 * pole_left[:, 300:].sum()
    assert np.all(right[:300, 0] == 255)  # background away from the cart


def test_make_env_builds_it():
    env = make_env("CartPole-v1", 3, backend="tensor", seed=5, max_episode_steps=7)
    assert env.batch_size == 3 and env.max_episode_steps == 7
    env = make_env("CartPole-v1", 3, backend="auto", env_kwargs={"render_mode": "rgb_array"})
    assert env.reset().observation.shape == (3, 4)


def test_rejects_a_window_render_mode():
    with pytest.raises(ValueError, match="rgb_array"):
        make_cartpole(1, render_mode="human")
