"""Torch's public API where a private symbol stood: each replacement gives, bit for bit, the
numbers of a reference computed one tensor at a time the plain way.

The Polyak updates of SAC, TD3/DDPG and SAC on latents were one private fused foreach lerp;
they are now an in-place ``lerp_`` per tensor, which torch computes with the same kernel
(compiled, both lower to the same graph). The trainer's check that no published checkpoint
holds a non-finite parameter took per-parameter norms with a private foreach norm; it now
takes `torch.linalg.vector_norm` of each. `TimeStep` is a pytree node through
`torch.export.register_dataclass`.
"""

from __future__ import annotations

import pytest
import torch

from cadence.algorithms.build import build_algorithm
from cadence.config import load_config
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.mbrl import make_model_based
from cadence.mbrl.config import LatentSACConfig, SACLatentConfig, WorldModelConfig
from cadence.trainer.errors import NonFiniteUpdateError
from cadence.trainer.run import build_trainer

OBSERVATION, ACTION = TensorSpec((3,)), BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0)


def _drifted(*modules: torch.nn.Module) -> None:
    """Moves the online networks away from their targets, as training does."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in modules:
            for parameter in module.parameters():
                parameter.add_(0.01 * torch.randn(parameter.shape, generator=generator))


def _clones(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _assert_lerped(before: list[torch.Tensor], target: torch.nn.Module, online, tau: float):
    after = list(target.parameters())
    assert len(after) == len(before) > 0
    for old, new, source in zip(before, after, online.parameters(), strict=True):
        assert torch.equal(new, torch.lerp(old, source.detach(), tau))
        assert not torch.equal(new, old)


def _algorithm(config_name: str):
    torch.manual_seed(0)
    config = load_config(config_name)
    return build_algorithm(config.algorithm, OBSERVATION, ACTION, config.network), config


def test_sac_moves_its_target_critics_by_a_lerp_per_tensor():
    sac, config = _algorithm("sac_pendulum")  # 256 x 256 twin critics
    _drifted(sac.critic)
    before = _clones(sac.target_critic)
    sac.after_update()
    _assert_lerped(before, sac.target_critic, sac.critic, config.algorithm.tau)


@pytest.mark.parametrize("config_name", ["td3_pendulum", "ddpg_pendulum"])
def test_td3_and_ddpg_move_their_targets_by_a_lerp_per_tensor(config_name):
    algorithm, config = _algorithm(config_name)
    _drifted(algorithm.actor, algorithm.critic)
    actor_before, critic_before = _clones(algorithm.target_actor), _clones(algorithm.target_critic)
    algorithm.after_update()
    tau = config.algorithm.tau
    _assert_lerped(actor_before, algorithm.target_actor, algorithm.actor, tau)
    _assert_lerped(critic_before, algorithm.target_critic, algorithm.critic, tau)


def test_sac_on_latents_moves_its_target_critics_by_a_lerp_per_tensor():
    torch.manual_seed(0)
    config = SACLatentConfig(
        world_model=WorldModelConfig(
            hidden_size=16, mlp_hidden_size=16, mlp_layers=1, embedding_size=16,
            x_belief_size=8, x_state_size=4, y_belief_size=0, y_state_size=0,
        ),
        sac=LatentSACConfig(hidden_size=32, num_layers=2, tau=0.01),
    )  # fmt: skip
    algorithm = make_model_based(config, OBSERVATION, ACTION)
    algorithm.train()
    sac = algorithm.policy
    _drifted(sac.critics)
    before = _clones(sac.target_critics)
    step_type = torch.full((3, 4), int(StepType.MID))
    step_type[0, 0] = int(StepType.FIRST)
    action = torch.rand(3, 4, 1) * 4 - 2
    batch = {
        "observation": torch.randn(3, 4, 3),
        "prev_action": torch.roll(action, 1, dims=1),
        "reward": torch.randn(3, 4),
        "step_type": step_type,
        "discount": torch.ones(3, 4),
        "action": action,
    }
    algorithm.update(batch)
    # The critics' own update comes before the target update, so the online critics after
    # `update` are those the targets moved towards.
    _assert_lerped(before, sac.target_critics, sac.critics, 0.01)


def test_a_checkpoint_is_refused_for_exactly_the_parameters_whose_norm_is_not_finite(tmp_path):
    overrides = [f"root_dir={tmp_path}", "trainer.progress_bar=off"]
    trainer = build_trainer(load_config("sac_pendulum", overrides), tmp_path)
    parameters = dict(trainer.algorithm.named_parameters())
    names = list(parameters)
    with torch.no_grad():
        parameters[names[1]].view(-1)[0] = float("nan")
        parameters[names[4]].fill_(1e20)  # finite values whose norm overflows float32
    plain = [n for n, p in parameters.items() if not torch.isfinite(p.square().sum().sqrt())]
    assert plain == [names[1], names[4]]
    with pytest.raises(NonFiniteUpdateError) as error:
        trainer.save()
    assert f"parameter(s) {', '.join(plain)} are NaN or infinite" in str(error.value)
    trainer.collector.env.close()


def test_a_time_step_is_a_pytree_node_whose_leaves_are_its_tensors():
    time_step = TimeStep(
        step_type=torch.tensor([0, 1, 2]),
        reward=torch.tensor([1.0, 2.0, 3.0]),
        discount=torch.tensor([1.0, 1.0, 0.0]),
        observation={"position": torch.randn(3, 2)},
        prev_action=torch.zeros(3, 1),
        env_id=torch.arange(3),
    )
    # torch maps over the fields of a registered dataclass; an unregistered one is refused.
    doubled = torch.vmap(lambda step: step.replace(reward=step.reward * 2))(time_step)
    assert isinstance(doubled, TimeStep)
    assert torch.equal(doubled.reward, time_step.reward * 2)
    assert torch.equal(doubled.observation["position"], time_step.observation["position"])
    assert torch.equal(doubled.step_type, time_step.step_type)
