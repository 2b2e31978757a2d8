"""TD3's target policy smoothing (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477, §5.3)."""

from __future__ import annotations

import torch


class TargetPolicySmoothing:
    """Clipped Gaussian noise on the target actor's actions: ``clip(a + clip(eps, -c, c), -1, 1)``.

    Fitting the critic to a small neighbourhood of the target action keeps it
    from exploiting narrow peaks of its own error. Actions are normalized to
    ``[-1, 1]``, so ``noise_std`` and ``noise_clip`` are fractions of half the range.

    Args:
        noise_std: std of ``eps ~ N(0, noise_std^2)``.
        noise_clip: ``eps`` is clipped to ``[-noise_clip, noise_clip]``.

    >>> smooth = TargetPolicySmoothing(noise_std=0.2, noise_clip=0.5)
    >>> bool((smooth(torch.zeros(1000, 2)).abs() <= 0.5).all())
    True
    """

    def __init__(self, noise_std: float, noise_clip: float):
        self.noise_std = noise_std
        self.noise_clip = noise_clip

    def __call__(self, action: torch.Tensor) -> torch.Tensor:
        """Smoothed actions ``[*B, A]`` of normalized actions ``[*B, A]``."""
        noise = (self.noise_std * torch.randn_like(action)).clamp(-self.noise_clip, self.noise_clip)
        return (action + noise).clamp(-1.0, 1.0)
