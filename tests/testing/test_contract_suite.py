"""The contract suite itself: it passes a correct env and names what a broken one breaks."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from cadence.data.nest import Nest
from cadence.data.time_step import StepType, TimeStep
from cadence.envs import Environment, GymEnvFactory, SerialEnvironment, make_env
from cadence.testing import DictObservationEnv, check_environment

Mutation = Callable[[TimeStep, bool], TimeStep]
"""``(time_step, from_reset) -> the time step a broken back end would return``."""


class MutatedEnvironment(Environment):
    """A correct environment whose time steps a `Mutation` breaks."""

    def __init__(self, env: Environment, mutate: Mutation):
        self._env = env
        self._mutate = mutate

    @property
    def batch_size(self) -> int:
        return self._env.batch_size

    @property
    def observation_spec(self):
        return self._env.observation_spec

    @property
    def action_spec(self):
        return self._env.action_spec

    @property
    def env_info_spec(self):
        return self._env.env_info_spec

    def reset(self) -> TimeStep:
        return self._mutate(self._env.reset(), True)

    def step(self, action: Nest) -> TimeStep:
        return self._mutate(self._env.step(action), False)

    def close(self) -> None:
        self._env.close()


def _check(name: Any, mutate: Mutation | None = None, num_steps: int = 60, **kwargs):
    def make(seed: int) -> Environment:
        env = make_env(name, 3, "serial", seed, **kwargs)
        return env if mutate is None else MutatedEnvironment(env, mutate)

    return check_environment(make, seed=1, num_steps=num_steps)


def test_a_correct_env_passes_and_the_report_counts_its_episodes():
    report = _check(DictObservationEnv, num_steps=100)
    assert report.batch_size == 3 and report.num_steps == 100
    assert report.terminations > 0 and report.truncations > 0
    assert report.episodes == report.terminations + report.truncations


def _truncation_with_discount_zero(time_step: TimeStep, from_reset: bool) -> TimeStep:
    truncated = time_step.is_last() & (time_step.env_info["truncated"] == 1)
    return time_step.replace(discount=time_step.discount.masked_fill(truncated, 0.0))


def _no_auto_reset(time_step: TimeStep, from_reset: bool) -> TimeStep:
    if from_reset:
        return time_step
    return time_step.replace(step_type=time_step.step_type.clamp(min=int(StepType.MID)))


def _ones_as_prev_action(time_step: TimeStep, from_reset: bool) -> TimeStep:
    return time_step.replace(prev_action=torch.ones_like(time_step.prev_action))


def _float64_reward(time_step: TimeStep, from_reset: bool) -> TimeStep:
    return time_step.replace(reward=time_step.reward.double())


def _zero_env_ids(time_step: TimeStep, from_reset: bool) -> TimeStep:
    return time_step.replace(env_id=torch.zeros_like(time_step.env_id))


def _flipped_prev_action(time_step: TimeStep, from_reset: bool) -> TimeStep:
    flipped = torch.where(time_step.is_first(), time_step.prev_action, 1 - time_step.prev_action)
    return time_step.replace(prev_action=flipped)


def _observation_out_of_bounds(time_step: TimeStep, from_reset: bool) -> TimeStep:
    return time_step.replace(observation=time_step.observation * 100.0)


def _mid_with_discount_zero(time_step: TimeStep, from_reset: bool) -> TimeStep:
    return time_step.replace(discount=time_step.discount.masked_fill(time_step.is_mid(), 0.0))


@pytest.mark.parametrize(
    ("name", "mutate", "message"),
    [
        (DictObservationEnv, _truncation_with_discount_zero, "truncation alone discount 1"),
        ("CartPole-v1", _no_auto_reset, "FIRST exactly when the previous one was LAST"),
        ("CartPole-v1", _ones_as_prev_action, r"reset\(\): prev_action of FIRST rows is not zero"),
        ("CartPole-v1", _float64_reward, "reward: dtype torch.float64, expected torch.float32"),
        ("CartPole-v1", _zero_env_ids, r"env_id is \[0, 0, 0\], expected \[0, 1, 2\]"),
        ("CartPole-v1", _flipped_prev_action, "prev_action is not the action sent"),
        ("Pendulum-v1", _observation_out_of_bounds, "observation: values .* lie outside"),
        ("Pendulum-v1", _mid_with_discount_zero, "have a discount other than 1"),
    ],
)
def test_a_broken_env_fails_with_a_message_naming_the_clause(name, mutate, message):
    with pytest.raises(AssertionError, match=message):
        _check(name, mutate)


def test_reused_time_step_memory_is_caught():
    kept: dict[str, torch.Tensor] = {}

    def reuse(time_step: TimeStep, from_reset: bool) -> TimeStep:
        buffer = kept.setdefault("observation", torch.empty_like(time_step.observation))
        buffer.copy_(time_step.observation)
        return time_step.replace(observation=buffer)

    with pytest.raises(AssertionError, match="changed afterwards"):
        _check("CartPole-v1", reuse)


def test_envs_seeded_alike_are_caught():
    def make(seed: int) -> Environment:
        # Every env gets env_id 0, hence the same seed.
        return SerialEnvironment([GymEnvFactory("CartPole-v1", 0, seed) for _ in range(3)])

    with pytest.raises(AssertionError, match="env 0 and env 1 of the batch reset to the same"):
        check_environment(make, num_steps=10)


def test_an_env_that_ignores_its_seed_is_caught():
    seeds = itertools.count(100)

    def make(seed: int) -> Environment:
        return make_env("CartPole-v1", 2, "serial", seed=next(seeds))

    with pytest.raises(AssertionError, match="two runs with the same seed differ at step 0"):
        check_environment(make, num_steps=10)
