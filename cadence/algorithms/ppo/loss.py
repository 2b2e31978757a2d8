"""The PPO loss (Schulman et al. 2017, https://arxiv.org/abs/1707.06347, eq. 7 and 9)."""

from __future__ import annotations

import torch

from cadence.algorithms.actor_critic_loss import normalize_advantages, weighted_terms
from cadence.algorithms.algorithm import LossInfo
from cadence.algorithms.ppo.config import PPOConfig
from cadence.data import distributed


class PPOLoss:
    """Clipped surrogate objective, (optionally clipped) value loss and entropy bonus.

    ``info`` holds ``[N]`` tensors: ``log_prob`` (current policy), ``old_log_prob``,
    ``advantage``, ``return``, ``value`` (current), ``old_value`` and ``entropy``.

    Under several ranks (docs/ddp.md) every mean, and the advantage's mean and std, is
    over all ranks' samples of the minibatch (`cadence.data.distributed`).
    """

    def __init__(self, config: PPOConfig):
        self.config = config

    def __call__(self, info: dict[str, torch.Tensor]) -> LossInfo:
        config = self.config
        advantage = info["advantage"]
        count = distributed.sample_count(advantage)  # None in one process
        if config.normalize_advantages:
            advantage = normalize_advantages(advantage, count)
        log_ratio = info["log_prob"] - info["old_log_prob"]
        ratio = log_ratio.exp()
        clipped_ratio = ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)
        policy_loss = distributed.mean(
            torch.maximum(-advantage * ratio, -advantage * clipped_ratio), count
        )
        value_loss = self._value_loss(info, count)
        entropy = distributed.mean(info["entropy"], count)
        terms = weighted_terms(policy_loss, value_loss, entropy, config.vf_coef, config.ent_coef)
        with torch.no_grad():
            extra = {
                "train/entropy": entropy.detach(),
                # The low-variance KL estimator of http://joschu.net/blog/kl-approx.html.
                "train/approx_kl": distributed.mean((ratio - 1) - log_ratio, count),
                "train/clip_fraction": distributed.mean(
                    ((ratio - 1).abs() > config.clip_coef).float(), count
                ),
                "train/value_error": value_loss.detach(),
            }
        return LossInfo(sum(terms.values()), {**terms, **extra})

    def _value_loss(self, info: dict[str, torch.Tensor], count: int | None) -> torch.Tensor:
        value, target = info["value"], info["return"]
        unclipped = (value - target) ** 2
        if not self.config.clip_value_loss:
            return 0.5 * distributed.mean(unclipped, count)
        old_value = info["old_value"]
        clipped_value = old_value + (value - old_value).clamp(
            -self.config.clip_coef, self.config.clip_coef
        )
        return 0.5 * distributed.mean(
            torch.maximum(unclipped, (clipped_value - target) ** 2), count
        )
