"""`replay_agent`: a stateless agent in one batched call, an agent with state step by step,
and rlstructures' per-step protocol (``replay_method_name``); all give the same outputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.collect import Agent, replay_agent, reset_where
from cadence.data import DictTensor, TemporalDictTensor, Trajectories

B, T = 3, 5


class Mlp(Agent):
    """Stateless: logits of the frame, scaled by the row's ``agent_info["scale"]``."""

    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.calls = 0

    def __call__(self, state, observation, agent_info, history=None):
        self.calls += 1
        logits = self.model(observation["frame"]) * agent_info["scale"][:, None]
        return DictTensor({"action": logits.argmax(-1), "logits": logits}), state


class Recurrent(Mlp):
    """A running sum of the frames as its state, reset where an episode starts."""

    def initial_state(self, agent_info, n_elems):
        return DictTensor({"sum": torch.zeros(n_elems, 4)})

    def __call__(self, state, observation, agent_info, history=None):
        self.calls += 1
        initial = self.initial_state(agent_info, observation.n_elems())
        state = reset_where(state, initial, observation["initial_state"])
        total = state["sum"] + observation["frame"]
        logits = self.model(total) * agent_info["scale"][:, None]
        return DictTensor({"action": logits.argmax(-1), "logits": logits}), (
            DictTensor({"sum": total})
        )


def trajectories(agent: Agent) -> Trajectories:
    generator = torch.Generator().manual_seed(0)
    initial_state = torch.zeros(B, T, dtype=torch.bool)
    initial_state[:, 0] = initial_state[1, 3] = True  # a new episode within row 1
    steps = {
        "observation/frame": torch.randn(B, T, 4, generator=generator),
        "observation/initial_state": initial_state,
    }
    agent_info = DictTensor({"scale": torch.tensor([1.0, -1.0, 2.0])})
    state = agent.initial_state(agent_info, B).prepend_key("agent_state/")
    info = state + agent_info.prepend_key("agent_info/")
    return Trajectories(info, TemporalDictTensor(steps, torch.tensor([5, 4, 2])))


@pytest.mark.parametrize("agent_class, calls", [(Mlp, 1), (Recurrent, T)])
def test_replay_equals_rlstructures_step_by_step_replay(agent_class, calls):
    agent = agent_class()
    batch = trajectories(agent)
    replayed = replay_agent(agent, batch)
    assert agent.calls == calls  # stateless: one call over all B x T steps
    agent.calls = 0
    by_step = replay_agent(agent, batch, replay_method_name="call_replay")
    assert agent.calls == int(batch.trajectories.lengths.max())
    valid = batch.trajectories.mask().bool()
    assert torch.equal(replayed.lengths, batch.trajectories.lengths)
    for key in ("logits", "action"):
        torch.testing.assert_close(replayed[key][valid], by_step[key][valid])
    replayed["logits"].sum().backward()  # gradients flow to the weights
    assert agent.model[0].weight.grad is not None


def test_the_recurrent_replay_threads_and_resets_its_state():
    agent = Recurrent()
    batch = trajectories(agent)
    frames = batch.trajectories["observation/frame"]
    replayed = replay_agent(agent, batch)
    # Row 1 starts again at step 3: its sum there is that step's frame alone.
    expected = agent.model(frames[1, 3]) * -1.0
    torch.testing.assert_close(replayed["logits"][1, 3], expected)
    expected = agent.model(frames[0, :3].sum(0))
    torch.testing.assert_close(replayed["logits"][0, 2], expected)
