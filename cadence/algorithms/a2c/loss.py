"""The A2C loss (Mnih et al. 2016, https://arxiv.org/abs/1602.01783, algorithm S3)."""

from __future__ import annotations

import torch

from cadence.algorithms.a2c.config import A2CConfig
from cadence.algorithms.algorithm import LossInfo


class A2CLoss:
    """Policy gradient with an advantage baseline, value regression and entropy bonus.

    ``info`` holds ``[N]`` tensors: ``log_prob``, ``advantage``, ``return``,
    ``value`` and ``entropy``.
    """

    def __init__(self, config: A2CConfig):
        self.config = config

    def __call__(self, info: dict[str, torch.Tensor]) -> LossInfo:
        config = self.config
        advantage = info["advantage"]
        if config.normalize_advantages and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        policy_loss = -(advantage * info["log_prob"]).mean()
        value_loss = ((info["return"] - info["value"]) ** 2).mean()
        entropy = info["entropy"].mean()
        terms = {
            "loss/policy": policy_loss,
            "loss/value": config.vf_coef * value_loss,
            "loss/entropy": -config.ent_coef * entropy,
        }
        extra = {"train/entropy": entropy.detach(), "train/value_error": value_loss.detach()}
        return LossInfo(sum(terms.values()), {**terms, **extra})
