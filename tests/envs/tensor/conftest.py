"""Lockstep comparison of a tensor-native env against Gymnasium's, row by row."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs.gym_adapter import GymAdapter
from cadence.envs.tensor.environment import TensorEnvironment

ActionFn = Callable[[int, torch.Tensor], torch.Tensor]
"""``(step, physical_state [B, state_size]) -> action [B, *action_shape]``."""


@dataclasses.dataclass
class LockstepStats:
    terminations: int = 0
    truncations: int = 0
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    max_state_error: float = 0.0


def run_lockstep(
    env: TensorEnvironment, gym_id: str, action_fn: ActionFn, num_steps: int, **make_kwargs
) -> LockstepStats:
    """Steps ``env`` and one Gymnasium env per row with the same actions, asserting agreement.

    Each Gymnasium env starts every episode from the tensor env's reset state (its
    own reset draws are replaced through ``env.unwrapped.state``); from there on
    both integrate independently, and every step's step type, reward, discount,
    observation and physical state must agree.
    """
    gym_envs = [
        GymAdapter(gym.make(gym_id, **make_kwargs), i, seed=i) for i in range(env.batch_size)
    ]
    env.reset()
    for i, gym_env in enumerate(gym_envs):
        gym_env.reset()
        _copy_state(env, gym_env, i)
    stats, lengths, previous_last = (
        LockstepStats(),
        np.zeros(env.batch_size, int),
        np.zeros(env.batch_size, bool),
    )
    for t in range(num_steps):
        action = action_fn(t, env.physical_state)
        time_step = env.step(action)
        for i, gym_env in enumerate(gym_envs):
            expected = gym_env.step(action[i].numpy())
            step_type = int(time_step.step_type[i])
            assert step_type == expected.step_type, f"step {t}, env {i}"
            assert (step_type == StepType.FIRST) == previous_last[i], (
                f"step {t}, env {i}: FIRST iff after LAST"
            )
            previous_last[i] = step_type == StepType.LAST
            if step_type == StepType.FIRST:
                _check_first(time_step, i)
                _copy_state(env, gym_env, i)
                lengths[i] = 0
                continue
            lengths[i] += 1
            _check_step(env, time_step, gym_env, expected, i, stats, f"step {t}, env {i}")
            if step_type == StepType.LAST:
                stats.episode_lengths.append(int(lengths[i]))
                stats.terminations += expected.discount == 0.0
                stats.truncations += expected.discount == 1.0
    return stats


def _copy_state(env: TensorEnvironment, gym_env: GymAdapter, i: int) -> None:
    gym_env.gym_env.unwrapped.state = env.physical_state[i].to(torch.float64).numpy().copy()


def _check_first(time_step, i: int) -> None:
    assert float(time_step.reward[i]) == 0.0
    assert float(time_step.discount[i]) == 1.0
    assert torch.all(time_step.prev_action[i] == 0)


def _check_step(
    env, time_step, gym_env, expected, i: int, stats: LockstepStats, where: str
) -> None:
    assert float(time_step.discount[i]) == expected.discount, where
    np.testing.assert_allclose(
        float(time_step.reward[i]), expected.reward, rtol=1e-6, atol=1e-6, err_msg=where
    )
    np.testing.assert_allclose(
        time_step.observation[i].numpy(), expected.observation, rtol=1e-6, atol=1e-6, err_msg=where
    )
    state = env.physical_state[i].to(torch.float64).numpy()
    error = float(np.max(np.abs(state - gym_env.gym_env.unwrapped.state)))
    stats.max_state_error = max(stats.max_state_error, error)


@pytest.fixture
def lockstep() -> Callable[..., LockstepStats]:
    return run_lockstep
