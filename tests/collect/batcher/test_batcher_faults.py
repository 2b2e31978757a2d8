"""Batcher workers that raise, die or hang: the error reaches the caller with what happened,
a dead worker is restarted within its budget (its slots' steps cut), never a hang."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Batcher, BatcherWorkerError
from cadence.data import StepType

pytestmark = pytest.mark.timeout(60)


def test_an_exception_in_a_worker_reaches_the_caller_with_its_traceback():
    with Batcher(
        10, 2, 2, helpers.cartpole, helpers.PolicyAgent, agent_args={"fail_at_step": 4}
    ) as b:
        b.reset()
        b.execute()
        with pytest.raises(BatcherWorkerError) as raised:
            b.get()
        message = str(raised.value)
        assert "ValueError: PolicyAgent was told to fail here" in message
        assert "Worker traceback" in message and "batcher_helpers.py" in message
        assert raised.value.worker == 0 and raised.value.env_ids == [0, 1]
        with pytest.raises(RuntimeError, match="reset"):
            b.execute()
        b.reset()  # every slot starts again, and the batcher goes on
        b.execute()
        trajectories, running = b.get()
    assert trajectories.n_elems() == 4 and running == 4


def test_building_has_its_own_timeout_apart_from_the_acquisitions():
    # A spawned worker imports torch before it answers: seconds, more on a busy machine.
    # A hang timeout sized for acquisitions must not cut that build short.
    with Batcher(
        5, 1, 1, helpers.cartpole, helpers.PolicyAgent, timeout_s=0.5, start_method="spawn"
    ) as b:
        b.reset()
        b.execute()
        trajectories, running = b.get()
    assert trajectories.trajectories.full() and running == 1
    for name in ("timeout_s", "build_timeout_s"):
        with pytest.raises(ValueError, match=f"{name} must be > 0 or None, got 0"):
            Batcher(5, 1, 1, helpers.cartpole, helpers.PolicyAgent, **{name: 0})


def _dying(tmp_path, how="exit", at_step=8, **kwargs):
    env_args = {"flag_file": str(tmp_path / "fired"), "at_step": at_step, "how": how}
    return Batcher(10, 2, 2, helpers.dying_env, helpers.PolicyAgent, env_args=env_args, **kwargs)


@pytest.mark.parametrize("how", ["exit", "hang"])
def test_a_worker_that_dies_or_hangs_is_restarted_and_its_steps_are_cut(tmp_path, caplog, how):
    timeout_s = 2.0 if how == "hang" else 60.0
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with _dying(tmp_path, how, timeout_s=timeout_s) as b:
            b.reset()
            b.execute()  # env steps 1..7 (GymAdapter's probe took step 1): dies in step 7
            trajectories, running = b.get()
            assert sum(b.restarts) == 1 and running == 4
            b.execute()  # the replacement acts: new episodes in its slots
            after, _ = b.get()
    worker = b.restarts.index(1)
    dead, alive = slice(2 * worker, 2 * worker + 2), slice(2 - 2 * worker, 4 - 2 * worker)
    steps = trajectories.trajectories
    assert steps.lengths[alive].tolist() == [10, 10]
    cut_at = steps.lengths[dead] - 1
    assert (cut_at >= 0).all() and (cut_at < 9).all()
    rows = torch.arange(2 * worker, 2 * worker + 2)
    assert steps["_observation/done"][rows, cut_at].all()
    assert (steps["_observation/step_type"][rows, cut_at] == StepType.LAST).all()
    assert (steps["_observation/discount"][rows, cut_at] == 1.0).all()  # cut, not terminated
    assert after.trajectories["observation/initial_state"][dead, 0].all()
    assert after.trajectories.full()
    (record,) = [r for r in caplog.records if "restarting it" in r.getMessage()]
    expected = "died (exit code 3)" if how == "exit" else "hung (no answer within 2 s of execute()"
    assert expected in record.getMessage() and f"worker {worker}" in record.getMessage()


def test_a_worker_killed_between_acquisitions_is_restarted_with_its_slots_empty(caplog):
    with Batcher(5, 2, 2, helpers.cartpole, helpers.PolicyAgent) as b:
        b.reset()
        b.execute()
        b.get()
        victim = b.processes[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5)
        with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
            b.execute()
            trajectories, running = b.get()
        assert b.restarts == [0, 1] and running == 4
        assert trajectories.trajectories.lengths.tolist() == [5, 5, 0, 0]
        assert "killed by signal SIGKILL" in caplog.text
        b.execute()
        after, _ = b.get()
    assert after.trajectories.full()
    assert after.trajectories["observation/initial_state"][2:, 0].all()


def test_past_the_restart_budget_a_dead_worker_is_a_clear_error(tmp_path):
    with _dying(tmp_path, max_worker_restarts=0) as b:
        b.reset()
        b.execute()
        with pytest.raises(BatcherWorkerError, match=r"died \(exit code 3\).*unusable") as raised:
            b.get()
        assert raised.value.died
        # The wording of ParallelEnvironment's, from the one recovery policy.
        assert "and restarts are off (max_worker_restarts=0)" in str(raised.value)
        with pytest.raises(RuntimeError, match="unusable"):
            b.execute()


def test_an_env_that_cannot_be_built_fails_the_constructor_with_its_traceback():
    with pytest.raises(BatcherWorkerError, match="Unknown environment id") as raised:
        Batcher(
            5, 1, 1, helpers.make_gym_env, helpers.PolicyAgent, env_args={"name": "NoSuchEnv-v0"}
        )
    assert "while it was being built" in str(raised.value)


_FORKED_WORKER_KILLED = """
import os, signal
import batcher_helpers as helpers
from cadence.collect import Batcher
with Batcher(5, 2, 1, helpers.cartpole, helpers.PolicyAgent, start_method="fork") as b:
    b.reset(); b.execute(); b.get()
    victim = b.processes[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    b.execute(); b.get()
    b.execute()
    trajectories, running = b.get()
    print("restarts", b.restarts, "lengths", trajectories.trajectories.lengths.tolist())
"""


def test_a_forked_worker_that_dies_frees_no_shared_memory_of_the_others():
    # A fresh interpreter: pytest's may run a resource tracker already, which hides the
    # fault (forked workers starting trackers of their own that unlink the blocks).
    result = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKER_KILLED],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=Path(__file__).parent,
    )
    assert result.returncode == 0, result.stderr
    assert "restarts [1, 0] lengths [5, 5]" in result.stdout, result.stderr
    assert "leaked shared_memory" not in result.stderr
    assert "FileNotFoundError" not in result.stderr
