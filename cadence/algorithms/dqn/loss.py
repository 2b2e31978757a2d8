"""DQN targets and loss: double-Q bootstrap values, n-step targets, weighted TD loss.

- Mnih et al. 2015, "Human-level control through deep reinforcement learning",
  https://www.nature.com/articles/nature14236 (target network, Huber loss).
- van Hasselt et al. 2016, "Deep Reinforcement Learning with Double Q-learning",
  https://arxiv.org/abs/1509.06461 (eq. 4: the online network picks, the target values).
- Schaul et al. 2016, "Prioritized Experience Replay", https://arxiv.org/abs/1511.05952
  (importance weights on the loss, |TD error| as the new priority).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cadence.algorithms.algorithm import LossInfo
from cadence.algorithms.dqn.config import DQNConfig
from cadence.algorithms.returns import n_step_return
from cadence.data.time_step import StepType


def bootstrap_value(target_q: torch.Tensor, online_q: torch.Tensor | None = None) -> torch.Tensor:
    """The value of the greedy action: ``max_a Q_target`` or, with ``online_q``, double Q.

    Args:
        target_q: ``[*B, A]`` the target network's action values.
        online_q: ``[*B, A]`` the online network's action values (double Q picks
            ``argmax_a Q_online`` and values it with ``Q_target``), or None.

    Returns:
        ``[*B]`` bootstrap values.

    >>> bootstrap_value(torch.tensor([[1.0, 5.0]]), torch.tensor([[3.0, 0.0]]))
    tensor([1.])
    """
    if online_q is None:
        return target_q.max(dim=-1).values
    greedy = online_q.argmax(dim=-1, keepdim=True)
    return target_q.gather(-1, greedy).squeeze(-1)


def n_step_targets(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    n_step: int,
) -> torch.Tensor:
    """n-step TD targets of the first step of each replay window ``[N, n_step + 1]``.

    ``G = sum_{k=1..m} gamma^(k-1) r_k + gamma^m d V_m``, shortened at the first
    LAST: a terminal one (discount 0) adds no bootstrap, a time-limit one
    bootstraps from its own value; nothing past it is read (`n_step_return`).

    Args:
        reward: ``[N, L]`` the window's rewards (DESIGN §2).
        discount: ``[N, L]`` the window's 0/1 continuation flags.
        step_type: ``[N, L]`` the window's step types.
        next_value: ``[N, L - 1]`` bootstrap values of steps ``1 .. L - 1``.
        gamma: the discount factor.
        n_step: rewards summed before bootstrapping (``L - 1``).

    Returns:
        ``[N]`` targets; 0 where the window's first step is LAST (no transition).
    """
    value = torch.cat([torch.zeros_like(next_value[:, :1]), next_value], dim=1)
    returns = n_step_return(reward, discount, step_type, value, gamma, n_step, time_dim=1)
    return returns[:, 0]


class DQNLoss:
    """The importance-weighted Huber (or squared) TD loss over valid transitions.

    ``info`` holds ``[N]`` tensors: ``q_value`` (online Q of the action taken),
    ``target`` (fixed n-step targets), ``weights`` (importance weights) and
    ``valid`` (the window's first step is not LAST: its action was never taken).
    """

    def __init__(self, config: DQNConfig):
        self.config = config

    def __call__(self, info: dict[str, torch.Tensor]) -> LossInfo:
        td_error = info["q_value"] - info["target"]
        if self.config.td_loss == "huber":
            elementwise = F.huber_loss(
                info["q_value"], info["target"], reduction="none", delta=self.config.huber_delta
            )
        else:
            elementwise = 0.5 * td_error**2
        valid = info["valid"].to(elementwise.dtype)
        loss = (info["weights"] * valid * elementwise).sum() / valid.sum().clamp(min=1.0)
        with torch.no_grad():
            extra = {
                "loss/td": loss.detach(),
                "train/q_value": info["q_value"].mean(),
                "train/td_error": (td_error.abs() * valid).sum() / valid.sum().clamp(min=1.0),
            }
        return LossInfo(loss, extra)


def first_step_is_transition(step_type: torch.Tensor) -> torch.Tensor:
    """``[N]``: whether each window's first step has an action that was taken (not LAST)."""
    return step_type[:, 0] != StepType.LAST
