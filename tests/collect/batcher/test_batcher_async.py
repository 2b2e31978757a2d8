"""Asynchronous acquisition: `get(min_slots=...)` takes the workers that finished, `execute`
restarts them while the others go on; per-slot results equal lockstep ones without updates."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Batcher
from cadence.collect.batcher.weights import WeightsPublisher
from cadence.data import DictTensor, StepType

pytestmark = pytest.mark.timeout(120)


def _batcher(n_timesteps=10, n_processes=2, n_envs=2, env_args=None, agent_args=None, **kw):
    return Batcher(
        n_timesteps,
        n_processes,
        n_envs,
        helpers.straggler_env,
        helpers.PolicyAgent,
        env_args=env_args,
        agent_args=agent_args,
        agent_info=DictTensor({"epsilon": torch.zeros(1), "stochastic": torch.ones(1, dtype=bool)}),
        **kw,
    )


def _segments(trajectories) -> dict[int, dict[str, torch.Tensor]]:
    """Each row of ``trajectories`` by its slot: its valid steps and its info."""
    steps, info = trajectories.trajectories, trajectories.info
    rows = {}
    for row, slot in enumerate(info["env_id"].tolist()):
        length = int(steps.lengths[row])
        rows[slot] = {k: steps[k][row, :length] for k in steps.keys()}
        rows[slot].update({f"info/{k}": info[k][row] for k in info.keys()})
    return rows


def _poll(batcher, **get_args):
    while (result := batcher.get(blocking=False, **get_args)) == (None, None):
        time.sleep(0.01)
    return result


def test_a_partial_get_takes_the_finished_workers_and_a_later_get_the_others(tmp_path: Path):
    gate = tmp_path / "gate"
    env_args = {"slow_seeds": (2, 3), "gate_file": str(gate)}  # worker 1 waits at the gate
    with _batcher(env_args=env_args) as batcher:
        batcher.reset()
        batcher.execute()
        fast, n_running = _poll(batcher, min_slots=1)
        assert fast.info["env_id"].tolist() == [0, 1] and n_running == 4
        assert fast.trajectories.lengths.tolist() == [10, 10]
        assert batcher.get(blocking=False) == (None, None)  # all the rest: not yet
        assert batcher.get(blocking=False, min_slots=1) == (None, None)
        with pytest.raises(RuntimeError, match=r"workers \[1\] are still acquiring"):
            batcher.reset()
        batcher.execute()  # worker 0 again; worker 1 goes on undisturbed
        again, _ = batcher.get(min_slots=2)  # blocking: worker 0's two slots
        assert again.info["env_id"].tolist() == [0, 1]
        with pytest.raises(RuntimeError, match="every worker is in flight"):
            batcher.execute()
            batcher.execute()
        gate.touch()
        rest, n_running = batcher.get()
        assert rest.info["env_id"].tolist() == [0, 1, 2, 3] and n_running == 4
        assert rest.trajectories.lengths.tolist() == [10] * 4
        with pytest.raises(ValueError, match="min_slots must be >= 1"):
            batcher.execute()
            batcher.get(min_slots=0)


def _lockstep(n_gets: int, **kw) -> list[dict[int, dict[str, torch.Tensor]]]:
    with _batcher(**kw) as batcher:
        batcher.reset()
        acquisitions = []
        for _ in range(n_gets):
            batcher.execute()
            acquisitions.append(_segments(batcher.get()[0]))
    return acquisitions


def _asynchronous(n_segments: int, n_slots: int, min_slots: int, **kw):
    """Each slot's segments, taking ``min_slots`` at a time until each has ``n_segments``;
    and the sizes of the gets."""
    per_slot = {slot: [] for slot in range(n_slots)}
    sizes = []
    with _batcher(**kw) as batcher:
        batcher.reset()
        batcher.execute()
        while min(len(s) for s in per_slot.values()) < n_segments:
            trajectories, _ = batcher.get(min_slots=min_slots)
            sizes.append(trajectories.n_elems())
            for slot, segment in _segments(trajectories).items():
                per_slot[slot].append(segment)
            batcher.execute()
        for slot, segment in _segments(batcher.get()[0]).items():
            per_slot[slot].append(segment)
    return per_slot, sizes


@pytest.mark.parametrize("mode", ["continuing", "episodic"])
def test_without_updates_each_slot_acquires_what_it_acquires_in_lockstep(mode):
    # Worker 2 straggles; a slot's envs and random stream are its own, so the k-th
    # segment of a slot is the same whichever workers were taken with it.
    kw = {
        "n_timesteps": 8 if mode == "continuing" else 30,
        "n_processes": 3,
        "env_args": {"slow_seeds": (4, 5), "sleep_s": 0.01},
        "mode": mode,
        "seed": 3,
    }
    n_segments = 3 if mode == "continuing" else 1
    per_slot, sizes = _asynchronous(n_segments, n_slots=6, min_slots=2, **kw)
    assert min(sizes) < 6, "some get took only the workers that had finished"
    n_compared = min(len(s) for s in per_slot.values())  # the fast slots have more
    lockstep = _lockstep(n_compared, **kw)
    for slot, segments in per_slot.items():
        for k, segment in enumerate(segments[:n_compared]):
            want = lockstep[k][slot]
            assert segment.keys() == want.keys()
            for key in want:
                assert torch.equal(segment[key], want[key]), (slot, k, key)


def test_each_segment_carries_the_weights_version_it_ran_on(tmp_path: Path):
    gate = tmp_path / "gate"
    greedy = DictTensor({"epsilon": torch.zeros(4), "stochastic": torch.zeros(4, dtype=bool)})
    env_args = {"slow_seeds": (2, 3), "gate_file": str(gate)}
    agent_args = {"model": helpers.biased_model(0)}
    with _batcher(env_args=env_args, agent_args=agent_args) as batcher:
        batcher.reset(greedy)
        batcher.execute()
        first, _ = batcher.get(min_slots=1)
        assert first.info["env_id"].tolist() == [0, 1]
        assert batcher.update(helpers.biased_model(1).state_dict()) == 1  # mid-flight
        batcher.execute()  # worker 0 on version 1, worker 1 still on version 0
        assert batcher.update(helpers.biased_model(0).state_dict()) == 2
        gate.touch()
        mixed, _ = batcher.get()
    assert mixed.info["env_id"].tolist() == [0, 1, 2, 3]
    assert mixed.info["weights_version"].tolist() == [1, 1, 0, 0]
    actions = mixed.trajectories["action/action"]
    assert (actions[:2] == 1).all() and (actions[2:] == 0).all()


def test_the_weights_copy_a_worker_may_still_load_is_left_alone_until_it_has():
    publisher = WeightsPublisher(ray=False)
    try:
        weights = {"w": torch.zeros(3)}
        assert publisher.publish(weights, set) == 1  # copy 0
        assert publisher.publish(weights, lambda: {1}) == 2  # copy 1
        assert publisher.free_copy({1, 2}) is None
        answers = iter([{1, 2}, {1, 2}, {2}])  # version 1's worker begins on the third look
        assert publisher.publish({"w": torch.ones(3)}, lambda: next(answers)) == 3
        assert publisher.free_copy({2}) == 0 and publisher.free_copy(set()) == 1
    finally:
        publisher.close()


def test_a_worker_that_dies_while_others_are_taken_is_recovered_and_its_segment_cut(
    tmp_path: Path, caplog
):
    env_args = {
        "slow_seeds": (2, 3),
        "sleep_s": 0.03,
        "flag_file": str(tmp_path / "died"),
        "at_step": 6,  # within worker 1's first acquisition
    }
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with _batcher(n_timesteps=10, env_args=env_args) as batcher:
            batcher.reset()
            batcher.execute()
            fast, _ = batcher.get(min_slots=2)
            assert fast.info["env_id"].tolist() == [0, 1]
            batcher.execute()
            both, n_running = batcher.get()
            assert batcher.restarts == [0, 1] and n_running == 4
            batcher.execute()  # the replacement (fast) runs with the others
            after, _ = batcher.get(min_slots=4)
    assert "worker 1" in caplog.text and "died (exit code 3)" in caplog.text
    steps = both.trajectories
    assert both.info["env_id"].tolist() == [0, 1, 2, 3]
    assert steps.lengths[:2].tolist() == [10, 10]
    cut_at = steps.lengths[2:] - 1
    assert (cut_at >= 0).all() and (cut_at < 9).all()
    rows = torch.tensor([2, 3])
    assert steps["_observation/done"][rows, cut_at].all()
    assert (steps["_observation/step_type"][rows, cut_at] == int(StepType.LAST)).all()
    assert (steps["_observation/discount"][rows, cut_at] == 1.0).all()
    assert after.trajectories.lengths.tolist() == [10] * 4
    assert after.trajectories["observation/initial_state"][2:, 0].all()


def test_deadlines_are_each_workers_own(tmp_path: Path, caplog):
    # Worker 1 hangs at its gate; worker 0 is taken and restarted meanwhile, each time
    # with a timeout of its own, so worker 1's deadline never kills it.
    env_args = {"slow_seeds": (2, 3), "gate_file": str(tmp_path / "never")}
    n_fast = 0
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        with _batcher(n_timesteps=5, env_args=env_args, timeout_s=3.0) as batcher:
            batcher.reset()
            batcher.execute()
            while True:
                trajectories, _ = batcher.get(min_slots=1)
                if 2 in trajectories.info["env_id"].tolist():
                    break
                assert trajectories.info["env_id"].tolist() == [0, 1]
                n_fast += 1
                time.sleep(0.05)
                batcher.execute()
            assert batcher.restarts == [0, 1]
    assert n_fast > 10
    assert "worker 1" in caplog.text and "hung (no answer within 3 s of execute()" in caplog.text
    assert trajectories.trajectories.lengths[-2:].tolist() == [0, 0]
