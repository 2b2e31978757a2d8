"""What rlstructures code relies on from a Batcher: env_info reaching the envs at every
reset, stateless agents in both modes, and a seed of its own for each worker's agent."""

from __future__ import annotations

import warnings

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Batcher
from cadence.data import DictTensor

pytestmark = pytest.mark.timeout(120)

TASKS = DictTensor({"task": torch.tensor([3.0, 5.0])})


def _task_batcher(env_args=None, **kwargs):
    return Batcher(
        8, 2, 1, helpers.task_env, helpers.StatelessAgent, env_args=env_args,
        env_info=DictTensor({"task": torch.zeros(1)}), **kwargs,
    )  # fmt: skip


def _frames_match_tasks(trajectories) -> None:
    frames = trajectories.trajectories["observation/frame"][:, :, 0]
    assert torch.equal(frames, TASKS["task"][:, None].expand_as(frames))
    assert torch.equal(trajectories.info["env_info/task"], TASKS["task"])


def test_each_slot_runs_the_task_its_env_info_names_across_automatic_resets():
    # Episodes last 3 steps: 8 steps hold the first reset and two automatic ones.
    with _task_batcher() as batcher:
        batcher.reset(env_info=TASKS)
        for _ in range(2):
            batcher.execute()
            trajectories, _ = batcher.get()
            assert trajectories.trajectories["observation/initial_state"].sum() == 2 * 3
            _frames_match_tasks(trajectories)
        batcher.reset()  # no env_info: the example's first row, task 0, everywhere
        batcher.execute()
        trajectories, _ = batcher.get()
        assert (trajectories.trajectories["observation/frame"] == 0).all()


def test_a_restarted_worker_gives_its_envs_their_env_info(tmp_path):
    env_args = {"flag_file": str(tmp_path / "fired"), "at_step": 4}
    with _task_batcher(env_args) as batcher:
        batcher.reset(env_info=TASKS)
        batcher.execute()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the restart's warning
            batcher.get()
        assert sum(batcher.restarts) == 1
        batcher.execute()
        trajectories, _ = batcher.get()
        _frames_match_tasks(trajectories)


@pytest.mark.parametrize("mode", ["continuing", "episodic"])
def test_an_agent_with_an_empty_state_acts_in_both_modes(mode):
    # TaskEnv's episodes end at step 3 of 8: episodic slots stop there.
    with _task_batcher(mode=mode) as batcher:
        batcher.reset()
        batcher.execute()
        trajectories, running = batcher.get()
    lengths = trajectories.trajectories.lengths.tolist()
    assert (lengths, running) == (([3, 3], 0) if mode == "episodic" else ([8, 8], 2))
    assert not any(k.startswith("agent_state/") for k in trajectories.info.keys())


def _draws(**kwargs) -> torch.Tensor:
    with Batcher(4, 2, 1, helpers.task_env, helpers.GeneratorAgent, seed=11, **kwargs) as b:
        b.reset()
        b.execute()
        trajectories, _ = b.get()
    return trajectories.trajectories["action/draw"]


def test_each_worker_seeds_its_agent_with_a_seed_of_its_own():
    draws = _draws()
    assert not torch.equal(draws[0], draws[1])  # seeds 11 and 12: other streams
    expected = torch.rand(4, generator=torch.Generator().manual_seed(12))
    assert torch.equal(draws[1], expected)  # seeded before the probe, and again after
    same = _draws(agent_seeds=[5, 5])
    assert torch.equal(same[0], same[1])
    with pytest.raises(ValueError, match="one seed per worker"):
        Batcher(4, 2, 1, helpers.task_env, helpers.GeneratorAgent, agent_seeds=[1])
