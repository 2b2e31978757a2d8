"""TD3: the minimum over twin target critics, clipped target smoothing, delayed actor and
target updates, its config, and a smoke run of the named config."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.td3 import TargetPolicySmoothing, TD3Config, make_td3
from cadence.config import ConfigError, load_config
from cadence.data.specs import BoundedTensorSpec
from cadence.data.time_step import StepType
from cadence.networks.config import NetworkConfig
from cadence.testing.resume import check_exact_resume
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

OBSERVATION_SPEC = BoundedTensorSpec((3,), minimum=-8.0, maximum=8.0)
ACTION_SPEC = BoundedTensorSpec((2,), minimum=-2.0, maximum=2.0)
NETWORK = NetworkConfig(hidden_sizes=(16, 16), activation="relu", orthogonal_init=False)


class RecordingCritic(nn.Module):
    """A fake target critic: member e answers ``values[e]`` everywhere; records the actions."""

    def __init__(self, values: list[float]):
        super().__init__()
        self.values = torch.tensor(values)
        self.actions: list[torch.Tensor] = []

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        self.actions.append(action)
        return self.values.view(-1, 1, 1).expand(-1, *action.shape[:-1])


class ConstantActor(nn.Module):
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.full((*observation.shape[:-1], 2), self.value)


def make_inputs(num_windows: int = 64) -> dict[str, torch.Tensor]:
    return {
        "observation": torch.randn(num_windows, 2, 3),
        "action": torch.rand(num_windows, 2) * 2 - 1,
        "reward": torch.ones(num_windows, 2),
        "discount": torch.ones(num_windows, 2),
        "step_type": torch.full((num_windows, 2), int(StepType.MID)),
        "weights": torch.ones(num_windows),
    }


def test_td3_has_twin_critics_and_bootstraps_from_their_minimum():
    algorithm = make_td3(TD3Config(gamma=0.5), OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    assert algorithm.critic.num_critics == 2
    algorithm.target_critic = RecordingCritic([10.0, -4.0])
    target = algorithm.critic_target(make_inputs())
    torch.testing.assert_close(target, torch.full((64,), 1.0 + 0.5 * -4.0))


def test_target_actions_are_smoothed_by_clipped_noise_and_kept_in_bounds():
    config = TD3Config(target_policy_noise=0.3, target_noise_clip=0.2)
    algorithm = make_td3(config, OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    algorithm.target_actor = ConstantActor(0.9)
    algorithm.target_critic = critic = RecordingCritic([0.0, 0.0])
    algorithm.critic_target(make_inputs(num_windows=2000))
    noise = critic.actions[0] - 0.9
    assert noise.abs().max() <= 0.2 + 1e-6, "noise is clipped to target_noise_clip"
    assert critic.actions[0].max() <= 1.0, "smoothed actions stay in the normalized bounds"
    assert (critic.actions[0] == 1.0).float().mean() > 0.2, "noise past the bound is clipped"
    assert noise.std() > 0.1, "the target actions are actually perturbed"


def test_smoothing_noise_follows_its_std_inside_the_clip():
    smooth = TargetPolicySmoothing(noise_std=0.1, noise_clip=10.0)
    noise = smooth(torch.zeros(20000, 1))
    assert abs(float(noise.std()) - 0.1) < 0.005
    assert (
        float(TargetPolicySmoothing(0.1, 0.0)(torch.full((100, 1), 0.3)).sub(0.3).abs().max())
        < 1e-7
    )


@pytest.mark.parametrize("policy_delay", [2, 3])
def test_actor_and_targets_change_only_every_policy_delay_updates(policy_delay):
    config = TD3Config(policy_delay=policy_delay)
    algorithm = make_td3(config, OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    inputs = make_inputs()
    modules = {
        "actor": algorithm.actor,
        "target_actor": algorithm.target_actor,
        "target_critic": algorithm.target_critic,
        "critic": algorithm.critic,
    }
    for update in range(1, 2 * policy_delay + 1):
        before = {name: [p.clone() for p in m.parameters()] for name, m in modules.items()}
        algorithm.update(inputs)
        changed = {
            name: any(
                not torch.equal(a, b) for a, b in zip(before[name], m.parameters(), strict=True)
            )
            for name, m in modules.items()
        }
        delayed_step = update % policy_delay == 0
        assert changed == {
            "actor": delayed_step,
            "target_actor": delayed_step,
            "target_critic": delayed_step,
            "critic": True,
        }, f"update {update}"


def test_actor_loss_is_logged_on_every_update():
    algorithm = make_td3(TD3Config(policy_delay=2), OBSERVATION_SPEC, ACTION_SPEC, NETWORK)
    inputs = make_inputs()
    algorithm.update(inputs)
    algorithm.update(inputs)
    extra, _, _ = algorithm.update(inputs)  # no actor step: the latest actor loss is reported
    assert float(extra["loss/actor"]) != 0.0


def test_td3_config_refuses_single_step_windows_and_single_critics():
    with pytest.raises(ValueError, match="mini_batch_length"):
        TD3Config(off_policy=OffPolicyConfig(mini_batch_length=1))
    with pytest.raises(ValueError, match="num_critics"):
        TD3Config(num_critics=1)
    with pytest.raises(ConfigError, match="mini_batch_length"):
        load_config("td3_pendulum", ["algorithm.off_policy.mini_batch_length=1"])


def test_td3_pendulum_named_config_trains_end_to_end(tmp_path):
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
    config = load_config("td3_pendulum", overrides)
    assert config.algorithm.name == "td3" and config.algorithm.gamma == 0.98
    train(config)
    records = list(read_metrics(tmp_path / "run"))
    assert any(r.get("loss/critic") is not None for r in records)
    assert any(r.get("eval/episode_return") is not None for r in records)


def test_a_resumed_run_continues_exactly_with_the_policy_delay_phase_kept(tmp_path):
    # 5 updates per iteration and a delay of 3: the phase of the delayed step differs
    # between iterations, so a resume that lost the update count would diverge.
    overrides = [
        "trainer.progress_bar=off",
        "trainer.num_env_steps=320",  # 8 iterations of 40 steps, 3 of random collection
        "trainer.unroll_length=40",
        "trainer.summary_interval=1",
        "trainer.eval_interval=4",
        "trainer.num_eval_episodes=1",
        "trainer.checkpoint_interval=4",
        "algorithm.policy_delay=3",
        "algorithm.off_policy.initial_collect_steps=100",
        "algorithm.off_policy.mini_batch_size=16",
        "algorithm.off_policy.num_updates_per_train_iter=5",
        "network.hidden_sizes=[16,16]",
    ]
    run = check_exact_resume("td3_pendulum", overrides, tmp_path, stop_after=4)
    assert sum("loss/actor" in record for record in run.records) >= 4
