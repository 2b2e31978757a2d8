"""`ParallelEnvironment`: errors from workers, restarted dead workers, state, rendering, actions."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs import (
    EnvironmentWorkerError,
    GymEnvFactory,
    ParallelEnvironment,
    SerialEnvironment,
    make_env,
)
from cadence.envs.recovery import RestartBudget
from cadence.envs.worker_layout import split_evenly, worker_cores
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
def test_an_env_exception_beyond_the_restarts_is_reraised_with_the_worker_traceback_and_env_id():
    env = ParallelEnvironment(
        _failing_factories(4, failing=2, fail_at_step=3), num_workers=2, max_worker_restarts=0
    )
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


def _kill(env: ParallelEnvironment, worker: int) -> None:
    victim = env.processes[worker]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=10)


def _alternating(t: int, num_envs: int = 4) -> torch.Tensor:
    """Actions that keep CartPole's poles up for a while: no episode ends by itself."""
    return torch.full((num_envs,), t % 2, dtype=torch.int64)


@pytest.mark.timeout(120)
def test_a_killed_worker_is_restarted_and_its_episodes_end_with_last(caplog):
    reference = make_env("CartPole-v1", 4, "serial", seed=0)
    expected = [reference.reset()] + [reference.step(_alternating(t)) for t in range(6)]
    # A restarted worker's envs are seeded seed + env_id + restarts * num_envs.
    reseeded = make_env("CartPole-v1", 4, "serial", seed=0 + 1 * 4).reset()
    with make_env("CartPole-v1", 4, "parallel", seed=0, num_workers=2) as env:
        steps = [env.reset()] + [env.step(_alternating(t)) for t in range(3)]
        old_pid = env.processes[1].pid
        _kill(env, 1)
        with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
            steps += [env.step(_alternating(t)) for t in range(3, 6)]
        assert env.restarts == [0, 1]
        assert env.processes[1].is_alive() and env.processes[1].pid != old_pid
    cut, restarted = steps[4], steps[5]
    # The cut episodes end with LAST, discount 1 (truncated, not terminated), reward 0,
    # the last observation those envs delivered, and the action just passed.
    assert cut.step_type[2:].tolist() == [StepType.LAST] * 2
    assert cut.discount[2:].tolist() == [1.0, 1.0] and cut.reward[2:].tolist() == [0.0, 0.0]
    assert cut.observation[2:].equal(steps[3].observation[2:])
    assert cut.prev_action[2:].tolist() == [1, 1] and cut.env_id.tolist() == [0, 1, 2, 3]
    # Then a FIRST from a reset, reseeded: not a replay of the run's first episodes.
    assert restarted.step_type[2:].tolist() == [StepType.FIRST] * 2
    assert restarted.prev_action[2:].tolist() == [0, 0]
    assert restarted.observation[2:].equal(reseeded.observation[2:])
    assert not restarted.observation[2:].equal(steps[0].observation[2:])
    assert steps[6].step_type[2:].tolist() == [StepType.MID] * 2
    # The other worker's envs step on as if nothing had happened.
    for want, got in zip(expected, steps, strict=True):
        assert got.step_type[:2].equal(want.step_type[:2])
        assert got.observation[:2].equal(want.observation[:2])
    (record,) = [r for r in caplog.records if "died" in r.getMessage()]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "env worker 1" in message and "ids 2..3" in message and "SIGKILL" in message


@pytest.mark.timeout(120)
def test_a_worker_killed_after_its_episodes_ended_resets_them_at_once():
    with make_env("CartPole-v1", 4, "parallel", seed=0, num_workers=2, max_episode_steps=2) as env:
        env.reset()
        env.step(_alternating(0))
        ended = env.step(_alternating(1))
        assert ended.step_type.tolist() == [StepType.LAST] * 4
        _kill(env, 0)
        after = env.step(_alternating(2))
    # Every episode had ended: no second LAST, the dead worker's envs start over at once.
    assert after.step_type.tolist() == [StepType.FIRST] * 4


@pytest.mark.timeout(120)
def test_a_worker_dying_during_get_state_is_restarted_and_cuts_its_episodes_next_step():
    with make_env("CartPole-v1", 4, "parallel", seed=0, num_workers=2) as env:
        last = env.reset()
        _kill(env, 0)
        with pytest.raises(EnvironmentWorkerError, match="call get_state again") as error:
            env.get_state()
        assert error.value.died and error.value.restarted and error.value.env_ids == [0, 1]
        assert len(env.get_state()) == 4  # the replacement answers
        cut = env.step(_alternating(0))
        assert cut.step_type.tolist() == [StepType.LAST] * 2 + [StepType.MID] * 2
        assert cut.observation[:2].equal(last.observation[:2])
        assert env.step(_alternating(1)).step_type[:2].tolist() == [StepType.FIRST] * 2


@pytest.mark.timeout(120)
def test_deaths_beyond_the_restart_budget_raise_a_clear_error_not_a_hang():
    env = ParallelEnvironment(
        [GymEnvFactory("CartPole-v1", i, 0) for i in range(4)],
        num_workers=2,
        max_worker_restarts=2,
    )
    action = torch.zeros(4, dtype=torch.int64)
    try:
        env.reset()
        for _ in range(2):
            _kill(env, 1)
            env.step(action)
        _kill(env, 1)
        with pytest.raises(EnvironmentWorkerError) as error:
            env.step(action)
        assert error.value.died and not error.value.restarted
        assert error.value.env_ids == [2, 3]
        message = str(error.value)
        assert "env worker 1" in message and "ids 2..3" in message and "SIGKILL" in message
        assert (
            "its 2 restarts within 600 s are spent" in message
            and "max_worker_restarts=2" in message
        )
        with pytest.raises(RuntimeError, match="unusable since a worker died"):
            env.step(action)
    finally:
        env.close()  # must not hang either
    assert not any(p.is_alive() for p in env.processes)


class _KillsWhenRebuilt:
    """Builds CartPole env ``env_id``; its reseeded copies (a restarted worker's) kill their process."""

    def __init__(self, env_id: int, rebuilt: bool = False):
        self.env_id = env_id
        self.rebuilt = rebuilt

    def __call__(self):
        if self.rebuilt:
            os.kill(os.getpid(), signal.SIGKILL)
        return GymEnvFactory("CartPole-v1", self.env_id, seed=0)()

    def with_seed_offset(self, offset: int) -> _KillsWhenRebuilt:
        return _KillsWhenRebuilt(self.env_id, rebuilt=True)


@pytest.mark.timeout(120)
def test_replacements_that_die_while_built_use_up_the_budget_then_fail(caplog):
    env = ParallelEnvironment(
        [_KillsWhenRebuilt(i) for i in range(4)], num_workers=2, max_worker_restarts=3
    )
    try:
        env.reset()
        _kill(env, 1)
        with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
            with pytest.raises(
                EnvironmentWorkerError, match="its 3 restarts within 600 s are spent"
            ) as error:
                env.step(torch.zeros(4, dtype=torch.int64))
    finally:
        env.close()
    assert error.value.env_ids == [2, 3]
    assert len([r for r in caplog.records if "restarting it" in r.getMessage()]) == 3


@pytest.mark.timeout(120)
def test_a_worker_that_dies_while_the_environment_is_built_fails_clearly():
    factories = [GymEnvFactory(functools.partial(os._exit, 3), i, seed=0) for i in range(2)]
    with pytest.raises(EnvironmentWorkerError) as error:
        ParallelEnvironment(factories, num_workers=2)
    assert error.value.died and not error.value.restarted
    message = str(error.value)
    assert "exit code 3" in message and "while the environment was being built" in message


def test_restart_budget_counts_restarts_per_worker_within_the_window():
    now = [0.0]
    budget = RestartBudget(max_restarts=2, window_s=10.0, clock=lambda: now[0])
    assert budget.spend(0) and budget.spend(0) and not budget.spend(0)
    assert budget.spend(1)  # each worker has its own
    now[0] = 9.9
    assert not budget.spend(0)
    now[0] = 10.0  # the first two restarts left the window
    assert budget.spend(0) and budget.spend(0) and not budget.spend(0)
    assert not RestartBudget(max_restarts=0, window_s=1.0).spend(0)
    with pytest.raises(ValueError, match="max_restarts >= 0 and window_s > 0"):
        RestartBudget(max_restarts=1, window_s=0.0)


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


def test_make_env_passes_the_restart_budget_to_its_workers():
    env = make_env(
        "CartPole-v1", 4, backend="parallel", seed=0, num_workers=2, max_worker_restarts=0
    )
    action = torch.zeros(4, dtype=torch.int64)
    try:
        env.reset()
        _kill(env, 0)
        with pytest.raises(EnvironmentWorkerError, match=r"max_worker_restarts=0"):
            env.step(action)
    finally:
        env.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("spin_us", [0.0, 200.0])
def test_sleeping_and_spinning_workers_deliver_the_same_stream(spin_us):
    # spin_us only changes how the parent and the workers wait for each other.
    reference = make_env("CartPole-v1", 4, "serial", seed=3)
    expected = [reference.reset()] + [reference.step(_alternating(t)) for t in range(40)]
    with make_env("CartPole-v1", 4, "parallel", seed=3, num_workers=2, spin_us=spin_us) as env:
        assert env.spin_us == spin_us
        steps = [env.reset()] + [env.step(_alternating(t)) for t in range(40)]
    for want, got in zip(expected, steps, strict=True):
        assert got.step_type.equal(want.step_type)
        assert got.observation.equal(want.observation)


_CAN_PIN = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _CAN_PIN, reason="needs two cores and sched_setaffinity")
def test_pinned_workers_run_each_on_a_core_of_its_own_and_step_as_before():
    cores = sorted(os.sched_getaffinity(0))[:2]
    reference = make_env("CartPole-v1", 4, "serial", seed=3)
    expected = [reference.reset()] + [reference.step(_alternating(t)) for t in range(10)]
    with make_env("CartPole-v1", 4, "parallel", seed=3, num_workers=2, pin_workers=True) as env:
        assert [os.sched_getaffinity(p.pid) for p in env.processes] == [{c} for c in cores]
        steps = [env.reset()] + [env.step(_alternating(t)) for t in range(10)]
    for want, got in zip(expected, steps, strict=True):
        assert got.observation.equal(want.observation)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _CAN_PIN, reason="needs two cores and sched_setaffinity")
def test_unpinned_workers_may_run_on_every_core():
    allowed = os.sched_getaffinity(0)
    with make_env("CartPole-v1", 2, "parallel", num_workers=2, pin_workers=False) as env:
        assert all(os.sched_getaffinity(p.pid) == allowed for p in env.processes)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_workers_are_pinned_by_default_only_with_one_worker_per_core(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7})
    assert worker_cores(4, None) == [4, 5, 6, 7]  # symmetric: any co-runner can balance
    assert worker_cores(2, None) is None  # spare cores: the scheduler places them better
    assert worker_cores(2, True) == [4, 5]
    assert worker_cores(6, True) == [4, 5, 6, 7, 4, 5]
    assert worker_cores(4, False) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert worker_cores(1, None) is None  # one core: nothing to spread


_FORKED_WORKER_KILLED = """
import os, signal, torch
from cadence.envs import GymEnvFactory, ParallelEnvironment
factories = [GymEnvFactory("CartPole-v1", i, 0) for i in range(2)]
with ParallelEnvironment(factories, num_workers=2, start_method="fork") as env:
    env.reset()
    victim = env.processes[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    for _ in range(3):
        time_step = env.step(torch.zeros(2, dtype=torch.int64))
    print("restarts", env.restarts, "step types", time_step.step_type.tolist())
"""


@pytest.mark.timeout(60)
def test_a_forked_worker_that_dies_frees_no_shared_memory_of_the_others():
    # A fresh interpreter: pytest's may run a resource tracker already, which hides the
    # fault (forked workers starting trackers of their own that unlink the block).
    result = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKER_KILLED], capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 0, result.stderr
    assert "restarts [1, 0] step types [1, 1]" in result.stdout, result.stderr
    assert "leaked shared_memory" not in result.stderr
    assert "FileNotFoundError" not in result.stderr
