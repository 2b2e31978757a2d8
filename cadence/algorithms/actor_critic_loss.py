"""The terms the actor-critic losses (`A2CLoss`, `PPOLoss`) share, as pure tensor functions.

Both losses normalise the advantages the same way and weigh the same three terms into
their total, ``policy + vf_coef * value - ent_coef * entropy`` (Mnih et al. 2016,
https://arxiv.org/abs/1602.01783; Schulman et al. 2017, https://arxiv.org/abs/1707.06347,
eq. 9). What differs stays in each loss: the policy term (plain policy gradient against the
clipped surrogate) and the value term (A2C's squared error against PPO's half squared
error, optionally clipped).

Under several ranks (docs/ddp.md) ``count`` is the number of samples over all ranks
(`cadence.data.distributed.sample_count`) and every mean is over all of them; in one
process it is None.
"""

from __future__ import annotations

import torch

from cadence.data import distributed


def normalize_advantages(advantage: torch.Tensor, count: int | None) -> torch.Tensor:
    """The advantages ``[N]`` shifted to mean 0 and scaled to std 1 (plus 1e-8).

    One sample (over all ranks) has no spread to scale by: it is returned unchanged.
    """
    num_samples = advantage.numel() if count is None else count
    if num_samples <= 1:
        return advantage
    advantage_mean, advantage_std = distributed.mean_std(advantage, count)
    return (advantage - advantage_mean) / (advantage_std + 1e-8)


def weighted_terms(
    policy_loss: torch.Tensor,
    value_loss: torch.Tensor,
    entropy: torch.Tensor,
    vf_coef: float,
    ent_coef: float,
) -> dict[str, torch.Tensor]:
    """The named loss terms, each already weighted; the total loss is their sum.

    Args:
        policy_loss: the policy term, a scalar.
        value_loss: the unweighted value term, a scalar.
        entropy: the mean policy entropy, a scalar (a bonus: its term is negative).
        vf_coef: the weight of the value term.
        ent_coef: the weight of the entropy bonus.

    Returns:
        ``loss/policy``, ``loss/value`` and ``loss/entropy``, in the order they are summed.
    """
    return {
        "loss/policy": policy_loss,
        "loss/value": vf_coef * value_loss,
        "loss/entropy": -ent_coef * entropy,
    }
