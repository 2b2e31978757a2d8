"""`TimeLimit`: episodes cut at ``max_episode_steps`` end LAST with discount 1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from cadence.data.time_step import StepType
from cadence.envs import GymAdapter, TimeLimit

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


class EndsAtEnv(gym.Env):
    """Terminates at step ``end`` of each episode (never, if ``None``); counts resets."""

    def __init__(self, end: int | None = None):
        self.observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._end = end
        self.count = 0
        self.num_resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        self.num_resets += 1
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.count += 1
        terminated = self._end is not None and self.count >= self._end
        return np.array([self.count], np.float32), 1.0, terminated, False, {}


def _limited(max_episode_steps: int, end: int | None = None) -> TimeLimit:
    return TimeLimit(GymAdapter(EndsAtEnv(end), seed=0, env_info_keys=[]), max_episode_steps)


def _run(env: TimeLimit, num_steps: int) -> list[tuple[int, float]]:
    steps = [env.reset()]
    steps += [env.step(np.int64(0)) for _ in range(num_steps)]
    return [(int(s.step_type), s.discount) for s in steps]


def test_cuts_episodes_with_last_and_discount_one():
    assert _run(_limited(3), 8) == [
        (FIRST, 1.0),
        (MID, 1.0),
        (MID, 1.0),
        (LAST, 1.0),
        (FIRST, 1.0),
        (MID, 1.0),
        (MID, 1.0),
        (LAST, 1.0),
        (FIRST, 1.0),
    ]


def test_resets_the_inner_env_after_a_cut():
    inner = EndsAtEnv()
    env = TimeLimit(GymAdapter(inner, seed=0, env_info_keys=[]), max_episode_steps=2)
    _run(env, 3)
    assert inner.num_resets == 2  # the first reset and the one after the cut
    assert inner.count == 0


def test_termination_at_the_limit_keeps_discount_zero():
    assert _run(_limited(3, end=3), 4)[3:] == [(LAST, 0.0), (FIRST, 1.0)]


def test_an_earlier_termination_passes_through_and_restarts_the_count():
    steps = _run(_limited(4, end=2), 8)
    assert steps == [
        (FIRST, 1.0),
        (MID, 1.0),
        (LAST, 0.0),
        (FIRST, 1.0),
        (MID, 1.0),
        (LAST, 0.0),
        (FIRST, 1.0),
        (MID, 1.0),
        (LAST, 0.0),
    ]


def test_state_round_trip_keeps_the_step_count():
    env = GymAdapter(gym.make("CartPole-v1"), seed=0)
    env = TimeLimit(env, max_episode_steps=5)
    env.reset()
    env.step(np.int64(0))
    env.step(np.int64(1))
    state = env.get_state()
    expected = [env.step(np.int64(t % 2)).step_type for t in range(4)]
    env.set_state(state)
    assert [env.step(np.int64(t % 2)).step_type for t in range(4)] == expected
    assert expected[2:] == [LAST, FIRST]  # steps 3, 4 and 5 of the episode; 5 is the limit


def test_refuses_a_limit_below_one():
    with pytest.raises(ValueError, match="max_episode_steps must be >= 1"):
        _limited(0)
