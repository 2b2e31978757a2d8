"""The PPO loss (Schulman et al. 2017, https://arxiv.org/abs/1707.06347, eq. 7 and 9)."""

from __future__ import annotations

import torch

from cadence.algorithms.algorithm import LossInfo
from cadence.algorithms.ppo.config import PPOConfig


class PPOLoss:
    """Clipped surrogate objective, (optionally clipped) value loss and entropy bonus.

    ``info`` holds ``[N]`` tensors: ``log_prob`` (current policy), ``old_log_prob``,
    ``advantage``, ``return``, ``value`` (current), ``old_value`` and ``entropy``.
    """

    def __init__(self, config: PPOConfig):
        self.config = config

    def __call__(self, info: dict[str, torch.Tensor]) -> LossInfo:
        config = self.config
        advantage = info["advantage"]
        if config.normalize_advantages and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        log_ratio = info["log_prob"] - info["old_log_prob"]
        ratio = log_ratio.exp()
        clipped_ratio = ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)
        policy_loss = torch.maximum(-advantage * ratio, -advantage * clipped_ratio).mean()
        value_loss = self._value_loss(info)
        entropy = info["entropy"].mean()
        terms = {
            "loss/policy": policy_loss,
            "loss/value": config.vf_coef * value_loss,
            "loss/entropy": -config.ent_coef * entropy,
        }
        with torch.no_grad():
            extra = {
                "train/entropy": entropy,
                # The low-variance KL estimator of http://joschu.net/blog/kl-approx.html.
                "train/approx_kl": ((ratio - 1) - log_ratio).mean(),
                "train/clip_fraction": ((ratio - 1).abs() > config.clip_coef).float().mean(),
                "train/value_error": value_loss,
            }
        return LossInfo(sum(terms.values()), {**terms, **extra})

    def _value_loss(self, info: dict[str, torch.Tensor]) -> torch.Tensor:
        value, target = info["value"], info["return"]
        unclipped = (value - target) ** 2
        if not self.config.clip_value_loss:
            return 0.5 * unclipped.mean()
        old_value = info["old_value"]
        clipped_value = old_value + (value - old_value).clamp(
            -self.config.clip_coef, self.config.clip_coef
        )
        return 0.5 * torch.maximum(unclipped, (clipped_value - target) ** 2).mean()
