"""`ParallelEnvironment`'s asynchronous mode (`cadence.envs.async_batch`): the envs ready
first come back, labelled by env id; seeds, recovery and lockstep at M = N hold."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs import GymEnvFactory, ParallelEnvironment, SerialEnvironment, make_env
from cadence.envs.async_batch import workers_per_batch
from cadence.envs.backend_choice import check_async_batch
from cadence.envs.config import EnvConfig
from cadence.testing.fakes import PacedEnv

SLOW_S = 0.2


def _paced(step_s: list[float], seed: int = 0) -> list[GymEnvFactory]:
    return [
        GymEnvFactory(PacedEnv, i, seed=seed, env_kwargs={"step_s": s, "max_steps": 3})
        for i, s in enumerate(step_s)
    ]


def _action(time_step) -> torch.Tensor:
    """A per-row policy: the same action for an env whatever else is in the batch."""
    return (-0.5 * time_step.observation[:, :1]).clamp(-1, 1)


def test_the_async_batch_must_be_whole_workers_below_the_batch():
    slices = [(0, 2), (2, 4), (4, 6)]
    assert workers_per_batch(None, 6, slices) is None
    assert workers_per_batch(6, 6, slices) is None  # M = N: lockstep
    assert workers_per_batch(4, 6, slices) == 2
    with pytest.raises(ValueError, match=r"multiple of the 2 envs per worker.*one of \[2, 4\]"):
        workers_per_batch(3, 6, slices)
    with pytest.raises(ValueError, match="do not split evenly"):
        workers_per_batch(2, 5, [(0, 3), (3, 5)])
    with pytest.raises(ValueError, match="env.async_batch_size=3"):
        ParallelEnvironment(_paced([0.0] * 4), num_workers=2, async_batch_size=3)


@pytest.mark.timeout(120)
def test_m_equal_to_n_is_lockstep_and_gives_its_numbers():
    with (
        ParallelEnvironment(_paced([0.0] * 4), num_workers=2) as lockstep,
        ParallelEnvironment(_paced([0.0] * 4), num_workers=2, async_batch_size=4) as same,
    ):
        assert same.async_batch_size == 4
        with pytest.raises(ValueError, match="asynchronous mode"):
            same.recv()
        a, b = lockstep.reset(), same.reset()
        for _ in range(5):
            assert torch.equal(a.observation, b.observation)
            assert torch.equal(a.step_type, b.step_type) and torch.equal(a.env_id, b.env_id)
            a, b = lockstep.step(_action(a)), same.step(_action(b))


def _streams(env, steps: int) -> dict[int, list[tuple]]:
    """Every env's own first ``steps`` (step type, observation) under `_action`, by env id."""
    streams: dict[int, list[tuple]] = {i: [] for i in range(env.batch_size)}
    time_step = env.reset()
    while min(len(stream) for stream in streams.values()) < steps:
        for row, env_id in enumerate(time_step.env_id.tolist()):
            streams.setdefault(env_id, []).append(
                (int(time_step.step_type[row]), time_step.observation[row].tolist())
            )
        time_step = env.step(_action(time_step))
    return streams


@pytest.mark.timeout(120)
def test_the_ready_envs_come_first_with_their_ids_and_each_env_keeps_its_seed():
    step_s = [SLOW_S, SLOW_S, 0.0, 0.0]
    with ParallelEnvironment(_paced(step_s, seed=5), num_workers=2, async_batch_size=2) as env:
        streams = _streams(env, 5)
        env.reset()
        first = env.step(torch.zeros(4, 1))
        assert first.env_id.tolist() == [2, 3]  # the fast worker's envs, not the slow ones
    expected = _streams(SerialEnvironment(_paced([0.0] * 4, seed=5)), 5)
    for env_id in range(4):  # 3-step episodes: a reset within, seeded seed + env_id
        assert streams[env_id][:5] == expected[env_id][:5]


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_async_step_is_restarted_and_its_envs_come_back_cut():
    step_s = [SLOW_S * 5, SLOW_S * 5, 0.0, 0.0]
    with ParallelEnvironment(_paced(step_s), num_workers=2, async_batch_size=2) as env:
        env.reset()
        time_step = env.step(torch.zeros(4, 1))  # worker 0's envs still step (1 s)
        victim = env.processes[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        while 0 not in time_step.env_id.tolist():
            time_step = env.step(_action(time_step))
        assert env.restarts == [1, 0]
        assert time_step.env_id.tolist() == [0, 1]
        assert time_step.step_type.tolist() == [StepType.LAST] * 2
        assert time_step.discount.tolist() == [1.0, 1.0]
        assert time_step.reward.tolist() == [0.0, 0.0]
        env.send(_action(time_step), [0, 1])
        again = env.recv()
        while 0 not in again.env_id.tolist():
            again = env.step(_action(again))
        assert again.step_type.tolist() == [StepType.FIRST] * 2


@pytest.mark.timeout(120)
def test_env_state_is_saved_between_unrolls_only():
    with ParallelEnvironment(_paced([0.0] * 4), num_workers=2, async_batch_size=2) as env:
        time_step = env.reset()
        env.send(_action(time_step), [0, 1, 2, 3])
        with pytest.raises(RuntimeError, match="between unrolls"):
            env.get_state()
        env.recv(), env.recv()
        assert len(env.get_state()) == 4
        with pytest.raises(ValueError, match="not whole workers' envs"):
            env.send(torch.zeros(1, 1), [1])


def test_auto_never_picks_async_stepping_for_a_run_that_promises_same_seed_results():
    assert check_async_batch("auto", 8, None, reproducible=True) == "auto"
    assert check_async_batch("auto", 8, 8, reproducible=True) == "auto"  # M = N: lockstep
    assert check_async_batch("auto", 8, 4, reproducible=False) == "parallel"
    assert check_async_batch("parallel", 8, 4, reproducible=True) == "parallel"
    with pytest.raises(ValueError, match="trainer.deterministic=false"):
        check_async_batch("auto", 8, 4, reproducible=True)
    with pytest.raises(ValueError, match="use backend 'parallel'"):
        check_async_batch("serial", 8, 4, reproducible=False)
    with pytest.raises(ValueError, match="trainer.deterministic=false"):
        make_env("CartPole-v1", 4, "auto", async_batch_size=2)
    assert EnvConfig(num_envs=4, async_batch_size=2).async_batch_size == 2
