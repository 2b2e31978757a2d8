"""The deterministic actor-critic core of TD3 and DDPG: targets by hand at termination and
truncation, masking, importance weights, gradient isolation, acting, and state round trips."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from cadence.algorithms.deterministic_actor_critic import (
    DeterministicActorCritic,
    action_bounds,
    make_deterministic_networks,
)
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.networks.config import NetworkConfig

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST
OBSERVATION_SPEC = BoundedTensorSpec((3,), minimum=-8.0, maximum=8.0)
ACTION_SPEC = BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0)
GAMMA = 0.9


class TableCritic(nn.Module):
    """A fake target critic: Q-values read from ``table[E, N, L - 1]``; records its inputs."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = table
        self.actions: list[torch.Tensor] = []

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        self.actions.append(action)
        return self.table


def make_algorithm(num_critics: int = 2, **kwargs) -> DeterministicActorCritic:
    config = NetworkConfig(hidden_sizes=(16, 16), activation="relu", orthogonal_init=False)
    actor, critic = make_deterministic_networks(OBSERVATION_SPEC, ACTION_SPEC, config, num_critics)
    options = dict(
        gamma=GAMMA,
        tau=0.5,
        exploration_noise=0.1,
        actor_learning_rate=1e-2,
        critic_learning_rate=1e-2,
    )
    return DeterministicActorCritic(actor, critic, ACTION_SPEC, **{**options, **kwargs})


def make_inputs(step_type, reward, discount, weights=None) -> dict[str, torch.Tensor]:
    step_type = torch.tensor(step_type, dtype=torch.int64)
    num_windows, length = step_type.shape
    return {
        "observation": torch.randn(num_windows, length, 3),
        "action": torch.rand(num_windows, 1) * 2 - 1,
        "reward": torch.tensor(reward, dtype=torch.float32),
        "discount": torch.tensor(discount, dtype=torch.float32),
        "step_type": step_type,
        "weights": torch.ones(num_windows) if weights is None else torch.tensor(weights),
    }


def test_one_step_targets_by_hand_at_termination_truncation_and_reset():
    algorithm = make_algorithm(num_critics=2)
    # Members' next-state values; the target takes their minimum.
    algorithm.target_critic = TableCritic(
        torch.tensor([[[5.0], [7.0], [4.0], [9.0]], [[3.0], [8.0], [6.0], [9.0]]])
    )
    inputs = make_inputs(
        step_type=[[MID, MID], [MID, LAST], [MID, LAST], [LAST, FIRST]],
        reward=[[0.0, 1.0], [0.0, 2.0], [0.0, 2.0], [0.0, 5.0]],
        discount=[[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]],
    )
    target = algorithm.critic_target(inputs)
    expected = [
        1.0 + GAMMA * 3.0,  # MID -> MID: bootstrap from min(5, 3)
        2.0,  # terminal LAST (discount 0): no bootstrap
        2.0 + GAMMA * 4.0,  # time-limit LAST (discount 1): bootstrap from min(4, 6)
        0.0,  # the window starts at LAST: its action was ignored by the reset
    ]
    torch.testing.assert_close(target, torch.tensor(expected))
    info = algorithm.train_step(inputs).info
    assert info["valid"].tolist() == [True, True, True, False]


def test_longer_windows_sum_rewards_before_bootstrapping():
    algorithm = make_algorithm(num_critics=1)
    algorithm.target_critic = TableCritic(torch.tensor([[[9.0, 4.0], [9.0, 9.0]]]))
    inputs = make_inputs(
        step_type=[[MID, MID, MID], [MID, LAST, FIRST]],
        reward=[[0.0, 1.0, 2.0], [0.0, 3.0, 7.0]],
        discount=[[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]],
    )
    expected = [1.0 + GAMMA * 2.0 + GAMMA**2 * 4.0, 3.0]
    torch.testing.assert_close(algorithm.critic_target(inputs), torch.tensor(expected))


def test_critic_loss_masks_reset_windows_and_applies_importance_weights():
    algorithm = make_algorithm(num_critics=2)
    q = torch.tensor([[1.0, 2.0, 3.0], [0.0, 4.0, 100.0]])
    target = torch.tensor([0.0, 1.0, -50.0])
    info = {
        "q": q,
        "target": target,
        "valid": torch.tensor([True, True, False]),
        "weights": torch.tensor([0.5, 2.0, 1.0]),
    }
    loss = algorithm.calc_loss(info)
    # Sum over members of the weighted squared errors, averaged over the 2 valid windows.
    expected = (0.5 * (1.0 + 0.0) + 2.0 * (1.0 + 9.0)) / 2
    torch.testing.assert_close(loss.loss, torch.tensor(expected))
    assert set(loss.extra) >= {"loss/critic", "train/q", "train/td_error"}


def test_actor_loss_reaches_the_actor_only_and_critic_loss_the_critic_only():
    algorithm = make_algorithm()
    inputs = make_inputs([[MID, MID]] * 4, [[0.0, 1.0]] * 4, [[1.0, 1.0]] * 4)
    algorithm.actor_loss(inputs).loss.backward()
    assert all(p.grad is None for p in algorithm.critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in algorithm.actor.parameters())
    algorithm.actor.zero_grad(set_to_none=True)
    algorithm.calc_loss(algorithm.train_step(inputs).info).loss.backward()
    assert all(p.grad is None for p in algorithm.actor.parameters())
    assert all(p.grad is not None for p in algorithm.critic.parameters())
    targets = [*algorithm.target_actor.parameters(), *algorithm.target_critic.parameters()]
    assert all(p.grad is None and not p.requires_grad for p in targets)


def test_actor_loss_is_minus_the_first_critic():
    algorithm = make_algorithm(num_critics=2)
    inputs = make_inputs([[MID, MID], [LAST, FIRST]], [[0.0, 1.0]] * 2, [[1.0, 1.0]] * 2)
    observation = inputs["observation"][:, 0]
    with torch.no_grad():
        q = algorithm.critic(observation, algorithm.actor(observation))
    loss = algorithm.actor_loss(inputs).loss
    torch.testing.assert_close(loss, -q[0, 0])  # window 1 starts at LAST: masked


def test_update_returns_priorities_and_moves_targets_by_polyak_averaging():
    algorithm = make_algorithm(tau=0.25)
    before = [p.clone() for p in algorithm.target_critic.parameters()]
    inputs = make_inputs([[MID, MID], [LAST, FIRST]], [[0.0, 1.0]] * 2, [[1.0, 1.0]] * 2)
    extra, _, priorities = algorithm.update(inputs)
    assert priorities.shape == (2,) and priorities[1] == 0 and priorities[0] > 0
    assert {"loss/critic", "loss/actor"} <= set(extra)
    for old, target, online in zip(
        before, algorithm.target_critic.parameters(), algorithm.critic.parameters(), strict=True
    ):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * online)


def test_acting_is_deterministic_for_predict_and_noisy_within_bounds_for_rollout():
    algorithm = make_algorithm(exploration_noise=5.0)
    time_step = TimeStep(
        step_type=torch.zeros(256, dtype=torch.int64),
        reward=torch.zeros(256),
        discount=torch.ones(256),
        observation=torch.randn(256, 3),
        prev_action=torch.zeros(256, 1),
        env_id=torch.arange(256),
    )
    first = algorithm.predict_step(time_step, ()).output
    torch.testing.assert_close(first, algorithm.predict_step(time_step, ()).output)
    noisy = algorithm.rollout_step(time_step, ()).output
    assert noisy.shape == (256, 1)
    assert bool((noisy.abs() <= 2.0).all()), "exploration noise is clipped to the bounds"
    assert bool((noisy.abs() == 2.0).any()), "large noise reaches the bounds"
    assert not torch.equal(noisy, first)


def test_actions_are_scaled_between_normalized_and_env_units():
    algorithm = make_algorithm()
    normalized = torch.tensor([[-1.0], [0.0], [0.5], [1.0]])
    env = algorithm.to_env_action(normalized)
    torch.testing.assert_close(env, torch.tensor([[-2.0], [0.0], [1.0], [2.0]]))
    torch.testing.assert_close(algorithm.to_normalized_action(env), normalized)


@pytest.mark.parametrize(
    "spec",
    [
        DiscreteTensorSpec((), nvec=3),
        TensorSpec((2,)),
        BoundedTensorSpec((2,), minimum=-float("inf"), maximum=1.0),
        BoundedTensorSpec((2, 2), minimum=-1.0, maximum=1.0),
    ],
)
def test_action_specs_without_finite_1d_bounds_are_refused(spec):
    with pytest.raises(ValueError, match="TD3 and DDPG need"):
        action_bounds(spec)


def test_state_dict_keeps_the_update_count_and_loads_without_code():
    algorithm = make_algorithm(policy_delay=3)
    inputs = make_inputs([[MID, MID]] * 4, [[0.0, 1.0]] * 4, [[1.0, 1.0]] * 4)
    for _ in range(2):
        algorithm.update(inputs)
    buffer = io.BytesIO()
    torch.save(algorithm.state_dict(), buffer)
    buffer.seek(0)
    restored = make_algorithm(policy_delay=3)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    actor_before = [p.clone() for p in restored.actor.parameters()]
    restored.update(inputs)  # the third update: the delayed actor step comes now
    assert restored.get_extra_state() == {"num_updates": 3}
    after = restored.actor.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(actor_before, after, strict=True))
