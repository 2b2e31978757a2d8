"""Projection heads: features ``[B, D]`` to an action distribution.

Every distribution returned has ``log_prob(action) -> [B]``, ``entropy() -> [B]``
(estimated for tanh-squashed ones), ``sample()`` and ``mode`` (the action to take
when acting deterministically).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.distributions import (
    AffineTransform,
    Categorical,
    Distribution,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, Spec, TensorSpec
from cadence.networks.mlp import _linear


class CategoricalHead(nn.Module):
    """Logits of ``num_actions`` discrete actions (init gain 0.01: a near-uniform start)."""

    def __init__(self, in_dim: int, num_actions: int):
        super().__init__()
        self.logits = _linear(in_dim, num_actions, gain=0.01)

    def forward(self, features: torch.Tensor) -> Categorical:
        return Categorical(logits=self.logits(features))


class NormalHead(nn.Module):
    """A diagonal Gaussian with a state-independent, learned log standard deviation."""

    def __init__(self, in_dim: int, action_dim: int, init_log_std: float = 0.0):
        super().__init__()
        self.mean = _linear(in_dim, action_dim, gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, features: torch.Tensor) -> Distribution:
        mean = self.mean(features)
        return Independent(Normal(mean, self.log_std.exp().expand_as(mean)), 1)


class TanhNormal(TransformedDistribution):
    """A Gaussian squashed by tanh and scaled to ``[low, high]`` (Haarnoja et al. 2018, App. C).

    ``log_prob`` includes the log-determinant of the squashing (torch's
    numerically stable ``2 * (log 2 - x - softplus(-2x))`` form).
    """

    def __init__(
        self, mean: torch.Tensor, std: torch.Tensor, low: torch.Tensor, high: torch.Tensor
    ):
        scale = (high - low) / 2
        super().__init__(
            Independent(Normal(mean, std), 1),
            [
                TanhTransform(cache_size=1),
                AffineTransform(low + scale, scale, event_dim=1, cache_size=1),
            ],
        )

    @property
    def mode(self) -> torch.Tensor:
        value = self.base_dist.mean
        for transform in self.transforms:
            value = transform(value)
        return value

    def entropy(self) -> torch.Tensor:
        """A one-sample estimate (there is no closed form)."""
        return -self.log_prob(self.rsample())


class TanhNormalHead(nn.Module):
    """A state-dependent tanh-squashed Gaussian over a bounded action spec (as in SAC)."""

    def __init__(
        self, in_dim: int, spec: BoundedTensorSpec, log_std_range: tuple[float, float] = (-5.0, 2.0)
    ):
        super().__init__()
        action_dim = int(torch.Size(spec.shape).numel())
        self.projection = _linear(in_dim, 2 * action_dim, gain=0.01)
        self.log_std_range = log_std_range
        self.register_buffer(
            "low", torch.as_tensor(spec.minimum, dtype=torch.float32), persistent=False
        )
        self.register_buffer(
            "high", torch.as_tensor(spec.maximum, dtype=torch.float32), persistent=False
        )

    def forward(self, features: torch.Tensor) -> TanhNormal:
        mean, log_std = self.projection(features).chunk(2, dim=-1)
        low, high = self.log_std_range
        log_std = low + 0.5 * (high - low) * (torch.tanh(log_std) + 1)  # smooth clamp
        return TanhNormal(mean, log_std.exp(), self.low, self.high)


def make_action_head(
    in_dim: int,
    action_spec: Spec,
    kind: Literal["normal", "tanh_normal"] = "normal",
    init_log_std: float = 0.0,
) -> nn.Module:
    """The head for ``action_spec``: categorical for a scalar discrete spec, else ``kind``.

    Raises:
        TypeError: for action specs no head handles (Dict actions, multi-discrete).
    """
    if isinstance(action_spec, DiscreteTensorSpec):
        if action_spec.shape != ():
            raise TypeError(
                f"only scalar discrete actions are supported, not shape {action_spec.shape}"
            )
        return CategoricalHead(in_dim, action_spec.num_values)
    if not isinstance(action_spec, TensorSpec) or len(action_spec.shape) != 1:
        raise TypeError(
            f"no action head for {action_spec!r}: use a flat Box or a Discrete action space"
        )
    if kind == "tanh_normal":
        if not isinstance(action_spec, BoundedTensorSpec):
            raise TypeError("a tanh_normal head needs bounded actions")
        return TanhNormalHead(in_dim, action_spec)
    return NormalHead(in_dim, action_spec.shape[0], init_log_std)
