"""`DQNAlgorithm`: target-network period and tau, the epsilon schedule, acting, priorities,
checkpointed update count, and every observation kind the encoders take."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.algorithms.dqn import DQNAlgorithm, DQNConfig, linear_epsilon, make_dqn
from cadence.algorithms.off_policy import OffPolicyScheme, make_replay_buffer
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.collect.unroll import Collector
from cadence.config import ConfigError, load_config
from cadence.data.specs import BoundedTensorSpec, CompositeSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.make import make_env
from cadence.networks import NetworkConfig
from cadence.replay.buffer import ReplaySample
from cadence.testing.fakes import ImageEnv


class ScaledObservation(nn.Module):
    """Q(s, a) = s[a] * scale[a]: action values read straight off the observation."""

    def __init__(self, num_actions: int = 2):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(num_actions))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return observation * self.scale


def _dqn(**overrides) -> DQNAlgorithm:
    return DQNAlgorithm(ScaledObservation(), DQNConfig(**overrides))


def _window_inputs(observation: torch.Tensor, reward: float = 1.0) -> dict[str, torch.Tensor]:
    """``[N, 2, 2]`` observations of one-step windows without episode boundaries."""
    num = observation.shape[0]
    return {
        "observation": observation,
        "action": torch.zeros(num, dtype=torch.int64),
        "reward": torch.full((num, 2), reward),
        "discount": torch.ones(num, 2),
        "step_type": torch.full((num, 2), int(StepType.MID)),
        "weights": torch.ones(num),
    }


def test_double_q_lets_the_online_network_pick_and_the_target_network_value():
    observation = torch.tensor([[[2.0, 0.0], [5.0, 10.0]]])
    for double_q, expected in ((True, 1 + 0.5 * -10.0), (False, 1 + 0.5 * 5.0)):
        dqn = _dqn(double_q=double_q, gamma=0.5)
        with torch.no_grad():
            dqn.target_network.scale.copy_(torch.tensor([1.0, -1.0]))
        info = dqn.train_step(_window_inputs(observation), ()).info
        assert info["q_value"].tolist() == [2.0]
        assert info["target"].tolist() == [expected]


def test_the_target_network_moves_tau_of_the_way_every_period_updates():
    dqn = _dqn(target_update_period=3, target_update_tau=0.25, learning_rate=0.1)
    inputs = _window_inputs(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]), reward=10.0)
    history = []
    for _ in range(6):
        before = dqn.target_network.scale.detach().clone()
        dqn.update(inputs)
        history.append(
            (
                before,
                dqn.q_network.scale.detach().clone(),
                dqn.target_network.scale.detach().clone(),
            )
        )
    for step, (before, online, after) in enumerate(history, start=1):
        if step % 3:
            assert torch.equal(after, before), f"the target moved at update {step}"
        else:
            assert torch.allclose(after, 0.75 * before + 0.25 * online), step
    assert dqn.num_updates == 6
    assert not dqn.target_network.scale.requires_grad


def test_a_tau_of_one_copies_the_online_network_exactly():
    dqn = _dqn(target_update_period=2, target_update_tau=1.0, learning_rate=0.37)
    inputs = _window_inputs(torch.tensor([[[1.3, 0.0], [0.0, 0.0]]]), reward=3.0)
    dqn.update(inputs)
    assert not torch.equal(dqn.target_network.scale, dqn.q_network.scale)
    dqn.update(inputs)
    assert torch.equal(dqn.target_network.scale, dqn.q_network.scale)


def test_epsilon_decays_linearly_over_the_exploration_fraction_then_stays():
    dqn = _dqn(epsilon_start=1.0, epsilon_end=0.1, exploration_fraction=0.2)
    assert dqn.epsilon == 1.0
    for fraction, expected in ((0.0, 1.0), (0.1, 0.55), (0.2, 0.1), (0.9, 0.1)):
        dqn.set_progress(fraction)
        assert dqn.epsilon == pytest.approx(expected)
    assert linear_epsilon(0.5, 1.0, 0.3, exploration_fraction=0.0) == 0.3


def test_rollout_explores_with_probability_epsilon_and_predict_is_greedy():
    dqn = _dqn()
    observation = torch.tensor([[0.0, 1.0]]).expand(4000, 2)
    time_step = TimeStep(
        step_type=torch.ones(4000, dtype=torch.int64),
        reward=torch.zeros(4000),
        discount=torch.ones(4000),
        observation=observation,
        prev_action=torch.zeros(4000, dtype=torch.int64),
        env_id=torch.arange(4000),
    )
    assert bool((dqn.predict_step(time_step, ()).output == 1).all())
    torch.manual_seed(0)
    for epsilon, greedy_share in ((0.0, 1.0), (0.4, 0.8), (1.0, 0.5)):
        dqn.epsilon = epsilon
        actions = dqn.rollout_step(time_step, ()).output
        assert actions.dtype == torch.int64
        assert float((actions == 1).float().mean()) == pytest.approx(greedy_share, abs=0.03)


def test_update_returns_td_error_priorities_zero_for_windows_without_a_transition():
    dqn = _dqn(gamma=0.0, learning_rate=1e-9)
    inputs = _window_inputs(torch.tensor([[[2.0, 0.0], [0.0, 0.0]]]).repeat(2, 1, 1), reward=5.0)
    inputs["step_type"][1, 0] = StepType.LAST
    extra, _, priorities = dqn.update(inputs)
    assert priorities.tolist() == pytest.approx([3.0, 0.0])
    assert {"loss/td", "train/q_value", "train/grad_norm", "train/epsilon"} <= set(extra)


def test_the_update_count_is_checkpointed_so_target_updates_keep_their_rhythm():
    dqn = _dqn(target_update_period=4)
    inputs = _window_inputs(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))
    for _ in range(3):
        dqn.update(inputs)
    restored = _dqn(target_update_period=4)
    restored.load_state_dict(dqn.state_dict())
    assert restored.num_updates == 3
    dqn.update(inputs)
    restored.update(inputs)
    assert torch.equal(restored.target_network.scale, dqn.target_network.scale)
    assert torch.equal(restored.target_network.scale, restored.q_network.scale)


def _fake_sample(observation: object, num: int, num_actions: int) -> ReplaySample:
    step_type = torch.full((num, 2), int(StepType.MID))
    steps = {
        "time_step": {
            "step_type": step_type,
            "reward": torch.ones(num, 2),
            "discount": torch.ones(num, 2),
            "observation": observation,
            "prev_action": torch.zeros(num, 2, dtype=torch.int64),
            "env_id": torch.zeros(num, 2, dtype=torch.int64),
            "env_info": {},
        },
        "action": torch.randint(num_actions, (num, 2)),
        "info": (),
    }
    return ReplaySample(
        steps,
        torch.zeros(num, dtype=torch.int64),
        torch.zeros(num, 2, dtype=torch.int64),
        torch.arange(num),
        torch.ones(num),
    )


@pytest.mark.parametrize("kind", ["vector", "image", "dict"])
def test_vector_image_and_dict_observations_train(kind):
    num = 6
    specs = {
        "vector": TensorSpec((4,)),
        "image": TensorSpec((3, 16, 16), torch.uint8),
        "dict": CompositeSpec(
            {"position": TensorSpec((3,)), "cell": DiscreteTensorSpec((), nvec=5)}
        ),
    }
    observations = {
        "vector": torch.randn(num, 2, 4),
        "image": torch.randint(0, 256, (num, 2, 3, 16, 16), dtype=torch.uint8),
        "dict": {"position": torch.randn(num, 2, 3), "cell": torch.randint(5, (num, 2))},
    }
    network = NetworkConfig(hidden_sizes=(16,), activation="relu", cnn="small")
    dqn = make_dqn(
        DQNConfig(learning_rate=1e-2), specs[kind], DiscreteTensorSpec((), nvec=3), network
    )
    sample = _fake_sample(observations[kind], num, 3)
    first = [p.detach().clone() for p in dqn.q_network.parameters()]
    extra, _, priorities = dqn.update(dqn.preprocess_experience(sample))
    assert priorities.shape == (num,) and torch.isfinite(extra["loss/td"])
    changed = [
        not torch.equal(a, p) for a, p in zip(first, dqn.q_network.parameters(), strict=True)
    ]
    assert all(changed), "every layer, the encoder's included, should get a gradient step"


def test_dqn_learns_from_images_through_the_off_policy_scheme():
    env = make_env(lambda: ImageEnv(size=16, channel_first=True), 2, backend="serial", seed=0)
    network = NetworkConfig(hidden_sizes=(32,), activation="relu", cnn="small")
    off_policy = OffPolicyConfig(
        initial_collect_steps=32, mini_batch_size=16, num_updates_per_train_iter=2
    )
    dqn = make_dqn(
        DQNConfig(off_policy=off_policy, target_update_period=2),
        env.observation_spec,
        env.action_spec,
        network,
    )
    collector = Collector(env, dqn, unroll_length=16)
    scheme = OffPolicyScheme(
        dqn, collector, make_replay_buffer(off_policy, 2, 1000), off_policy, env.action_spec
    )
    for _ in range(3):
        metrics = scheme.train_iter().metrics
    assert metrics["train/num_updates"] == 2 and dqn.num_updates == 6  # trains from iteration 1
    assert scheme.replay_buffer.storage.fields["time_step/observation"].dtype == torch.uint8
    env.close()


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="single discrete action"):
        make_dqn(
            DQNConfig(), TensorSpec((3,)), BoundedTensorSpec((1,), minimum=-1.0), NetworkConfig()
        )


def test_a_window_length_other_than_n_step_plus_one_is_refused_naming_the_fix():
    with pytest.raises(ConfigError, match="algorithm.off_policy.mini_batch_length=4"):
        load_config("dqn_cartpole", ["algorithm.n_step=3"])
    config = load_config(
        "dqn_cartpole", ["algorithm.n_step=3", "algorithm.off_policy.mini_batch_length=4"]
    )
    assert config.algorithm.n_step == 3
