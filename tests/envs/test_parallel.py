"""`ParallelEnvironment`: errors from workers, dead workers, state, rendering, actions."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from cadence.envs import (
    EnvironmentWorkerError,
    GymEnvFactory,
    ParallelEnvironment,
    SerialEnvironment,
    make_env,
)
from cadence.envs.parallel import split_evenly
from cadence.testing import FailingEnv, ImageEnv


def _failing_factories(num_envs: int, failing: int, **failure) -> list[GymEnvFactory]:
    return [
        GymEnvFactory(
            FailingEnv,
            i,
            seed=0,
            env_kwargs=failure if i == failing else {"fail_at_step": None},
        )
        for i in range(num_envs)
    ]


@pytest.mark.timeout(120)
def test_an_env_exception_is_reraised_with_the_worker_traceback_and_env_id():
    env = ParallelEnvironment(_failing_factories(4, failing=2, fail_at_step=3), num_workers=2)
    try:
        env.reset()
        action = torch.zeros(4, dtype=torch.int64)
        env.step(action)
        env.step(action)
        with pytest.raises(EnvironmentWorkerError) as error:
            env.step(action)
    finally:
        env.close()
    assert error.value.env_ids == [2]
    assert error.value.worker == 1
    assert not error.value.died
    message = str(error.value)
    assert (
        "environment id 2 in worker 1 raised RuntimeError: FailingEnv failed at step 3" in message
    )
    assert "Worker traceback" in message
    assert "fakes.py" in error.value.worker_traceback
    assert "FailingEnv failed at step 3" in error.value.worker_traceback


@pytest.mark.timeout(120)
def test_a_failing_constructor_names_the_env_and_leaves_no_worker():
    with pytest.raises(EnvironmentWorkerError) as error:
        ParallelEnvironment(_failing_factories(4, failing=1, fail_on_init=True), num_workers=2)
    assert error.value.env_ids == [1]
    assert "fail on construction" in str(error.value)
    assert "Worker traceback" in str(error.value)


@pytest.mark.timeout(60)
def test_a_killed_worker_gives_a_clear_error_not_a_hang():
    env = make_env("CartPole-v1", 4, "parallel", num_workers=2)
    try:
        env.reset()
        victim = env.processes[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        action = torch.zeros(4, dtype=torch.int64)
        with pytest.raises(EnvironmentWorkerError) as error:
            env.step(action)
        assert error.value.died
        assert error.value.env_ids == [2, 3]
        message = str(error.value)
        assert "env worker 1" in message and "ids 2..3" in message
        assert "SIGKILL" in message
        with pytest.raises(RuntimeError, match="unusable since a worker died"):
            env.step(action)
    finally:
        env.close()  # must not hang either
    assert not any(p.is_alive() for p in env.processes)


@pytest.mark.timeout(120)
def test_state_round_trip_continues_the_same_episodes():
    generator = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 2, (3,), generator=generator) for _ in range(60)]
    with make_env("CartPole-v1", 3, "parallel", seed=2, max_episode_steps=15) as env:
        env.reset()
        for action in actions[:10]:
            env.step(action)
        state = env.get_state()
        expected = [env.step(a) for a in actions[10:]]
        env.set_state(state)
        replayed = [env.step(a) for a in actions[10:]]
    assert any(bool(t.is_last().any()) for t in expected)  # episodes ended within the replay
    for want, got in zip(expected, replayed, strict=True):
        assert got.observation.equal(want.observation)
        assert got.step_type.equal(want.step_type)
        assert got.discount.equal(want.discount)
    # The state has the serial back end's format: it continues there too.
    serial = make_env("CartPole-v1", 3, "serial", seed=2, max_episode_steps=15)
    assert isinstance(serial, SerialEnvironment)
    serial.set_state(state)
    for action, want in zip(actions[10:], expected, strict=True):
        assert serial.step(action).observation.equal(want.observation)
    serial.close()


@pytest.mark.timeout(120)
def test_render_reaches_the_right_env_of_the_right_worker():
    kwargs = {"size": 8, "render_mode": "rgb_array"}
    with make_env(ImageEnv, 3, "parallel", seed=0, env_kwargs=kwargs, num_workers=2) as env:
        observation = env.reset().observation
        for i in range(3):
            frame = env.render(i)
            np.testing.assert_array_equal(frame, observation[i].numpy())
        with pytest.raises(IndexError, match="env_index 3 is out of range"):
            env.render(3)


@pytest.mark.timeout(120)
def test_an_action_of_the_wrong_shape_is_refused():
    with make_env("Pendulum-v1", 2, "parallel") as env:
        env.reset()
        with pytest.raises(ValueError, match=r"action has shape \(3, 1\), expected \(2, 1\)"):
            env.step(torch.zeros(3, 1))


def test_split_evenly():
    assert split_evenly(5, 2) == [(0, 3), (3, 5)]
    assert split_evenly(2, 4) == [(0, 1), (1, 2)]
    assert split_evenly(6, 3) == [(0, 2), (2, 4), (4, 6)]
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        split_evenly(3, 0)
