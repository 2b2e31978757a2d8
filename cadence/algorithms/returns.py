"""Pure return and advantage functions over an unroll (TorchRL-style, no state).

Layout: every function takes tensors of one shape with time along ``time_dim``
(default 0, time-major ``[T, B]`` as an on-policy unroll stores them; pass
``time_dim=1`` for batch-major replay windows ``[B, L]``). Any further dims are
batch dims too (e.g. ``[T, B, E]`` for an ensemble's values).

Alignment: index ``t`` holds time step ``t``'s ``step_type``, ``reward`` (r_t,
earned by the action taken at ``t - 1``), ``discount`` (the 0/1 continuation
flag of step ``t``) and ``value`` (the estimate for observation ``t``). The
result for step ``t`` — the action ``a_t`` taken there — uses ``reward[t + 1]``,
``discount[t + 1]`` and ``value[t + 1]``, following DESIGN §2:

- bootstrap from step ``t + 1`` with ``gamma * discount[t + 1] * value[t + 1]``:
  a terminal LAST (discount 0) stops it, a time-limit LAST (discount 1) does not;
- never across an episode boundary: when step ``t`` is LAST, ``a_t`` was ignored
  by the auto-reset, so step ``t``'s result is 0 and no earlier step looks past it.

The last step of the unroll has no successor inside it, so every function
returns results for steps ``0 .. T - 2``: ``[T - 1, B]`` (``[B, L - 1]``).
Bootstrapping at the unroll's end uses ``value[T - 1]``.

All functions are differentiable in ``reward`` and ``value`` (Dreamer backs
its actor loss through λ-returns); callers that want fixed targets pass
detached values or call them under ``torch.no_grad()``.
"""

from __future__ import annotations

import torch

from cadence.data.time_step import StepType


def discounted_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    time_dim: int = 0,
) -> torch.Tensor:
    """Monte-Carlo returns within the unroll, bootstrapped where the unroll or a
    time limit cuts the episode.

    ``G_t = r_{t+1} + gamma * d_{t+1} * G_{t+1}``, where ``G_{t+1}`` is replaced
    by ``V_{t+1}`` when step ``t + 1`` is LAST or the unroll's last step.

    Args:
        reward: ``[T, B]`` rewards, ``reward[t]`` earned by the action at ``t - 1``.
        discount: ``[T, B]`` 0/1 continuation flags.
        step_type: ``[T, B]`` `StepType` values.
        value: ``[T, B]`` value estimates of each step's observation.
        gamma: the discount factor.
        time_dim: the time dimension (0: ``[T, B]``; 1: ``[B, T]``).

    Returns:
        ``[T - 1, B]`` returns of the actions taken at steps ``0 .. T - 2``; 0
        where that step is LAST.

    >>> discounted_return(torch.ones(3, 1), torch.ones(3, 1), torch.ones(3, 1), torch.zeros(3, 1), 0.5)
    tensor([[1.5000],
            [1.0000]])
    """
    return td_lambda_return(reward, discount, step_type, value, gamma, 1.0, time_dim)


def generalized_advantage_estimation(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    time_dim: int = 0,
) -> torch.Tensor:
    """GAE advantages (Schulman et al. 2016, https://arxiv.org/abs/1506.02438, eq. 16).

    ``A_t = delta_t + gamma * lambda * d_{t+1} * A_{t+1}`` with
    ``delta_t = r_{t+1} + gamma * d_{t+1} * V_{t+1} - V_t``; the recursion stops
    where step ``t + 1`` is LAST (its action belongs to no episode).

    Args:
        reward: ``[T, B]`` rewards, aligned as in the module docstring.
        discount: ``[T, B]`` 0/1 continuation flags.
        step_type: ``[T, B]`` `StepType` values.
        value: ``[T, B]`` value estimates.
        gamma: the discount factor.
        gae_lambda: the bias-variance trade-off (0: one-step TD error, 1: Monte
            Carlo return minus value).
        time_dim: the time dimension (0: ``[T, B]``; 1: ``[B, T]``).

    Returns:
        ``[T - 1, B]`` advantages of the actions taken at steps ``0 .. T - 2``;
        0 where that step is LAST.
    """
    tensors = _time_major(reward, discount, step_type, value, time_dim=time_dim)
    reward, discount, step_type, value = tensors
    valid, next_discount, continues = _boundaries(discount, step_type, gamma, value.dtype)
    delta = reward[1:] + next_discount * value[1:] - value[:-1]
    decay = next_discount * gae_lambda * continues
    advantage = _reverse_scan(delta * valid, decay)
    return advantage.movedim(0, time_dim)


def td_lambda_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    lambda_: float,
    time_dim: int = 0,
) -> torch.Tensor:
    """TD(λ) returns (Sutton & Barto 2018, §12.1, the recursive form of eq. 12.3).

    ``G_t = r_{t+1} + gamma * d_{t+1} * ((1 - λ) V_{t+1} + λ G_{t+1})``, where
    ``G_{t+1}`` is replaced by ``V_{t+1}`` when step ``t + 1`` is LAST or the
    unroll's last step. Equals ``generalized_advantage_estimation(...) + value[:-1]``
    on every step that is not LAST, so ``λ = 1`` gives `discounted_return` and
    ``λ = 0`` one-step TD targets.

    Args:
        reward: ``[T, B]`` rewards, aligned as in the module docstring.
        discount: ``[T, B]`` 0/1 continuation flags.
        step_type: ``[T, B]`` `StepType` values.
        value: ``[T, B]`` value estimates.
        gamma: the discount factor.
        lambda_: the mixing of n-step returns (0: one-step, 1: Monte Carlo).
        time_dim: the time dimension (0: ``[T, B]``; 1: ``[B, T]``).

    Returns:
        ``[T - 1, B]`` returns of the actions taken at steps ``0 .. T - 2``; 0
        where that step is LAST.
    """
    tensors = _time_major(reward, discount, step_type, value, time_dim=time_dim)
    reward, discount, step_type, value = tensors
    valid, next_discount, continues = _boundaries(discount, step_type, gamma, value.dtype)
    # Where the recursion stops, G_{t+1} is V_{t+1}: all of it, not (1 - λ) of it.
    bootstrap = next_discount * value[1:] * (1 - lambda_ * continues)
    decay = next_discount * lambda_ * continues
    returns = _reverse_scan((reward[1:] + bootstrap) * valid, decay)
    return returns.movedim(0, time_dim)


def n_step_return(
    reward: torch.Tensor,
    discount: torch.Tensor,
    step_type: torch.Tensor,
    value: torch.Tensor,
    gamma: float,
    n: int,
    time_dim: int = 0,
) -> torch.Tensor:
    """n-step bootstrapped targets for every step (Sutton & Barto 2018, §7.1), as
    DQN (with ``value = max_a Q_target``) and SAC/TD3 (with the target critic's
    soft value) use on replay.

    ``G_t = sum_{k=1..m} gamma^{k-1} (prod_{j<k} d_{t+j}) r_{t+k}
    + gamma^m (prod_{j<=m} d_{t+j}) V_{t+m}`` with ``m = n``, shortened to the
    first LAST after ``t`` (a terminal one adds no bootstrap, a time-limit one
    bootstraps from its own value) and to the unroll's last step.

    For a replay window ``[B, n + 1]`` sampled by a uniform sampler, the target
    of its first step is ``n_step_return(..., n, time_dim=1)[:, 0]``.

    Args:
        reward: ``[T, B]`` rewards, aligned as in the module docstring.
        discount: ``[T, B]`` 0/1 continuation flags.
        step_type: ``[T, B]`` `StepType` values.
        value: ``[T, B]`` values; ``value[t]`` is the bootstrap value of observation ``t``.
        gamma: the discount factor.
        n: the number of rewards summed before bootstrapping, ``>= 1``.
        time_dim: the time dimension (0: ``[T, B]``; 1: ``[B, T]``, replay windows).

    Returns:
        ``[T - 1, B]`` targets of the actions taken at steps ``0 .. T - 2``; 0
        where that step is LAST.

    Raises:
        ValueError: if ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    tensors = _time_major(reward, discount, step_type, value, time_dim=time_dim)
    reward, discount, step_type, value = tensors
    length = reward.shape[0] - 1
    n = min(n, length)
    # Pad by n so that step t + k is a plain slice; padding is never read
    # because every step ends by t + k = T - 1.
    reward, discount, value = (_pad(x, n, 0) for x in (reward, discount.to(value.dtype), value))
    is_last = _pad(step_type == StepType.LAST, n, True)
    position = torch.arange(length, device=value.device).view(-1, *([1] * (value.dim() - 1)))
    result = torch.zeros_like(value[:length])
    scale = torch.ones_like(result)  # gamma^k * prod(discounts) so far
    alive = ~is_last[:length]
    for k in range(1, n + 1):
        result = result + torch.where(alive, scale * reward[k : k + length], 0.0)
        scale = scale * gamma * discount[k : k + length]
        ended = alive & (is_last[k : k + length] | (k == n) | (position + k == length))
        result = result + torch.where(ended, scale * value[k : k + length], 0.0)
        alive = alive & ~ended
    return result.movedim(0, time_dim)


def _time_major(*tensors: torch.Tensor, time_dim: int) -> tuple[torch.Tensor, ...]:
    """The tensors with time first, after checking they share one shape with ``T >= 2``."""
    shape = tensors[0].shape
    for name, tensor in zip(("discount", "step_type", "value"), tensors[1:], strict=True):
        if tensor.shape != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, reward {tuple(shape)}")
    if shape[time_dim] < 2:
        raise ValueError(f"need at least 2 time steps along dim {time_dim}, got {tuple(shape)}")
    return tuple(tensor.movedim(time_dim, 0) for tensor in tensors)


def _boundaries(
    discount: torch.Tensor, step_type: torch.Tensor, gamma: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Masks of the recursion, each ``[T - 1, B]`` in ``dtype``.

    Returns:
        ``valid``: step t is not LAST (its action counts);
        ``next_discount``: ``gamma * discount[t + 1]``;
        ``continues``: step t + 1 is neither LAST nor the unroll's last step, so
        the recursion may read step t + 1's result.
    """
    is_last = step_type == StepType.LAST
    valid = (~is_last[:-1]).to(dtype)
    continues = ~is_last[1:]
    continues[-1] = False
    return valid, gamma * discount[1:].to(dtype), continues.to(dtype) * valid


def _reverse_scan(x: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """``out[t] = x[t] + decay[t] * out[t + 1]`` with ``out[T] = 0``, over dim 0.

    Built by stacking rather than writing in place, so gradients flow.
    """
    running = torch.zeros_like(x[0])
    outputs = []
    for t in range(x.shape[0] - 1, -1, -1):
        running = x[t] + decay[t] * running
        outputs.append(running)
    return torch.stack(outputs[::-1])


def _pad(x: torch.Tensor, n: int, fill: float | bool) -> torch.Tensor:
    """``x`` with ``n`` steps of ``fill`` appended along dim 0."""
    return torch.cat([x, x.new_full((n, *x.shape[1:]), fill)])
