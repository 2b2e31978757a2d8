"""The Batcher's Ray back end: the local back end's trajectories for the same seeds, weights
through the object store, a non-blocking get, and workers that raise or die."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Batcher, BatcherWorkerError
from cadence.data import DictTensor, StepType

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A small local Ray instance whose workers import cadence and the test helpers."""
    if ray.is_initialized():
        ray.shutdown()
    paths = [str(Path(helpers.__file__).parent), *sys.path]
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}},
    )
    yield
    ray.shutdown()


def _batcher(backend, n_processes=2, n_envs=2, mode="continuing", n_timesteps=25, **kw):
    return Batcher(
        n_timesteps,
        n_processes,
        n_envs,
        helpers.cartpole,
        helpers.PolicyAgent,
        seed=kw.pop("seed", 7),
        agent_info=DictTensor({"epsilon": torch.zeros(1), "stochastic": torch.ones(1, dtype=bool)}),
        mode=mode,
        backend=backend,
        **kw,
    )


def _acquire(backend, mode, n_processes=2, n_envs=2):
    weights = [helpers.biased_model(a).state_dict() for a in (1, 0)]
    with _batcher(backend, n_processes, n_envs, mode, n_timesteps=10) as batcher:
        info = DictTensor(
            {"epsilon": torch.full((4,), 0.3), "stochastic": torch.tensor([1, 1, 0, 1]).bool()}
        )
        batcher.reset(info)
        results = []
        for i in range(3):
            batcher.execute()
            if i < len(weights):
                batcher.update(weights[i])  # while in flight: for the next acquisition
            trajectories, running = batcher.get()
            results.append(trajectories)
            if not running:
                break
    return results


@pytest.mark.parametrize("mode", ["continuing", "episodic"])
def test_ray_gives_the_local_back_ends_trajectories_for_the_same_seeds(mode):
    # 2 local workers of 2 envs against 1 actor of 4: the logits agree within rounding.
    local, on_ray = _acquire("local", mode), _acquire("ray", mode, n_processes=1, n_envs=4)
    assert len(local) >= 2
    helpers.assert_same_acquisitions(on_ray, local)
    # The update made while the first acquisition ran reached the second one only.
    versions = [int(t.info["weights_version"][0]) for t in on_ray]
    assert versions[:2] == [0, 1]
    greedy = on_ray[1].trajectories["action/action"][2]  # slot 2 acts greedily
    assert (greedy[: on_ray[1].trajectories.lengths[2]] == 1).sum() > 0


def test_a_non_blocking_get_on_ray_then_an_actors_exception_with_its_traceback():
    agent_args = {"sleep_s": 0.005, "fail_at_step": 60}  # the second acquisition raises
    with _batcher("ray", n_timesteps=40, agent_args=agent_args) as batcher:
        assert all(actor.pid for actor in batcher.processes)
        batcher.reset()
        batcher.execute()
        assert batcher.get(blocking=False) == (None, None)
        while (result := batcher.get(blocking=False)) == (None, None):
            pass
        trajectories, running = result
        assert running == 4 and trajectories.trajectories.full()

        batcher.execute()
        with pytest.raises(BatcherWorkerError) as raised:
            batcher.get()
        assert "ValueError: PolicyAgent was told to fail here" in str(raised.value)
        assert "batcher_helpers.py" in raised.value.worker_traceback
        batcher.reset()  # every slot starts again, and the batcher goes on
        batcher.execute()
        trajectories, running = batcher.get()
    assert running == 4 and trajectories.trajectories.full()


def test_a_dead_ray_actor_is_restarted_with_a_warning_and_its_slots_cut(tmp_path, caplog):
    env_args = {"flag_file": str(tmp_path / "fired"), "at_step": 8, "how": "exit"}
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with Batcher(
            10, 2, 2, helpers.dying_env, helpers.PolicyAgent, env_args=env_args, backend="ray"
        ) as batcher:
            batcher.reset()
            batcher.execute()
            trajectories, running = batcher.get()
            assert sum(batcher.restarts) == 1 and running == 4
            batcher.execute()
            after, _ = batcher.get()
    worker = batcher.restarts.index(1)
    dead = slice(2 * worker, 2 * worker + 2)
    lengths = trajectories.trajectories.lengths
    # An actor's rows come back with its answer: a dead one's acquisition is lost whole.
    assert lengths[dead].tolist() == [0, 0] and (lengths == 10).sum() == 2
    assert after.trajectories.full()
    assert after.trajectories["observation/initial_state"][dead, 0].all()
    assert (after.trajectories["observation/step_type"][dead, 0] == StepType.FIRST).all()
    (record,) = [r for r in caplog.records if "restarting it" in r.getMessage()]
    assert "its Ray actor is gone" in record.getMessage()


def test_past_the_restart_budget_a_dead_ray_actor_is_a_clear_error(tmp_path):
    env_args = {"flag_file": str(tmp_path / "fired"), "at_step": 8, "how": "exit"}
    with Batcher(
        10,
        1,
        2,
        helpers.dying_env,
        helpers.PolicyAgent,
        env_args=env_args,
        backend="ray",
        max_worker_restarts=0,
    ) as batcher:
        batcher.reset()
        batcher.execute()
        with pytest.raises(BatcherWorkerError, match="Ray actor is gone.*unusable") as raised:
            batcher.get()
    assert raised.value.died


@pytest.mark.slow  # the timeout must outlast an actor's start on a loaded machine
def test_a_hung_ray_actor_is_killed_and_restarted(tmp_path, caplog):
    env_args = {"flag_file": str(tmp_path / "fired"), "at_step": 8, "how": "hang"}
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with Batcher(
            10,
            1,
            2,
            helpers.dying_env,
            helpers.PolicyAgent,
            env_args=env_args,
            backend="ray",
            timeout_s=20.0,
        ) as batcher:
            batcher.reset()
            batcher.execute()
            trajectories, running = batcher.get()
            assert batcher.restarts == [1] and running == 2
            assert trajectories.trajectories.lengths.tolist() == [0, 0]
            batcher.execute()
            after, _ = batcher.get()
    assert after.trajectories.full()
    (record,) = [r for r in caplog.records if "restarting it" in r.getMessage()]
    assert "hung (no answer within 20 s of execute()" in record.getMessage()


def _straggling(backend: str, gate: Path) -> Batcher:
    return Batcher(
        10,
        2,
        2,
        helpers.straggler_env,
        helpers.PolicyAgent,
        env_args={"slow_seeds": (2, 3), "gate_file": str(gate)},  # actor 1 waits at the gate
        agent_info=DictTensor({"epsilon": torch.zeros(1), "stochastic": torch.ones(1, dtype=bool)}),
        backend=backend,
    )


def test_asynchronous_acquisition_on_ray_takes_the_finished_actor_first(tmp_path):
    gate = tmp_path / "gate"
    with _straggling("ray", gate) as batcher:
        batcher.reset()
        batcher.execute()
        fast, _ = batcher.get(min_slots=1)  # blocking: actor 0's slots, actor 1 at the gate
        assert fast.info["env_id"].tolist() == [0, 1]
        batcher.execute()  # actor 0 again, while actor 1 still waits
        again, _ = batcher.get(min_slots=2)
        batcher.execute()  # and a third time
        gate.touch()
        rest, running = batcher.get()
        assert rest.info["env_id"].tolist() == [0, 1, 2, 3] and running == 4
        # rest holds actor 0's third segment and actor 1's first.
    with _straggling("local", tmp_path / "open") as local:
        (tmp_path / "open").touch()
        local.reset()
        lockstep = []
        for _ in range(3):
            local.execute()
            lockstep.append(local.get()[0])
    # Each slot's k-th segment is the one lockstep acquisition gives it.
    expected = [(lockstep[0], 0), (lockstep[0], 1)] + [(lockstep[1], 0), (lockstep[1], 1)]
    expected += [(lockstep[2], 0), (lockstep[2], 1), (lockstep[0], 2), (lockstep[0], 3)]
    got = [(fast, 0), (fast, 1), (again, 0), (again, 1), *((rest, row) for row in range(4))]
    for (have, row), (want, slot) in zip(got, expected, strict=True):
        for key in want.trajectories.keys():
            assert torch.equal(have.trajectories[key][row], want.trajectories[key][slot]), key
