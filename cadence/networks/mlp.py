"""`MLP`: the fully connected body every network is built from, and its init."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from cadence.networks.config import ActivationName
from cadence.networks.linear import Linear

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}

HIDDEN_GAIN = math.sqrt(2)
"""Orthogonal gain of hidden layers (Huang et al. 2022, "The 37 implementation details of PPO")."""


class MLP(nn.Sequential):
    """Linear layers with activations, optionally projecting to ``out_dim``.

    Works on any leading dims: ``[*B, in_dim] -> [*B, output_dim]``.

    Args:
        in_dim: input features.
        hidden_sizes: widths of the hidden layers, each followed by the activation
            (empty: the MLP is the identity, or one linear layer with ``out_dim``).
        out_dim: a final linear projection without activation, if given.
        activation: ``"tanh"``, ``"relu"``, ``"elu"`` or an ``nn.Module`` class.
        layer_norm: LayerNorm after each hidden linear layer (before the activation).
        orthogonal_init: orthogonal weights with gain sqrt(2) on hidden layers and
            ``output_gain`` on the projection, zero biases; otherwise torch's default.
        output_gain: gain of the projection's orthogonal init (1 for values,
            0.01 for policy logits).

    Attributes:
        output_dim: ``out_dim``, else the last hidden width, else ``in_dim``.

    >>> MLP(4, (64, 64), out_dim=1)(torch.zeros(8, 4)).shape
    torch.Size([8, 1])
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int | None = None,
        activation: ActivationName | type[nn.Module] = "tanh",
        layer_norm: bool = False,
        orthogonal_init: bool = True,
        output_gain: float = 1.0,
    ):
        activation_class = ACTIVATIONS[activation] if isinstance(activation, str) else activation
        layers: list[nn.Module] = []
        width = in_dim
        for size in hidden_sizes:
            layers.append(make_linear(width, size, HIDDEN_GAIN if orthogonal_init else None))
            if layer_norm:
                layers.append(nn.LayerNorm(size))
            layers.append(activation_class())
            width = size
        if out_dim is not None:
            layers.append(make_linear(width, out_dim, output_gain if orthogonal_init else None))
            width = out_dim
        super().__init__(*layers)
        self.output_dim = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) if len(self) else x


def make_linear(in_dim: int, out_dim: int, gain: float | None) -> nn.Linear:
    """A linear layer (`Linear`: ``nn.Linear`` with a faster weight gradient for few inputs),
    orthogonally initialised with ``gain`` and zero bias unless ``gain`` is None."""
    layer = Linear(in_dim, out_dim)
    if gain is not None:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer
