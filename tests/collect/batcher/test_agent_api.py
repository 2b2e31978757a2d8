"""The Agent API: resetting state rows, per-slot random streams, and replaying an agent over
what a Batcher acquired."""

from __future__ import annotations

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Agent, Batcher, SlotRandom, replay_agent, reset_where
from cadence.data import DictTensor, TemporalDictTensor, Trajectories


def test_reset_where_replaces_the_rows_that_start_again():
    state = DictTensor({"h": torch.ones(3, 2), "c": torch.full((3,), 5)})
    initial = DictTensor({"h": torch.zeros(3, 2), "c": torch.zeros(3, dtype=torch.int64)})
    out = reset_where(state, initial, torch.tensor([True, False, True]))
    assert out["h"].tolist() == [[0, 0], [1, 1], [0, 0]]
    assert out["c"].tolist() == [0, 5, 0]
    with pytest.raises(ValueError, match="keys of initial_state"):
        reset_where(state, DictTensor({"h": torch.zeros(3, 2)}), torch.ones(3, dtype=bool))


@pytest.mark.parametrize(
    ("initial", "mask", "error"),
    [
        ({"h": torch.zeros(3, 2)}, torch.tensor([True]), "mask has 1 rows but the state 3"),
        ({"h": torch.zeros(3, 2)}, torch.tensor([0, 1, 0]), r"\[B\] bool tensor.*int64\[3\]"),
        ({"h": torch.zeros(3, 2)}, torch.ones(3, 1, dtype=bool), r"\[B\] bool tensor"),
        ({"h": torch.zeros(1, 2)}, torch.tensor([False, True, False]), r"float32\[1, 2\]"),
        ({"h": torch.zeros(3, 1)}, torch.tensor([False, True, False]), r"float32\[3, 1\]"),
        ({"h": torch.zeros(3, 2, dtype=torch.int64)}, torch.ones(3, dtype=bool), "int64"),
        (
            {"n": {"h": torch.zeros(3, 4)}},
            torch.ones(3, dtype=bool),
            r"'n/h' is torch.float32\[3, 4\]",
        ),
    ],
)
def test_reset_where_broadcasts_nothing(initial, mask, error):
    state = DictTensor(
        {"h": torch.ones(3, 2)} if "h" in initial else {"n": {"h": torch.ones(3, 2)}}
    )
    with pytest.raises(ValueError, match=error):
        reset_where(state, DictTensor(initial), mask)


def test_slot_streams_do_not_depend_on_the_batch_they_are_drawn_in():
    together = SlotRandom(3)
    alone = [SlotRandom(3) for _ in range(4)]
    for _ in range(3):
        batch = together.uniform(torch.arange(4), (2,))
        for i in range(4):
            assert torch.equal(batch[i], alone[i].uniform(torch.tensor([i]), (2,))[0])
    assert not torch.equal(
        SlotRandom(4).uniform(torch.arange(4)), SlotRandom(3).uniform(torch.arange(4))
    )


def test_slot_random_draws_have_the_right_distributions():
    rng = SlotRandom(0)
    ids = torch.arange(2000)
    u = rng.uniform(ids)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0 and abs(float(u.mean()) - 0.5) < 0.03
    z = rng.normal(ids, (3,))
    assert z.shape == (2000, 3) and abs(float(z.mean())) < 0.1 and abs(float(z.std()) - 1) < 0.1
    logits = torch.log(torch.tensor([0.2, 0.5, 0.3])).expand(2000, 3)
    counts = torch.bincount(rng.categorical(ids, logits), minlength=3) / 2000
    assert torch.allclose(counts, torch.tensor([0.2, 0.5, 0.3]), atol=0.04)
    state = rng.state_dict()
    again = SlotRandom()
    again.load_state_dict(state)
    assert torch.equal(again.uniform(ids[:5]), rng.uniform(ids[:5]))


def test_replay_agent_reproduces_the_outputs_the_batcher_stored():
    model = helpers.biased_model(0)
    torch.nn.init.normal_(model.weight)  # the logits depend on what the agent sees
    agent_info = DictTensor(
        {"epsilon": torch.full((4,), 0.5), "stochastic": torch.ones(4, dtype=bool)}
    )
    with Batcher(30, 2, 2, helpers.cartpole, helpers.PolicyAgent, agent_args={"model": model},
                 agent_info=agent_info, seed=3) as batcher:  # fmt: skip
        batcher.reset(agent_info)
        acquisitions = []
        for _ in range(2):  # the second starts from a carried state
            batcher.execute()
            acquisitions.append(batcher.get()[0])
    learner = helpers.PolicyAgent(model)
    for trajectories in acquisitions:
        steps = trajectories.trajectories
        assert steps["_observation/done"].any()  # episodes restart inside the segment
        replayed = replay_agent(learner, trajectories)
        assert torch.equal(replayed.lengths, steps.lengths)
        assert torch.equal(replayed["count"], steps["action/count"])
        # within rounding: the learner's batch has 4 rows, each worker's 2
        torch.testing.assert_close(replayed["logits"], steps["action/logits"], **helpers.ROUNDING)
    assert (acquisitions[1].info["agent_state/count"] > 0).all()
    # gradients flow through a replay, for a loss
    replayed["logits"].sum().backward()
    assert model.weight.grad is not None


def test_replay_gives_a_history_agent_the_steps_before_each_one():
    steps = TemporalDictTensor(
        {"observation/frame": torch.zeros(2, 4, 1), "action/action": torch.zeros(2, 4)}
    )
    replayed = replay_agent(helpers.HistoryAgent(), Trajectories(DictTensor({}), steps))
    assert replayed["seen"].tolist() == [[0, 1, 2, 3]] * 2


def test_an_agent_must_define_call():
    class Nothing(Agent):
        pass

    with pytest.raises(TypeError):
        Nothing()
    with pytest.raises(NotImplementedError, match="update"):
        helpers.HistoryAgent().update({})


def test_the_package_lists_its_names():
    import cadence.collect

    assert sorted(cadence.collect.__all__) == [
        "Agent",
        "Batcher",
        "BatcherWorkerError",
        "Collector",
        "EpisodeStats",
        "SlotRandom",
        "make_gym_env",
        "replay_agent",
        "reset_where",
    ]
    for name in cadence.collect.__all__:
        assert getattr(cadence.collect, name) is not None, name
