"""The off-policy scheme: random initial collection, minibatch counts, whole-buffer passes,
priority updates, and a state-dict round trip."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.algorithms.algorithm import Algorithm, AlgStep, UpdateResult
from cadence.algorithms.off_policy import OffPolicyScheme, check_first_window, make_replay_buffer
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.collect.unroll import Collector
from cadence.envs.make import make_env
from cadence.replay.buffer import ReplaySample


class ConstantActionAlgorithm(Algorithm):
    """Always pushes left (action 0); records what the scheme hands it."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self._optimizer = torch.optim.SGD([self.weight], lr=0.1)
        self.batches: list[ReplaySample] = []

    def optimizers(self):
        return {"main": self._optimizer}

    def predict_step(self, time_step, state, agent_info=()):
        return self.rollout_step(time_step, state)

    def rollout_step(self, time_step, state, agent_info=()):
        action = torch.zeros(time_step.step_type.shape[0], dtype=torch.int64)
        return AlgStep(output=action, state=state, info={"marker": torch.ones_like(action)})

    def preprocess_experience(self, sample: ReplaySample) -> ReplaySample:
        self.batches.append(sample)
        return sample

    def update(self, inputs: ReplaySample):
        loss = (self.weight - 1.0) ** 2
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        priorities = torch.full((inputs.env_ids.shape[0],), 5.0)
        return UpdateResult({"loss/fake": loss.detach()}, ~torch.isfinite(loss), priorities)


def make_scheme(
    config: OffPolicyConfig, num_envs: int = 2, unroll_length: int = 8, num_env_steps: int = 1000
):
    env = make_env("CartPole-v1", num_envs, backend="serial", seed=0)
    algorithm = ConstantActionAlgorithm()
    collector = Collector(env, algorithm, unroll_length)
    buffer = make_replay_buffer(config, num_envs, num_env_steps=num_env_steps)
    return OffPolicyScheme(algorithm, collector, buffer, config, env.action_spec), algorithm


def test_initial_collection_uses_random_actions_then_the_policy():
    config = OffPolicyConfig(initial_collect_steps=32, mini_batch_size=4)
    scheme, algorithm = make_scheme(config)
    metrics = scheme.train_iter().metrics  # 16 env steps: still collecting, no update
    assert metrics["train/num_updates"] == 0
    assert algorithm.batches == []
    scheme.train_iter()  # 32 steps: collection done, first update
    actions = scheme.replay_buffer.gather_all()["action"]
    assert actions.shape == (2, 16)
    assert bool((actions == 1).any()), "random actions should include pushes right"
    assert bool((scheme.replay_buffer.gather_all()["info"]["marker"] == 1).all())
    scheme.train_iter()
    latest = scheme.replay_buffer.gather_all()["action"][:, 16:]
    assert bool((latest == 0).all()), "after initial_collect_steps the algorithm acts"


def test_sampled_training_makes_num_updates_minibatches_of_the_asked_shape():
    config = OffPolicyConfig(
        initial_collect_steps=0,
        mini_batch_size=6,
        mini_batch_length=3,
        num_updates_per_train_iter=4,
    )
    scheme, algorithm = make_scheme(config)
    metrics = scheme.train_iter().metrics
    assert metrics["train/num_updates"] == 4
    assert metrics["loss/fake"] > 0
    assert [b.action.shape for b in algorithm.batches] == [torch.Size([6, 3])] * 4


def test_whole_buffer_training_trains_every_stored_transition_once_per_pass():
    config = OffPolicyConfig(
        initial_collect_steps=0,
        mini_batch_size=2,
        mini_batch_length=4,
        num_updates_per_train_iter=2,
        whole_replay_buffer_training=True,
    )
    scheme, algorithm = make_scheme(config, num_envs=4, unroll_length=8)
    metrics = scheme.train_iter().metrics
    # 4 envs x 8 steps: windows of 4 start at each env's steps 0..4, 20 windows in 10
    # minibatches of 2, two passes.
    assert metrics["train/num_updates"] == 20
    first_pass = torch.cat([b.indices for b in algorithm.batches[:10]])
    assert sorted(first_pass.tolist()) == sorted(
        torch.cat([b.indices for b in algorithm.batches[10:]]).tolist()
    )
    assert len(set(first_pass.tolist())) == 20
    for batch in algorithm.batches:  # time order kept inside each window
        assert bool((batch.positions[:, 1:] - batch.positions[:, :-1] == 1).all())


def test_prioritized_replay_receives_the_algorithm_priorities():
    config = OffPolicyConfig(
        initial_collect_steps=0, mini_batch_size=4, prioritized_replay=True, priority_beta=0.5
    )
    scheme, _ = make_scheme(config)
    sampler = scheme.replay_buffer.sampler
    beta_before = sampler.beta
    scheme.train_iter()
    assert sampler.max_priority >= 5.0
    assert sampler.beta > beta_before, "beta anneals towards 1 as env steps are taken"


def test_prioritized_beta_anneals_over_the_whole_budget_initial_collection_included():
    config = OffPolicyConfig(
        initial_collect_steps=32, mini_batch_size=4, prioritized_replay=True, priority_beta=0.4
    )
    scheme, algorithm = make_scheme(config, num_env_steps=64)  # 16 env steps per iteration
    betas = []
    for _ in range(4):
        scheme.train_iter()
        betas.append(scheme.replay_buffer.sampler.beta)
    assert betas == pytest.approx([0.55, 0.7, 0.85, 1.0])
    assert algorithm.batches, "training started after the initial collection"
    assert float(algorithm.batches[-1].weights.min()) > 0


def test_state_dict_round_trip_restores_buffer_and_collection_progress():
    config = OffPolicyConfig(initial_collect_steps=64, mini_batch_size=4)
    scheme, _ = make_scheme(config)
    scheme.train_iter()
    state = scheme.state_dict()
    restored, _ = make_scheme(config)
    restored.load_state_dict(state)
    assert restored.replay_buffer.num_steps == scheme.replay_buffer.num_steps == 16
    assert restored.state_dict()["env_steps"] == 16
    for key, value in scheme.replay_buffer.gather_all()["time_step"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, restored.replay_buffer.gather_all()["time_step"][key])


def test_only_the_algorithms_replay_fields_are_gathered_unless_transformers_run():
    config = OffPolicyConfig(
        initial_collect_steps=0, mini_batch_size=4, num_updates_per_train_iter=2
    )
    scheme, algorithm = make_scheme(config)
    algorithm.replay_fields = ("time_step/reward", "action")
    scheme.train_iter()
    for batch in algorithm.batches:
        assert set(batch.steps) == {"time_step", "action"}
        assert set(batch.steps["time_step"]) == {"reward"}
        assert batch.action.shape == (4, 2)
    # A transformer may read any field, so with one every field is gathered.
    scheme.transform = lambda sample: sample
    algorithm.batches.clear()
    scheme.train_iter()
    assert {"info", "time_step"} <= set(algorithm.batches[0].steps)
    assert "observation" in algorithm.batches[0].steps["time_step"]


def test_a_prefill_too_short_for_one_window_is_refused_before_the_run_starts():
    config = OffPolicyConfig(initial_collect_steps=8, mini_batch_length=50)
    # 2 envs x 4 stored steps per unroll, action repeat 2: 16 simulator steps per unroll.
    with pytest.raises(ValueError, match=r"initial_collect_steps to 208 or more"):
        check_first_window(config, steps_per_env=4, env_steps_per_unroll=16, num_envs=2)
    check_first_window(
        OffPolicyConfig(initial_collect_steps=208, mini_batch_length=50), 4, 16, num_envs=2
    )
    with pytest.raises(ValueError, match="replay_buffer_length"):
        check_first_window(OffPolicyConfig(replay_buffer_length=10, mini_batch_length=50), 4, 16, 2)
