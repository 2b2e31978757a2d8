"""`MLP`: the fully connected body every network is built from."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class MLP(nn.Sequential):
    """Linear layers with activations, optionally projecting to ``out_dim``.

    Args:
        in_dim: input features.
        hidden_sizes: widths of the hidden layers (each followed by the activation).
        out_dim: a final linear projection without activation, if given.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        layer_norm: LayerNorm after each hidden linear layer.
        orthogonal_init: orthogonal weights with gain sqrt(2) on hidden layers and
            ``output_gain`` on the projection, zero biases (the PPO implementation
            details of Huang et al. 2022).
        output_gain: gain of the projection's orthogonal init.

    >>> MLP(4, (64, 64), out_dim=1)(torch.zeros(8, 4)).shape
    torch.Size([8, 1])
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int | None = None,
        activation: str = "tanh",
        layer_norm: bool = False,
        orthogonal_init: bool = True,
        output_gain: float = 1.0,
    ):
        layers: list[nn.Module] = []
        width = in_dim
        for size in hidden_sizes:
            layers.append(_linear(width, size, math.sqrt(2) if orthogonal_init else None))
            if layer_norm:
                layers.append(nn.LayerNorm(size))
            layers.append(ACTIVATIONS[activation]())
            width = size
        if out_dim is not None:
            layers.append(_linear(width, out_dim, output_gain if orthogonal_init else None))
            width = out_dim
        super().__init__(*layers)
        self.output_dim = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) if len(self) else x


def _linear(in_dim: int, out_dim: int, gain: float | None) -> nn.Linear:
    layer = nn.Linear(in_dim, out_dim)
    if gain is not None:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer
