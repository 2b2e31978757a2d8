"""Unrolling in an asynchronously stepped env (`cadence.collect.async_unroll`): each env's
column holds its own steps in order, as lockstep's does; recurrent state is per env id;
replay rings and windows stay per env and contiguous."""

from __future__ import annotations

import pytest
import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep
from cadence.algorithms.returns import generalized_advantage_estimation
from cadence.collect.unroll import Collector
from cadence.data.time_step import StepType
from cadence.envs import GymEnvFactory, ParallelEnvironment
from cadence.replay.buffer import ReplayBuffer
from cadence.testing.fakes import PacedEnv

STEP_S = [0.03, 0.03, 0.0, 0.0]  # worker 0's envs are slow: worker 1's come back first


class RowwiseRecurrent(Algorithm):
    """Acts on each row alone (no randomness shared across rows), with a recurrent state
    ``h`` that sums the positions its env has shown since the episode began."""

    def optimizers(self):
        return {}

    def initial_state(self, batch_size):
        return {"h": torch.zeros(batch_size)}

    def rollout_step(self, time_step, state, agent_info=()):
        position = time_step.observation[:, 0]
        h = state["h"] + position
        action = (-0.5 * position + 0.1 * torch.tanh(h)).clamp(-1, 1).unsqueeze(1)
        return AlgStep(output=action, state={"h": h}, info={"value": 2.0 * position})

    predict_step = rollout_step

    def preprocess_experience(self, experience):
        return {}

    def update(self, batch):
        raise AssertionError("not trained here")


def _env(async_batch_size=None) -> ParallelEnvironment:
    factories = [
        GymEnvFactory(PacedEnv, i, seed=3, env_kwargs={"step_s": s, "max_steps": 3})
        for i, s in enumerate(STEP_S)
    ]
    return ParallelEnvironment(factories, num_workers=2, async_batch_size=async_batch_size)


def _unrolls(async_batch_size, num_unrolls=2, unroll_length=4):
    """The unrolls of `RowwiseRecurrent`, and the env ids of every batch received."""
    with _env(async_batch_size) as env:
        arrivals = []
        recv = env.recv

        def logged_recv():
            time_step = recv()
            arrivals.append(time_step.env_id.tolist())
            return time_step

        env.recv = logged_recv
        collector = Collector(env, RowwiseRecurrent(), unroll_length)
        return [collector.unroll()[0] for _ in range(num_unrolls)], arrivals


@pytest.fixture(scope="module")
def lockstep_and_async():
    return _unrolls(None)[0], _unrolls(2)


def test_each_env_column_holds_the_steps_lockstep_gives_it(lockstep_and_async):
    lockstep, (asynchronous, arrivals) = lockstep_and_async
    assert [2, 3] in arrivals and [0, 1] in arrivals  # the envs did come back apart
    for a, b in zip(lockstep, asynchronous, strict=True):
        assert b.time_step.step_type.shape == (5, 4)
        assert torch.equal(b.time_step.env_id, torch.arange(4).expand(5, 4))
        for name in ("step_type", "reward", "discount", "observation", "prev_action"):
            assert torch.equal(getattr(a.time_step, name), getattr(b.time_step, name)), name
        assert torch.equal(a.action, b.action)
        assert torch.equal(a.info["value"], b.info["value"])


def test_advantages_run_along_each_envs_own_time_axis(lockstep_and_async):
    lockstep, (asynchronous, _) = lockstep_and_async

    def advantages(experience):
        time_step = experience.time_step
        value = torch.cat([experience.info["value"], 2.0 * time_step.observation[-1:, :, 0]])
        return generalized_advantage_estimation(
            time_step.reward, time_step.discount, time_step.step_type, value, 0.9, 0.8
        )

    for a, b in zip(lockstep, asynchronous, strict=True):
        assert torch.equal(advantages(a), advantages(b))
        assert advantages(b).abs().sum() > 0


def test_recurrent_state_is_kept_per_env_id(lockstep_and_async):
    lockstep, (asynchronous, _) = lockstep_and_async
    for a, b in zip(lockstep, asynchronous, strict=True):
        assert torch.equal(a.state["h"], b.state["h"])
    # And it is each env's own: h at a step sums that env's positions since its FIRST.
    experience = asynchronous[0]
    first = experience.time_step.step_type[:-1] == StepType.FIRST
    position = experience.time_step.observation[:-1, :, 0]
    h = experience.state["h"]
    for t in range(1, h.shape[0]):
        expected = torch.where(first[t], 0.0, h[t - 1] + position[t - 1])
        assert torch.allclose(h[t], expected)


def test_replay_rings_and_windows_stay_per_env_and_contiguous(lockstep_and_async):
    lockstep, (asynchronous, _) = lockstep_and_async
    buffers = []
    for unrolls in (lockstep, asynchronous):
        buffer = ReplayBuffer(4, 16)
        for experience in unrolls:
            buffer.add_experience(experience)
        buffers.append(buffer)
    for name, field in buffers[0].storage.fields.items():
        assert torch.equal(field, buffers[1].storage.fields[name]), name
    sample = buffers[1].sample(32, 3, generator=torch.Generator().manual_seed(0))
    time_step = sample.time_step
    assert torch.equal(time_step.env_id, sample.env_ids.unsqueeze(1).expand(-1, 3))
    count = time_step.observation[..., 1]  # steps since the episode's FIRST
    first = time_step.step_type[:, 1:] == StepType.FIRST
    assert torch.equal(torch.where(first, 0.0, count[:, :-1] + 1), count[:, 1:])


@pytest.mark.timeout(120)
def test_a_batch_of_envs_of_which_some_are_done_acts_on_the_others_alone():
    # Three workers, batches of two: a batch often holds a worker whose envs have made
    # their steps and one whose envs have not (then the policy acts on the latter alone).
    def unrolls(async_batch_size):
        factories = [
            GymEnvFactory(PacedEnv, i, seed=5, env_kwargs={"step_s": s, "max_steps": 3})
            for i, s in enumerate([0.0, 0.004, 0.009])
        ]
        with ParallelEnvironment(
            factories, num_workers=3, async_batch_size=async_batch_size
        ) as env:
            collector = Collector(env, RowwiseRecurrent(), 5)
            return [collector.unroll()[0] for _ in range(3)]

    for a, b in zip(unrolls(None), unrolls(2), strict=True):
        for name in ("step_type", "reward", "discount", "observation", "prev_action"):
            assert torch.equal(getattr(a.time_step, name), getattr(b.time_step, name)), name
        assert torch.equal(a.action, b.action) and torch.equal(a.state["h"], b.state["h"])
