"""Projection heads: features ``[*B, D]`` to an action distribution.

Every distribution returned has ``sample()``, ``log_prob(action) -> [*B]``,
``entropy() -> [*B]`` (a one-sample estimate for `TanhNormal`) and ``mode``,
the action for deterministic evaluation: the argmax for `Categorical`, the mean
for a Normal, the squashed mean for `TanhNormal`. A Normal's samples and mode
are unbounded: clipping them to the action spec before the environment runs
them is the caller's job (the log-prob must stay that of the unclipped action).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Independent

from cadence.data.errors import UnsupportedSpaceError
from cadence.data.specs import (
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    Spec,
    TensorSpec,
)
from cadence.networks.distributions import (
    JointDistribution,
    LeanCategorical,
    LeanNormal,
    MultiCategorical,
    TanhNormal,
)
from cadence.networks.mlp import make_linear

POLICY_GAIN = 0.01
"""Orthogonal gain of policy projections: a near-uniform, near-zero-mean start
(Andrychowicz et al. 2021, https://arxiv.org/abs/2006.05990, §3.2)."""

LOG_STD_RANGE = (-5.0, 2.0)
"""Bounds of a state-dependent log standard deviation (as CleanRL's SAC)."""


class CategoricalHead(nn.Module):
    """Logits of ``num_actions`` discrete actions: ``[*B, in_dim] -> Categorical`` over ``[*B]``.

    >>> CategoricalHead(8, 3)(torch.zeros(4, 8)).mode.shape
    torch.Size([4])
    """

    def __init__(self, in_dim: int, num_actions: int):
        super().__init__()
        self.logits = make_linear(in_dim, num_actions, POLICY_GAIN)

    def forward(self, features: torch.Tensor) -> Categorical:
        # torch's Categorical costs more than the rest of a small policy's step (argument
        # checks, broadcasting); the logits come from a linear layer, never from a user.
        return LeanCategorical(self.logits(features))


class MultiCategoricalHead(nn.Module):
    """Logits of each dimension of a multi-discrete action (Gymnasium's ``MultiDiscrete``,
    ``MultiBinary``): ``[*B, in_dim] -> MultiCategorical`` over ``[*B, K]``.

    Args:
        in_dim: feature width.
        nvec: the number of values of each of the ``K`` dimensions.

    >>> MultiCategoricalHead(8, [3, 2])(torch.zeros(4, 8)).mode.shape
    torch.Size([4, 2])
    """

    def __init__(self, in_dim: int, nvec: Sequence[int]):
        super().__init__()
        nvec = [int(n) for n in nvec]
        self.shape = (len(nvec), max(nvec))
        self.logits = make_linear(in_dim, len(nvec) * max(nvec), POLICY_GAIN)
        values = torch.arange(max(nvec))
        invalid = values >= torch.tensor(nvec).unsqueeze(-1)
        self.register_buffer("invalid", invalid, persistent=False)

    def forward(self, features: torch.Tensor) -> MultiCategorical:
        logits = self.logits(features).unflatten(-1, self.shape)
        return MultiCategorical(logits.masked_fill(self.invalid, torch.finfo(logits.dtype).min))


class NormalHead(nn.Module):
    """A diagonal Gaussian over ``[*B, action_dim]``; ``log_prob`` sums over the action dims.

    Args:
        in_dim: feature width.
        action_dim: number of action dimensions.
        state_dependent_std: predict the log std from the features (bounded
            smoothly to `LOG_STD_RANGE`) instead of learning one per dimension
            (PPO's usual choice).
        init_log_std: the log std at initialisation.

    >>> NormalHead(8, 2)(torch.zeros(4, 8)).log_prob(torch.zeros(4, 2)).shape
    torch.Size([4])
    """

    def __init__(
        self,
        in_dim: int,
        action_dim: int,
        state_dependent_std: bool = False,
        init_log_std: float = 0.0,
    ):
        super().__init__()
        self.mean = make_linear(in_dim, action_dim, POLICY_GAIN)
        self.state_dependent_std = state_dependent_std
        if state_dependent_std:
            self.log_std = _log_std_projection(in_dim, action_dim, init_log_std)
        else:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, features: torch.Tensor) -> Independent:
        mean = self.mean(features)
        if self.state_dependent_std:
            log_std = _bounded_log_std(self.log_std(features))
        else:
            log_std = self.log_std.expand_as(mean)
        return Independent(LeanNormal(mean, log_std.exp()), 1, validate_args=False)


class TanhNormalHead(nn.Module):
    """A state-dependent `TanhNormal` over a bounded action spec (SAC's policy).

    Args:
        in_dim: feature width.
        action_spec: a 1-D `BoundedTensorSpec` with finite bounds.
        init_log_std: the log std of the pre-tanh Gaussian at initialisation.

    Raises:
        TypeError: if the spec is not 1-D with finite bounds.
    """

    def __init__(self, in_dim: int, action_spec: BoundedTensorSpec, init_log_std: float = 0.0):
        super().__init__()
        _check_bounded(action_spec)
        action_dim = action_spec.shape[0]
        self.mean = make_linear(in_dim, action_dim, POLICY_GAIN)
        self.log_std = _log_std_projection(in_dim, action_dim, init_log_std)
        for name in ("minimum", "maximum"):
            bound = torch.as_tensor(getattr(action_spec, name), dtype=torch.float32)
            self.register_buffer(name, bound, persistent=False)

    def forward(self, features: torch.Tensor) -> TanhNormal:
        # One matmul for both projections: for SAC's 256-wide features each skinny matmul
        # (and its two backward ones) costs more in call overhead than in arithmetic.
        weight = torch.cat([self.mean.weight, self.log_std.weight])
        bias = torch.cat([self.mean.bias, self.log_std.bias])
        mean, raw_log_std = F.linear(features, weight, bias).chunk(2, dim=-1)
        log_std = _bounded_log_std(raw_log_std)
        return TanhNormal(mean, log_std.exp(), self.minimum, self.maximum)


class CompositeHead(nn.Module):
    """One head per entry of a Dict or Tuple action (a `CompositeSpec`; a Tuple's entries
    are keyed ``"0"``, ``"1"``...), each the one `make_action_head` makes for that entry,
    all on the same features: ``[*B, in_dim] -> JointDistribution``.

    >>> spec = CompositeSpec({"move": DiscreteTensorSpec((), 3), "force": TensorSpec((2,))})
    >>> head = CompositeHead(8, spec)
    >>> {k: v.shape for k, v in head(torch.zeros(4, 8)).sample().items()}
    {'move': torch.Size([4]), 'force': torch.Size([4, 2])}
    """

    def __init__(
        self,
        in_dim: int,
        action_spec: CompositeSpec,
        kind: Literal["normal", "tanh_normal"] = "normal",
        init_log_std: float = 0.0,
        state_dependent_std: bool = False,
    ):
        super().__init__()
        unnamed = [key for key in action_spec if not key or "." in key]
        if unnamed or not action_spec:
            raise UnsupportedSpaceError(
                f"no action head for the Dict action {action_spec!r}: its keys must be "
                f"non-empty and free of '.' (got {unnamed}), and it must have one at least"
            )
        self.parts = nn.ModuleDict(
            {
                key: make_action_head(in_dim, spec, kind, init_log_std, state_dependent_std)
                for key, spec in action_spec.items()
            }
        )

    def forward(self, features: torch.Tensor) -> JointDistribution:
        return JointDistribution({key: head(features) for key, head in self.parts.items()})


def make_action_head(
    in_dim: int,
    action_spec: Spec,
    kind: Literal["normal", "tanh_normal"] = "normal",
    init_log_std: float = 0.0,
    state_dependent_std: bool = False,
) -> nn.Module:
    """The head for ``action_spec``: categorical for a scalar discrete spec, one categorical
    per dimension for a 1-D one (`MultiCategoricalHead`), one head per entry of a Dict or
    Tuple (`CompositeHead`), else ``kind``.

    Args:
        in_dim: feature width.
        action_spec: a scalar or 1-D `DiscreteTensorSpec`, a 1-D continuous spec, or a
            `CompositeSpec` of those.
        kind: ``"normal"`` (`NormalHead`) or ``"tanh_normal"`` (`TanhNormalHead`,
            needs finite bounds) for continuous actions.
        init_log_std: initial log std of a continuous head.
        state_dependent_std: for ``"normal"``, predict the std from the features.

    Raises:
        UnsupportedSpaceError: for action specs no head handles (actions of more than one
            dim, unbounded with ``"tanh_normal"``, a Dict key with a ``.``).
    """
    if isinstance(action_spec, CompositeSpec):
        return CompositeHead(in_dim, action_spec, kind, init_log_std, state_dependent_std)
    if isinstance(action_spec, DiscreteTensorSpec):
        if action_spec.shape == ():
            return CategoricalHead(in_dim, action_spec.num_values)
        if len(action_spec.shape) == 1:
            return MultiCategoricalHead(in_dim, action_spec.nvec)
        raise UnsupportedSpaceError(
            f"no action head for discrete actions of shape {action_spec.shape}: use a "
            "Discrete, MultiDiscrete or MultiBinary space of one dimension"
        )
    if not isinstance(action_spec, TensorSpec) or len(action_spec.shape) != 1:
        raise UnsupportedSpaceError(
            f"no action head for {action_spec!r}: use a flat Box, Discrete, MultiDiscrete or "
            "MultiBinary space, or a Dict or Tuple of them"
        )
    if kind == "tanh_normal":
        return TanhNormalHead(in_dim, action_spec, init_log_std)
    return NormalHead(in_dim, action_spec.shape[0], state_dependent_std, init_log_std)


def _log_std_projection(in_dim: int, action_dim: int, init_log_std: float) -> nn.Linear:
    """A projection whose initial output maps to ``init_log_std`` through `_bounded_log_std`."""
    low, high = LOG_STD_RANGE
    if not low < init_log_std < high:
        raise ValueError(f"init_log_std must lie in {LOG_STD_RANGE}, got {init_log_std}")
    layer = make_linear(in_dim, action_dim, POLICY_GAIN)
    nn.init.constant_(layer.bias, math.atanh(2 * (init_log_std - low) / (high - low) - 1))
    return layer


def _bounded_log_std(raw: torch.Tensor) -> torch.Tensor:
    """``raw`` squashed smoothly into `LOG_STD_RANGE` (a hard clamp would stop its gradient)."""
    low, high = LOG_STD_RANGE
    return low + 0.5 * (high - low) * (torch.tanh(raw) + 1)


def _check_bounded(spec: Spec) -> None:
    if not isinstance(spec, BoundedTensorSpec) or len(spec.shape) != 1:
        raise UnsupportedSpaceError(
            f"a tanh_normal head needs a 1-D bounded action spec, got {spec!r}"
        )
    low, high = np.asarray(spec.minimum, np.float64), np.asarray(spec.maximum, np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
        raise UnsupportedSpaceError(
            f"a tanh_normal head needs finite bounds with low < high, got {spec!r}"
        )
