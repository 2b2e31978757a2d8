"""Env worker faults (`FaultyEnv`): deaths and hangs are recovered, builds are bounded, and a
`cadence train` run on the parallel back end finishes through each of them."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs import EnvironmentWorkerError, GymEnvFactory, ParallelEnvironment, make_env
from cadence.envs.env_state import UnsavableEnvStateError
from cadence.envs.worker_pool import WorkerPool
from cadence.testing.fakes import FAULTY_ENV_ID, FaultyEnv

FAULTY = f"cadence.testing.fakes:{FAULTY_ENV_ID}"
HOW = {
    "exit": "died (exit code 3)",
    "segfault": "died (killed by signal SIGSEGV)",
    "hang": "hung (no answer within 1 s; killed with SIGKILL)",
    "raise": "raised RuntimeError: FaultyEnv raised at step",
}


def _faulty(tmp_path, fault: str, num_envs: int = 4, **kwargs):
    env_kwargs = {"fault": fault, "once_file": str(tmp_path / "fired"), **kwargs}
    return make_env(
        FAULTY,
        num_envs,
        "parallel",
        seed=0,
        num_workers=2,
        env_kwargs=env_kwargs,
        step_timeout_s=1.0,
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["exit", "segfault", "hang", "raise"])
def test_a_worker_that_dies_hangs_or_raises_mid_step_is_restarted_and_its_episodes_end_last(
    tmp_path, caplog, fault
):
    action = torch.zeros(4, dtype=torch.int64)
    # Step 1 is the adapter's probe when it builds the env: step 4 is the third of the run.
    with _faulty(tmp_path, fault, at_step=4) as env:
        with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
            steps = [env.reset()] + [env.step(action) for _ in range(5)]
        restarts = env.restarts
    assert (tmp_path / "fired").exists() and sorted(restarts) == [0, 1]
    worker = restarts.index(1)
    ids = slice(2 * worker, 2 * worker + 2)
    cut, first = steps[3], steps[4]  # the fault came in the third step
    assert cut.step_type[ids].tolist() == [StepType.LAST] * 2
    assert cut.discount[ids].tolist() == [1.0, 1.0]
    assert first.step_type[ids].tolist() == [StepType.FIRST] * 2
    others = slice(2 - 2 * worker, 4 - 2 * worker)
    assert all(s.step_type[others].tolist() == [StepType.MID] * 2 for s in steps[1:])
    (record,) = [r for r in caplog.records if "restarting it" in r.getMessage()]
    message = record.getMessage()
    assert f"env worker {worker}" in message and f"ids {ids.start}..{ids.stop - 1}" in message
    assert HOW[fault] in message


@pytest.mark.timeout(60)
def test_a_reset_that_hangs_is_killed_and_the_replacement_resets(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with _faulty(tmp_path, "hang", at_step=None, at_reset=2) as env:
            start = time.monotonic()
            first = env.reset()
            waited = time.monotonic() - start
            assert sum(env.restarts) == 1
    assert first.step_type.tolist() == [StepType.FIRST] * 4
    assert 1.0 <= waited < 10.0
    assert any(HOW["hang"] in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(60)
def test_an_env_that_keeps_raising_exhausts_the_restart_budget_and_names_what_it_raised(
    tmp_path, caplog
):
    action = torch.zeros(4, dtype=torch.int64)
    env = make_env(
        FAULTY,
        4,
        "parallel",
        seed=0,
        num_workers=2,
        env_kwargs={"fault": "raise", "at_step": 3},  # no once_file: every env, every time
        max_worker_restarts=1,
    )
    with env, caplog.at_level(logging.WARNING, logger="cadence.envs"):
        env.reset()
        with pytest.raises(EnvironmentWorkerError) as error:
            for _ in range(10):
                env.step(action)
    assert "raised RuntimeError: FaultyEnv raised at step 3 as asked" in str(error.value)
    assert "(not restarted: its 1 restarts within 600 s are spent" in str(error.value)
    assert "fakes.py" in error.value.worker_traceback and not error.value.died
    warnings = [r.getMessage() for r in caplog.records]
    assert any("Worker traceback" in m and "fakes.py" in m for m in warnings), "the traceback"
    assert any("restarting it" in m for m in warnings)


@pytest.mark.timeout(60)
def test_a_build_that_hangs_fails_within_the_build_bound_naming_the_env(tmp_path):
    factories = [
        GymEnvFactory(FaultyEnv, i, seed=0, env_kwargs={"fault": "hang", "on_build": i == 1})
        for i in range(2)
    ]
    start = time.monotonic()
    with pytest.raises(EnvironmentWorkerError) as error:
        ParallelEnvironment(factories, num_workers=2, build_timeout_s=1.5)
    assert time.monotonic() - start < 15.0
    assert error.value.died and error.value.hung and error.value.env_ids == [1]
    message = str(error.value)
    assert "env worker 1" in message and "hosting environment id 1" in message
    assert "being built: building it timed out (build_timeout_s" in message


@pytest.mark.timeout(60)
def test_a_hang_beyond_the_restart_budget_is_an_error(tmp_path):
    env = make_env(
        FAULTY,
        2,
        "parallel",
        num_workers=2,
        env_kwargs={"fault": "hang", "at_step": 2},  # no once-file: every replacement hangs too
        step_timeout_s=0.5,
        max_worker_restarts=0,
    )
    try:
        env.reset()
        with pytest.raises(EnvironmentWorkerError, match="restarts are off") as error:
            env.step(torch.zeros(2, dtype=torch.int64))
    finally:
        env.close()
    assert error.value.hung and "hung (no answer within 0.5 s" in str(error.value)


def _silent_worker(conn) -> None:
    time.sleep(60)


@pytest.mark.timeout(60)
def test_the_worker_pool_kills_a_worker_silent_past_its_deadline():
    """Any user of the pool (not only ParallelEnvironment) gets the deadline."""
    pool = WorkerPool(mp.get_context("forkserver"), 1, timeout_s=0.5)
    pool.spawn(0, _silent_worker, ())
    try:
        start = time.monotonic()
        replies, dead = pool.request({0: ("anything", None)})
        assert 0.5 <= time.monotonic() - start < 5.0
        assert not replies and dead == {0} and pool.hung_for(0) == 0.5
        assert pool.reap(0) == "hung (no answer within 0.5 s; killed with SIGKILL)"
        assert pool.processes[0].exitcode == -signal.SIGKILL
    finally:
        pool.stop()


class LockedEnv(FaultyEnv):
    """Holds a lock, so its state does not pickle."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class ConstructorPickledEnv(FaultyEnv, gym.utils.EzPickle):
    """Pickles as its constructor's arguments, as Box2D's envs do."""

    def __init__(self) -> None:
        FaultyEnv.__init__(self)
        gym.utils.EzPickle.__init__(self)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env_class", [LockedEnv, ConstructorPickledEnv])
def test_an_env_whose_state_cannot_be_saved_says_so_in_one_line(env_class):
    factories = [GymEnvFactory(env_class, i, seed=0) for i in range(2)]
    with ParallelEnvironment(factories, num_workers=2) as env:
        env.reset()
        with pytest.raises(UnsavableEnvStateError) as error:
            env.get_state()
        env.step(torch.zeros(2, dtype=torch.int64))  # still usable
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"environment id 0 ({env_class.__name__}) cannot save its state")
    assert "resumed" in message


# -- through `cadence train` --------------------------------------------------------------


def _train(tmp_path, fault: str, at_step: int = 20) -> subprocess.CompletedProcess:
    kwargs = f"{{fault: {fault}, at_step: {at_step}, once_file: '{tmp_path / 'fired'}'}}"
    command = [
        sys.executable,
        "-m",
        "cadence",
        "train",
        "ppo_cartpole",
        f"root_dir={tmp_path / 'run'}",
        f"env.name={FAULTY}",
        "env.backend=parallel",
        "env.num_envs=4",
        "env.num_workers=2",
        "env.step_timeout_s=1",
        f"++env.env_kwargs={kwargs}",
        "trainer.unroll_length=16",
        "trainer.num_env_steps=256",
        "trainer.checkpoint_interval=1",
        "trainer.eval_interval=1000",
        "trainer.progress_bar=off",
        "trainer.num_threads=1",
    ]
    env = {**os.environ, "PYTHONFAULTHANDLER": ""}
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env
    )


# Each run takes ~13 s (two processes import torch): the hang, which also checks that
# env.step_timeout_s reaches the workers, runs by default, the others with -m slow.
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "fault",
    [
        pytest.param("exit", marks=pytest.mark.slow),
        pytest.param("segfault", marks=pytest.mark.slow),
        pytest.param("raise", marks=pytest.mark.slow),
        "hang",
    ],
)
def test_cadence_train_recovers_from_a_worker_that_dies_hangs_or_raises(tmp_path, fault):
    done = _train(tmp_path, fault)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fired").exists() and (tmp_path / "run" / "COMPLETE").exists()
    assert "env worker" in done.stderr and HOW[fault] in done.stderr
    assert "restarting it" in done.stderr
    # Only an env's own exception comes with a traceback: the worker's, in the warning.
    assert ("Traceback" in done.stderr) == (fault == "raise")


@pytest.mark.timeout(120)
def test_cadence_train_stopped_by_an_env_past_its_restarts_says_what_the_run_kept(tmp_path, capsys):
    """The env's error and its worker's traceback, why it was not restarted, and how to go
    on, in one message: not cadence's own traceback (exit 1)."""
    from cadence.cli import main

    run = tmp_path / "run"
    common = [
        f"env.name={FAULTY}",
        "env.backend=parallel",
        "env.num_envs=2",
        "env.num_workers=2",
        "trainer.unroll_length=8",
        "trainer.num_env_steps=4000",
        "trainer.checkpoint_interval=1",
        "trainer.eval_interval=1000",
        "trainer.progress_bar=off",
        "--root-dir",
        str(run),
    ]
    # Every env raises at its 40th step, and again after each restart.
    raising = ["++env.env_kwargs={fault: raise, at_step: 40}"]
    assert main(["train", "ppo_cartpole", *common, *raising]) == 1
    err = capsys.readouterr().err
    assert "cadence train: environment id" in err and "FaultyEnv raised at step 40" in err
    assert "not restarted: its 3 restarts within 600 s are spent" in err
    assert "fakes.py" in err and "cadence/cli/" not in err
    # Each env fails at its 40th step (iteration 5 of 8 steps), then 3 times more.
    assert f"resumes {run} from its latest checkpoint (iteration 19)" in err
