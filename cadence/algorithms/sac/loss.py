"""SAC's losses as pure tensor functions (Haarnoja et al. 2018, https://arxiv.org/abs/1812.05905,
eq. 5, 7 and 18; discrete actions: Christodoulou 2019, https://arxiv.org/abs/1910.07207, eq. 9-12).

Every loss is a weighted mean over the ``[N]`` samples of a minibatch: the weight is 0
for a transition that crosses an episode boundary (its first step is LAST) and the
importance weight otherwise, normalised by the number of valid samples (as DQN and TD3
do), so that importance weights scale each sample's gradient without rescaling the loss.
"""

from __future__ import annotations

import torch


def soft_td_target(
    reward: torch.Tensor, discount: torch.Tensor, next_value: torch.Tensor, gamma: float
) -> torch.Tensor:
    """``r + gamma * discount * V(s')``, all ``[N]``.

    ``discount`` is the environment's continuation flag (DESIGN §2): 0 after a terminal
    LAST, so the target is the reward alone; 1 after a time-limit LAST, which bootstraps.
    """
    return reward + gamma * discount * next_value


def soft_value(q: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The soft value ``Q(s, a) - alpha * log pi(a|s)`` of a sampled action: ``[N]``."""
    return q - alpha * log_prob


def expected_soft_value(
    q: torch.Tensor, log_probs: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """Discrete actions: ``sum_a pi(a|s) (Q(s, a) - alpha * log pi(a|s))``; ``[N, A] -> [N]``."""
    return (log_probs.exp() * (q - alpha * log_probs)).sum(-1)


def weighted_mean(values: torch.Tensor, weight: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``sum(values * weight) / count`` over the samples (the last dim of ``values``)."""
    return (values * weight).sum(-1) / count


def critic_loss(
    q: torch.Tensor, target: torch.Tensor, weight: torch.Tensor, count: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Half the squared TD error of every critic, summed over critics, averaged over samples.

    Args:
        q: ``[E, N]`` each critic's value of the taken action.
        target: ``[N]`` the soft TD target (no gradient).
        weight: ``[N]`` per-sample weights (0 for masked samples).
        count: the number of valid samples (a scalar tensor, at least 1).

    Returns:
        the loss and the ``[N]`` mean absolute TD error over critics, masked samples
        included (the caller zeroes those before using it as priorities).
    """
    td_error = q - target
    loss = weighted_mean(0.5 * td_error.square(), weight, count).sum()
    return loss, td_error.abs().mean(0)


def actor_loss(
    log_prob: torch.Tensor,
    q: torch.Tensor,
    alpha: torch.Tensor,
    weight: torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    """``E[alpha * log pi(a|s) - min_e Q_e(s, a)]`` for reparameterised actions ``a ~ pi``.

    Args:
        log_prob: ``[N]`` log-density of the sampled actions.
        q: ``[N]`` the critics' minimum at those actions (critic parameters detached).
        alpha: the temperature (detached).
        weight, count: as for `critic_loss`.
    """
    return weighted_mean(alpha * log_prob - q, weight, count)


def discrete_actor_loss(
    log_probs: torch.Tensor,
    q: torch.Tensor,
    alpha: torch.Tensor,
    weight: torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    """``E_s[sum_a pi(a|s) (alpha * log pi(a|s) - min_e Q_e(s, a))]``; ``log_probs``, ``q`` ``[N, A]``."""
    return weighted_mean((log_probs.exp() * (alpha * log_probs - q)).sum(-1), weight, count)


def alpha_loss(
    log_alpha: torch.Tensor,
    log_prob: torch.Tensor,
    target_entropy: float,
    weight: torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    """``-log_alpha * (log pi + target_entropy)``: alpha grows while the entropy is below target.

    Args:
        log_alpha: the learned log temperature (scalar).
        log_prob: ``[N]`` (expected) log-probability of the policy's actions, detached.
        target_entropy: the entropy alpha aims at.
        weight, count: as for `critic_loss`.
    """
    return -log_alpha * weighted_mean(log_prob + target_entropy, weight, count)
