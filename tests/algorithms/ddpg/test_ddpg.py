"""DDPG: one critic, unsmoothed targets from the target networks, actor and targets updated
on every step, its own config, and a smoke run of the named config."""

from __future__ import annotations

import attrs
import pytest
import torch

from cadence.algorithms.ddpg import DDPGConfig, make_ddpg
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.td3 import TD3Config
from cadence.config import load_config
from cadence.data.specs import BoundedTensorSpec
from cadence.data.time_step import StepType
from cadence.networks.config import NetworkConfig
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

OBSERVATION_SPEC = BoundedTensorSpec((3,), minimum=-8.0, maximum=8.0)
ACTION_SPEC = BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0)
NETWORK = NetworkConfig(hidden_sizes=(16, 16), activation="relu", orthogonal_init=False)


def make_inputs(num_windows: int = 32) -> dict[str, torch.Tensor]:
    step_type = torch.full((num_windows, 2), int(StepType.MID))
    step_type[0, 1] = StepType.LAST  # a terminal transition
    discount = torch.ones(num_windows, 2)
    discount[0, 1] = 0.0
    return {
        "observation": torch.randn(num_windows, 2, 3),
        "action": torch.rand(num_windows, 1) * 2 - 1,
        "reward": torch.randn(num_windows, 2),
        "discount": discount,
        "step_type": step_type,
        "weights": torch.ones(num_windows),
    }


def test_ddpg_uses_one_critic_and_bootstraps_from_the_target_actor_without_noise():
    algorithm = make_ddpg(DDPGConfig(gamma=0.9), OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    assert algorithm.critic.num_critics == 1 and algorithm.target_critic.num_critics == 1
    assert algorithm.target_action_noise is None
    inputs = make_inputs()
    next_observation = inputs["observation"][:, 1]
    with torch.no_grad():
        next_q = algorithm.target_critic(next_observation, algorithm.target_actor(next_observation))
    expected = inputs["reward"][:, 1] + 0.9 * inputs["discount"][:, 1] * next_q[0]
    torch.testing.assert_close(algorithm.critic_target(inputs), expected)
    torch.testing.assert_close(algorithm.critic_target(inputs), expected)  # deterministic
    assert float(algorithm.critic_target(inputs)[0]) == pytest.approx(float(inputs["reward"][0, 1]))


def test_actor_critic_and_targets_all_change_on_every_update():
    algorithm = make_ddpg(DDPGConfig(), OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    modules = [algorithm.actor, algorithm.critic, algorithm.target_actor, algorithm.target_critic]
    inputs = make_inputs()
    for _ in range(3):
        before = [[p.clone() for p in m.parameters()] for m in modules]
        algorithm.update(inputs)
        for old, module in zip(before, modules, strict=True):
            assert any(not torch.equal(a, b) for a, b in zip(old, module.parameters(), strict=True))


def test_ddpg_config_holds_only_the_knobs_ddpg_uses():
    ddpg = {f.name for f in attrs.fields(DDPGConfig)}
    td3_only = {f.name for f in attrs.fields(TD3Config)} - ddpg
    assert td3_only == {"num_critics", "target_policy_noise", "target_noise_clip", "policy_delay"}
    with pytest.raises(ValueError, match="mini_batch_length"):
        DDPGConfig(off_policy=OffPolicyConfig(mini_batch_length=1))


def test_ddpg_pendulum_named_config_trains_end_to_end(tmp_path):
    overrides = [
        f"root_dir={tmp_path / 'run'}",
        "trainer.progress_bar=off",
        "trainer.num_env_steps=300",
        "trainer.eval_interval=0",
        "trainer.num_eval_episodes=1",
        "algorithm.off_policy.initial_collect_steps=100",
        "algorithm.off_policy.mini_batch_size=32",
        "network.hidden_sizes=[16,16]",
    ]
    config = load_config("ddpg_pendulum", overrides)
    assert config.algorithm.name == "ddpg"
    train(config)
    records = list(read_metrics(tmp_path / "run"))
    assert any(r.get("loss/actor") is not None for r in records)
    assert any(r.get("eval/episode_return") is not None for r in records)
