"""Helpers for transformer tests: hand-made time steps and replay buffers of raw rows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplayBuffer, ReplaySample


def time_step(step_type, reward=None, observation=None, discount=None) -> TimeStep:
    """A ``[B]`` time step; unspecified fields are zeros (discount ones)."""
    step_type = torch.as_tensor(step_type, dtype=torch.int64)
    batch = step_type.shape[0]
    return TimeStep(
        step_type=step_type,
        reward=torch.zeros(batch)
        if reward is None
        else torch.as_tensor(reward, dtype=torch.float32),
        discount=torch.ones(batch)
        if discount is None
        else torch.as_tensor(discount, dtype=torch.float32),
        observation=torch.zeros(batch, 1) if observation is None else observation,
        prev_action=torch.zeros(batch, dtype=torch.int64),
        env_id=torch.arange(batch),
    )


def stacked(step_types, observation=None, reward=None, discount=None) -> TimeStep:
    """``[T, B]`` time steps: ``step_types`` ``[T][B]``, ``observation`` a nest ``[T, B, ...]``."""
    step_types = torch.as_tensor(step_types, dtype=torch.int64)

    def at(value, t):
        if value is None:
            return None
        if isinstance(value, dict):
            return {k: v[t] for k, v in value.items()}
        return torch.as_tensor(value)[t]

    return TimeStep.stack(
        [
            time_step(step_types[t], at(reward, t), at(observation, t), at(discount, t))
            for t in range(step_types.shape[0])
        ]
    )


def buffer_of(steps: TimeStep, capacity: int = 100) -> ReplayBuffer:
    """A buffer holding ``[T, B]`` ``steps`` (one ring per env) with zero actions."""
    buffer = ReplayBuffer(num_envs=int(steps.step_type.shape[1]), capacity=capacity)
    fields = {
        "step_type": steps.step_type,
        "reward": steps.reward,
        "discount": steps.discount,
        "observation": steps.observation,
        "prev_action": steps.prev_action,
        "env_id": steps.env_id,
        "env_info": {},
    }
    buffer.add_sequence({"time_step": fields, "action": torch.zeros_like(steps.prev_action)})
    return buffer


def sample_at(buffer: ReplayBuffer, env_ids, times) -> ReplaySample:
    """The windows of ``env_ids`` ``[N]`` at step times ``[N, L]`` (before any wrap-around)."""
    env_ids = torch.as_tensor(env_ids, dtype=torch.int64)
    positions = torch.as_tensor(times, dtype=torch.int64) % buffer.capacity
    steps = buffer.storage.gather(env_ids, positions)
    indices = env_ids * buffer.capacity + positions[:, 0]
    return ReplaySample(steps, env_ids, positions, indices, torch.ones(len(env_ids)))


@pytest.fixture
def make_time_step() -> Callable[..., TimeStep]:
    return time_step


@pytest.fixture
def make_steps() -> Callable[..., TimeStep]:
    return stacked


@pytest.fixture
def make_buffer() -> Callable[..., ReplayBuffer]:
    return buffer_of


@pytest.fixture
def window() -> Callable[..., ReplaySample]:
    return sample_at
