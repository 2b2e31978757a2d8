"""The A2C loss (Mnih et al. 2016, https://arxiv.org/abs/1602.01783, algorithm S3)."""

from __future__ import annotations

import torch

from cadence.algorithms.a2c.config import A2CConfig
from cadence.algorithms.actor_critic_loss import normalize_advantages, weighted_terms
from cadence.algorithms.algorithm import LossInfo
from cadence.data import distributed


class A2CLoss:
    """Policy gradient with an advantage baseline, value regression and entropy bonus.

    ``info`` holds ``[N]`` tensors: ``log_prob``, ``advantage``, ``return``,
    ``value`` and ``entropy``.

    Under several ranks (docs/ddp.md) every mean, and the advantage's mean and std, is
    over all ranks' samples (`cadence.data.distributed`).
    """

    def __init__(self, config: A2CConfig):
        self.config = config

    def __call__(self, info: dict[str, torch.Tensor]) -> LossInfo:
        config = self.config
        advantage = info["advantage"]
        count = distributed.sample_count(advantage)  # None in one process
        if config.normalize_advantages:
            advantage = normalize_advantages(advantage, count)
        policy_loss = -distributed.mean(advantage * info["log_prob"], count)
        value_loss = distributed.mean((info["return"] - info["value"]) ** 2, count)
        entropy = distributed.mean(info["entropy"], count)
        terms = weighted_terms(policy_loss, value_loss, entropy, config.vf_coef, config.ent_coef)
        extra = {"train/entropy": entropy.detach(), "train/value_error": value_loss.detach()}
        return LossInfo(sum(terms.values()), {**terms, **extra})
