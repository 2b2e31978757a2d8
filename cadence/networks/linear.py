"""`Linear`: ``nn.Linear`` with a faster weight gradient for layers with few inputs.

A `Linear` layer with few inputs and more outputs (a network's first layer on a small
observation) multiplies by a contiguous copy of its transposed weight while gradients are
taken (`narrow_input_linear`), the layout in which MKL computes the weight's gradient 3-5x
faster. The numbers are those of ``F.linear``; every multiply is ATen's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NARROW_INPUT_MAX = 16
"""`Linear` layers with at most this many inputs, and more outputs than inputs, take their
weight gradient as ``x.T @ grad`` (`narrow_input_linear`). Measured at batch 256 on a 2-core
AMD EPYC (one thread), forward and backward of the layer: 4 -> 64 in 30 us instead of 36,
3 -> 256 in 46 instead of 93, 17 -> 256 in 87 instead of 101; 32 -> 256 gains nothing."""

def narrow_input_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` multiplied by ``weight.t().contiguous()``.

    ``F.linear``'s backward computes the weight's gradient in the weight's layout, ``grad.T
    @ x`` (``[out, in]``); for a weight with few inputs and many outputs MKL multiplies
    that far more slowly than ``x.T @ grad`` (``[in, out]``; 256 rows, 4 inputs, 64 outputs:
    14.5 us against 4.9). Multiplying by a contiguous ``[in, out]`` copy of the weight (a
    few hundred floats) makes autograd, eager or compiled, compute the second.
    """
    flat = x.reshape(-1, x.shape[-1])
    transposed = weight.t().contiguous()
    out = flat @ transposed if bias is None else torch.addmm(bias, flat, transposed)
    return out.reshape(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state-dict keys) with a faster weight gradient
    for layers with few inputs.

    A layer with few inputs and more outputs (a network's first layer on a small
    observation) multiplies by a contiguous copy of its transposed weight while gradients
    are taken (`narrow_input_linear`): the weight's gradient then comes out as ``x.T @ grad``
    rather than ``grad.T @ x``, the layout in which MKL multiplies it 3-5x faster.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._narrow_input = (
            self.in_features <= NARROW_INPUT_MAX and self.in_features < self.out_features
        )

    @property
    def narrow_input(self) -> bool:
        """Whether the layer multiplies by its transposed weight while gradients are taken
        (at most `NARROW_INPUT_MAX` inputs, and fewer inputs than outputs)."""
        return self._narrow_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._narrow_input and self.weight.requires_grad and torch.is_grad_enabled():
            return narrow_input_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)
