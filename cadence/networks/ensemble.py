"""Ensembles of MLPs evaluated as one batched computation.

E members with stacked weights ``[E, in, out]`` run as one ``torch.baddbmm``
per layer instead of E small matmuls: one kernel launch and no Python loop,
which is what makes twin/REDQ critics cheap (Chen et al. 2021,
https://arxiv.org/abs/2101.05982). Members are initialised independently and
never share parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cadence.networks.config import ActivationName
from cadence.networks.mlp import ACTIVATIONS, HIDDEN_GAIN


class EnsembleLinear(nn.Module):
    """E independent linear layers: ``[E, *B, in_dim] -> [E, *B, out_dim]``.

    Args:
        in_dim: features into each member.
        out_dim: features out of each member.
        ensemble_size: the number of members E.
        gain: orthogonal init with this gain and zero bias per member; None:
            ``nn.Linear``'s default (uniform in ``±1/sqrt(in_dim)``).

    Attributes:
        weight: ``[E, in_dim, out_dim]`` (transposed against ``nn.Linear``).
        bias: ``[E, 1, out_dim]``.
    """

    def __init__(self, in_dim: int, out_dim: int, ensemble_size: int, gain: float | None = None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_dim))
        bound = 1 / math.sqrt(in_dim)
        with torch.no_grad():
            for member in range(ensemble_size):
                if gain is None:
                    self.weight[member].uniform_(-bound, bound)
                    self.bias[member].uniform_(-bound, bound)
                else:
                    nn.init.orthogonal_(self.weight[member], gain)
                    self.bias[member].zero_()

    def forward(self, x: torch.Tensor, detach_parameters: bool = False) -> torch.Tensor:
        """``[E, *B, in_dim] -> [E, *B, out_dim]``; ``detach_parameters``: no gradient reaches
        the weights and biases (it still reaches ``x``)."""
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        weight, bias = self.weight, self.bias
        if detach_parameters:
            weight, bias = weight.detach(), bias.detach()
        if torch.compiler.is_compiling():
            out = _compiled_linear(flat, weight, bias)
        else:
            out = torch.baddbmm(bias, flat, weight)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def _compiled_linear(flat: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`EnsembleLinear`'s values in ops that inductor fuses with their neighbours.

    Why: a compiled ``baddbmm`` first copies the broadcast bias into a fresh ``[E, N, out]``
    tensor, a full extra pass; after a ``bmm`` the bias add fuses into the following
    activation. A width-1 layer (a critic's output) as a multiply-and-sum fuses its
    forward into one reduction and its backward into the activation's backward, where a
    ``[N, 256] x [256, 1]`` matmul and its transposed backward are mostly overhead.
    """
    if weight.shape[-1] == 1:
        return (flat * weight.transpose(1, 2)).sum(-1, keepdim=True) + bias
    return torch.bmm(flat, weight) + bias


SMALL_K = 8
"""Compiled, an ensemble matmul with at most this many input features is unrolled (`ensemble_matmul`)."""


def ensemble_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``[E, N, K] @ [E, K, out] -> [E, N, out]``, as a ``bmm`` or, compiled with small K,
    as K multiply-adds that inductor fuses into the kernel consuming the result (a ``bmm``
    with K of 1-8, e.g. a critic's action input, writes a full ``[E, N, out]`` buffer at a
    fraction of its arithmetic peak)."""
    if torch.compiler.is_compiling() and x.shape[-1] <= SMALL_K:
        out = x[..., :1] * weight[:, :1]
        for k in range(1, x.shape[-1]):
            out = out + x[..., k : k + 1] * weight[:, k : k + 1]
        return out
    return torch.bmm(x, weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with a separate scale and shift per member: ``[E, *B, dim]``."""

    def __init__(self, dim: int, ensemble_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble_size, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, dim))

    def forward(self, x: torch.Tensor, detach_parameters: bool = False) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if detach_parameters:
            weight, bias = weight.detach(), bias.detach()
        flat = F.layer_norm(x.reshape(x.shape[0], -1, x.shape[-1]), x.shape[-1:])
        return (flat * weight + bias).reshape(x.shape)


class EnsembleMLP(nn.Sequential):
    """E independent MLPs of one architecture: ``[E, *B, in_dim] -> [E, *B, out_dim]``.

    Member ``e`` computes what `MLP` computes with ``weight[e].T``, ``bias[e]``.

    Args:
        in_dim: input features of each member.
        hidden_sizes: hidden widths, each followed by the activation.
        out_dim: the output width (no activation).
        ensemble_size: the number of members E.
        activation: ``"tanh"``, ``"relu"``, ``"elu"`` or an ``nn.Module`` class.
        layer_norm: a per-member LayerNorm after each hidden linear layer.
        orthogonal_init: orthogonal weights (gain sqrt(2), ``output_gain`` last),
            zero biases; otherwise ``nn.Linear``'s default.
        output_gain: the orthogonal gain of the last layer.

    >>> EnsembleMLP(5, (32,), 1, ensemble_size=4)(torch.zeros(4, 10, 5)).shape
    torch.Size([4, 10, 1])
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        ensemble_size: int,
        activation: ActivationName | type[nn.Module] = "relu",
        layer_norm: bool = False,
        orthogonal_init: bool = False,
        output_gain: float = 1.0,
    ):
        activation_class = ACTIVATIONS[activation] if isinstance(activation, str) else activation
        layers: list[nn.Module] = []
        width = in_dim
        for size in hidden_sizes:
            gain = HIDDEN_GAIN if orthogonal_init else None
            layers.append(EnsembleLinear(width, size, ensemble_size, gain))
            if layer_norm:
                layers.append(EnsembleLayerNorm(size, ensemble_size))
            layers.append(activation_class())
            width = size
        gain = output_gain if orthogonal_init else None
        layers.append(EnsembleLinear(width, out_dim, ensemble_size, gain))
        super().__init__(*layers)
        self.ensemble_size = ensemble_size
        self.output_dim = out_dim

    def forward(
        self, x: torch.Tensor, detach_parameters: bool = False, start: int = 0
    ) -> torch.Tensor:
        """``[E, *B, in_dim] -> [E, *B, out_dim]``; ``detach_parameters``: the gradient reaches
        ``x`` only (e.g. an actor loss through critics it must not train); ``start``: the
        first layer to apply (``x`` is then that layer's input)."""
        for index, layer in enumerate(self):
            if index < start:
                continue
            if isinstance(layer, (EnsembleLinear, EnsembleLayerNorm)):
                x = layer(x, detach_parameters)
            else:
                x = layer(x)
        return x
