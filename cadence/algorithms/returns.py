"""Pure return and advantage functions, time-major ``[T + 1, B]`` (TorchRL-style).

Inputs are an unroll as cadence stores it: index ``t`` holds time step ``t``'s
``step_type``, ``reward`` (r_t, earned by the action taken at ``t - 1``),
``discount`` (the 0/1 continuation flag of step ``t``) and ``value`` (the
estimate for observation ``t``). The quantity for step ``t`` — the action
``a_t`` taken there — uses ``reward[t + 1]``, ``discount[t + 1]`` and
``value[t + 1]``, following the discount table of DESIGN §2:

- bootstrap from step ``t + 1`` with ``gamma * discount[t + 1] * value[t + 1]``:
  a terminal LAST (discount 0) stops it, a time-limit LAST (discount 1) does not;
- never across an episode boundary: when step ``t`` is LAST, ``a_t`` was ignored
  by the auto-reset, so step ``t``'s result is 0 and the recursion is cut there.

The last step has no successor inside the unroll, so every function returns
``[T, B]`` results for steps ``0 .. T - 1``.
"""

from __future__ import annotations

import torch

from cadence.data.time_step import StepType


def _one_step(reward: torch.Tensor, discount: torch.Tensor, step_type: torch.Tensor, gamma: float):
    """The pieces every recursion shares, each ``[T, B]``."""
    next_discount = gamma * discount[1:].to(reward.dtype)
    # 0 where step t is LAST (its action was ignored) or step t+1 is LAST (the
    # recursion must not continue into the next episode beyond t+1).
    is_last = step_type[:-1] == StepType.LAST
    continues = (step_type[1:] != StepType.LAST) & ~is_last
    return reward[1:], next_discount, is_last, continues


def discounted_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Monte-Carlo returns within the unroll, bootstrapping from ``value`` at its end
    and at time-limit truncations.

    Args:
        reward, discount, step_type, value: ``[T + 1, B]``.
        gamma: the discount factor.

    Returns:
        ``[T, B]``: the return of the action taken at each step (0 after a LAST).
    """
    return td_lambda_return(reward, discount, step_type, value, gamma, 1.0)


def generalized_advantage_estimation(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """GAE advantages (Schulman et al. 2016, https://arxiv.org/abs/1506.02438, eq. 16).

    ``A_t = delta_t + gamma * lambda * d_{t+1} * A_{t+1}`` with
    ``delta_t = r_{t+1} + gamma * d_{t+1} * V_{t+1} - V_t``; the recursion is cut
    where step ``t + 1`` is LAST (its own action belongs to no episode).

    Args:
        reward, discount, step_type, value: ``[T + 1, B]``.
        gamma: the discount factor.
        gae_lambda: the bias-variance trade-off (0: one-step TD, 1: Monte Carlo).

    Returns:
        ``[T, B]`` advantages; 0 where step ``t`` is LAST.
    """
    next_reward, next_discount, is_last, continues = _one_step(reward, discount, step_type, gamma)
    delta = next_reward + next_discount * value[1:] - value[:-1]
    decay = next_discount * gae_lambda * continues.to(value.dtype)
    advantage = torch.zeros_like(delta)
    running = torch.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        running = delta[t] + decay[t] * running
        advantage[t] = running
    return advantage.masked_fill(is_last, 0.0)


def td_lambda_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    """TD(λ) returns (Sutton & Barto 2018, §12.1): ``GAE + value``, so that
    ``lambda_ = 1`` gives Monte-Carlo returns and ``lambda_ = 0`` one-step targets.

    Returns:
        ``[T, B]``; 0 where step ``t`` is LAST.
    """
    advantage = generalized_advantage_estimation(reward, discount, step_type, value, gamma, lambda_)
    is_last = step_type[:-1] == StepType.LAST
    return (advantage + value[:-1]).masked_fill(is_last, 0.0)


def n_step_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """The n-step target of the first step of batch-major windows ``[B, n + 1]``.

    ``G = sum_{k<n} gamma^k r_{k+1} (while the episode lasts) + gamma^n V_n``, cut
    at the first LAST inside the window: a terminal LAST adds no bootstrap, a
    time-limit LAST bootstraps from its own value. Used by DQN and SAC on replay
    windows of length ``n + 1``.

    Args:
        reward, discount, step_type: ``[B, n + 1]``, a replay window.
        value: ``[B, n + 1]``, the bootstrap value of each step of the window
            (only the first LAST's, or the last step's, is used).
        gamma: the discount factor.

    Returns:
        ``[B]`` targets for the action taken at the window's first step.
    """
    steps = reward.shape[1] - 1
    ret = torch.zeros_like(reward[:, 0])
    scale = torch.ones_like(ret)  # gamma^k * prod(discounts) while the episode lasts
    alive = step_type[:, 0] != StepType.LAST
    for k in range(1, steps + 1):
        ret = ret + torch.where(alive, scale * reward[:, k], 0.0)
        scale = scale * gamma * discount[:, k].to(ret.dtype)
        ended = alive & ((step_type[:, k] == StepType.LAST) | (k == steps))
        ret = ret + torch.where(ended, scale * value[:, k], 0.0)
        alive = alive & ~ended
    return ret
