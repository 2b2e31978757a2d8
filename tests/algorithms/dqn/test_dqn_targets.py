"""DQN targets by hand: n-step sums on windows with a termination and a truncation,
double-Q bootstrap values, and the weighted, masked TD loss."""

from __future__ import annotations

import pytest
import torch

from cadence.algorithms.dqn import DQNConfig, DQNLoss, bootstrap_value, n_step_targets
from cadence.data.time_step import StepType

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)

# Windows of L = 3 steps (n_step = 2), gamma = 0.9. Step 0's reward belongs to the action
# before the window and is never read (999); bootstrap values of steps 1 and 2 are 10 and 20.
# (step types, discounts, rewards of steps 1 and 2, hand-computed target)
WINDOWS = [
    ([M, M, M], [1, 1, 1], [1, 2], 1 + 0.9 * 2 + 0.81 * 20),  # no boundary: 19.0
    ([F, M, M], [1, 1, 1], [1, 2], 1 + 0.9 * 2 + 0.81 * 20),  # starting an episode: the same
    ([M, L, F], [1, 0, 1], [1, 5], 1.0),  # terminated at step 1: no bootstrap, step 2 unread
    ([M, L, F], [1, 1, 1], [1, 5], 1 + 0.9 * 10),  # truncated at step 1: bootstrap from it
    ([M, M, L], [1, 1, 0], [1, 2], 1 + 0.9 * 2),  # terminated at step 2
    ([M, M, L], [1, 1, 1], [1, 2], 1 + 0.9 * 2 + 0.81 * 20),  # truncated at step 2
    ([L, F, M], [0, 1, 1], [0, 2], 0.0),  # the first step is LAST: no transition at all
]


def _windows() -> tuple[torch.Tensor, ...]:
    step_type = torch.tensor([w[0] for w in WINDOWS])
    discount = torch.tensor([w[1] for w in WINDOWS], dtype=torch.float32)
    reward = torch.tensor([[999.0, *w[2]] for w in WINDOWS])
    expected = torch.tensor([w[3] for w in WINDOWS])
    return reward, discount, step_type, expected


def test_n_step_targets_by_hand_at_terminations_and_truncations():
    reward, discount, step_type, expected = _windows()
    next_value = torch.tensor([[10.0, 20.0]]).expand(len(WINDOWS), 2)
    targets = n_step_targets(reward, discount, step_type, next_value, gamma=0.9, n_step=2)
    assert torch.allclose(targets, expected), (targets, expected)


def test_one_step_targets_by_hand():
    step_type = torch.tensor([[M, M], [M, L], [M, L], [L, F]])
    discount = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    reward = torch.tensor([[9.0, 1.0], [9.0, 1.0], [9.0, 1.0], [9.0, 1.0]])
    next_value = torch.full((4, 1), 5.0)
    targets = n_step_targets(reward, discount, step_type, next_value, gamma=0.5, n_step=1)
    assert targets.tolist() == [3.5, 1.0, 3.5, 0.0]


def test_double_q_values_the_online_choice_with_the_target_network():
    target_q = torch.tensor([[5.0, -10.0], [1.0, 2.0]])
    online_q = torch.tensor([[0.0, 3.0], [7.0, 1.0]])
    assert bootstrap_value(target_q).tolist() == [5.0, 2.0]  # max over the target's own values
    assert bootstrap_value(target_q, online_q).tolist() == [-10.0, 1.0]
    assert bootstrap_value(target_q.expand(3, 2, 2), online_q.expand(3, 2, 2)).shape == (3, 2)


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
def test_the_loss_weights_each_transition_and_ignores_invalid_ones(td_loss):
    info = {
        "q_value": torch.tensor([1.0, 0.0, 4.0, 100.0], requires_grad=True),
        "target": torch.tensor([1.5, 3.0, 4.0, 0.0]),
        "weights": torch.tensor([1.0, 0.5, 1.0, 1.0]),
        "valid": torch.tensor([True, True, True, False]),
    }
    loss = DQNLoss(DQNConfig(td_loss=td_loss))(info)
    if td_loss == "huber":  # 0.5 x^2 below delta = 1, |x| - 0.5 above
        per_step = [0.5 * 0.25, 0.5 * (3 - 0.5), 0.0]
    else:
        per_step = [0.5 * 0.25, 0.5 * 0.5 * 9, 0.0]
    assert loss.loss.item() == pytest.approx(sum(per_step) / 3)
    assert loss.extra["train/td_error"].item() == pytest.approx((0.5 + 3.0) / 3)
    loss.loss.backward()
    assert info["q_value"].grad[3] == 0, "a window starting at a LAST has no transition"
