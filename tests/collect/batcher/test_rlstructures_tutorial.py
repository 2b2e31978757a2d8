"""rlstructures' tutorial, step by step, on cadence: an agent with a step counter as its state
and per-slot ``agent_info``, episodic then continuing batchers, what ``Trajectories`` hold,
``env_info`` and a replay."""

from __future__ import annotations

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Agent, Batcher, replay_agent
from cadence.data import DictTensor, masked_dicttensor

pytestmark = pytest.mark.timeout(120)


class MyAgent(Agent):
    """The tutorial's agent: the action ``agent_info["user_action"]``, the timestep as state."""

    def initial_state(self, agent_info, B):
        return DictTensor({"timestep": torch.zeros(B).long()})

    def __call__(self, state, observation, agent_info=None, history=None):
        B = observation.n_elems()
        state = masked_dicttensor(
            state, self.initial_state(agent_info, B), observation["initial_state"]
        )
        new_state = DictTensor({"timestep": state["timestep"] + 1})
        action = agent_info["user_action"]
        return DictTensor({"action": action, "timestep": state["timestep"]}), new_state


def _batcher(mode, n_timesteps):
    return Batcher(
        n_timesteps, 2, 2, helpers.cartpole, MyAgent, env_args={"max_episode_steps": 12},
        seed=42, agent_info=DictTensor({"user_action": torch.zeros(1).long()}),
        env_info=DictTensor({"level": torch.zeros(1)}), mode=mode,
    )  # fmt: skip


def test_the_tutorial_runs_on_cadence():
    user_action = torch.tensor([0, 1, 1, 0])
    with _batcher("episodic", 12) as batcher:  # the tutorial's GymEnv: whole episodes
        batcher.reset(DictTensor({"user_action": user_action}))
        batcher.execute()
        trajectories, n = batcher.get(blocking=True)
        assert n == 0  # every env ends within 12 steps
        info, steps = trajectories.info, trajectories.trajectories
        assert torch.equal(info.truncate_key("agent_info/")["user_action"], user_action)
        assert torch.equal(info.truncate_key("agent_state/")["timestep"], torch.zeros(4).long())
        assert torch.equal(info.truncate_key("env_info/")["level"], torch.zeros(4))
        lengths, B = steps.lengths, steps.n_elems()
        assert torch.equal(steps.mask().sum(1), lengths.float())
        assert steps["observation/initial_state"][:, 0].all()
        assert steps["_observation/done"][torch.arange(B), lengths - 1].all()
        valid = steps.mask().bool()
        assert torch.equal(
            steps["action/action"][valid], user_action[:, None].expand(valid.shape)[valid]
        )
        replayed = replay_agent(MyAgent(), trajectories)
        assert torch.equal(replayed["timestep"][valid], steps["action/timestep"][valid])
    with _batcher("continuing", 4) as batcher:  # GymEnvInf: pieces of endless episodes
        batcher.reset(
            DictTensor({"user_action": user_action}), DictTensor({"level": torch.ones(4)})
        )
        for _ in range(5):
            batcher.execute()
            trajectories, n = batcher.get()
            assert n == 4 and trajectories.trajectories.lengths.tolist() == [4] * 4
        steps = trajectories.trajectories
        # The state a piece starts from is where the last one stopped: 16 steps in, less
        # the episodes that ended since (12 steps at most).
        assert (trajectories.info["agent_state/timestep"] == steps["action/timestep"][:, 0]).all()
        assert (trajectories.info["env_info/level"] == 1).all()
