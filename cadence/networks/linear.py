"""`Linear` and `GRUCell`: ``nn.Linear`` and ``nn.GRUCell`` whose multiplies an optional
matmul route may take.

By default (no route) they are PyTorch's layers, ATen multiplying, with one difference: a
`Linear` layer with few inputs and more outputs (a network's first layer on a small
observation) multiplies by a contiguous copy of its transposed weight while gradients are
taken (`narrow_input_linear`), the layout in which MKL computes the weight's gradient 3-5x
faster. The numbers are those of ``F.linear``.

The seam: `set_matmul_route` installs a `MatmulRoute` (the optional fast path,
`cadence.accel.cpu_matmul`, installs one when a run's ``trainer.cpu_matmul`` picks another
backend than ATen); the layers then send their multiplies of at least `MatmulRoute.min_macs`
multiply-adds through it. `plain_matmuls` runs a block without the route (an export, which
must hold only ATen ops). This module never imports the route's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

CPU_MATMUL_ENV_VAR = "CADENCE_CPU_MATMUL"
"""Holds the backend a process decided for its CPU multiplies (``aten`` or ``onednn``), for
the child processes it starts."""

NARROW_INPUT_MAX = 16
"""`Linear` layers with at most this many inputs, and more outputs than inputs, take their
weight gradient as ``x.T @ grad`` (`narrow_input_linear`). Measured at batch 256 on a 2-core
AMD EPYC (one thread), forward and backward of the layer: 4 -> 64 in 30 us instead of 36,
3 -> 256 in 46 instead of 93, 17 -> 256 in 87 instead of 101; 32 -> 256 gains nothing."""


class MatmulRoute(Protocol):
    """Another backend for the layers' CPU float32 multiplies (`set_matmul_route`).

    Attributes:
        min_macs: a layer's multiplies of fewer multiply-adds (rows x in x out) stay with
            ATen, where the route's fixed cost per call outweighs its speed.
    """

    min_macs: int

    def takes(self, x: torch.Tensor) -> bool:
        """Whether ``x``'s multiplies may go through the route (then their size decides)."""

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``F.linear(x, weight, bias)``, through the route where it takes ``x`` at this size."""

    def batched(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor | None:
        """``x @ weight + bias`` per ensemble member (``[E, N, K] @ [E, K, M] + [E, 1, M]``)
        through the route, or None for the caller's ATen path."""


_route: MatmulRoute | None = None


def set_matmul_route(route: MatmulRoute | None) -> None:
    """Sends the layers' multiplies through ``route`` from now on (None: ATen's)."""
    global _route
    _route = route


def matmul_route() -> MatmulRoute | None:
    """The route in effect (None: ATen)."""
    return _route


@contextlib.contextmanager
def plain_matmuls() -> Iterator[None]:
    """Runs the block with ATen's multiplies (e.g. an export, which must not contain a
    route's custom op), restoring the route after."""
    previous = _route
    set_matmul_route(None)
    try:
        yield
    finally:
        set_matmul_route(previous)


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


def batched_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``x @ weight + bias`` per ensemble member through the route (`MatmulRoute.batched`),
    or None (no route, or not for this size: the caller's ATen path)."""
    route = _route
    return None if route is None else route.batched(x, weight, bias)


class GRUCell(nn.GRUCell):
    """``nn.GRUCell`` whose two multiplies may go through the route (same parameters and
    state-dict keys). Where both stay with ATen it is ``nn.GRUCell``'s fused cell."""

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        route = _route
        if route is None or h is None or not route.takes(x):
            return super().forward(x, h)
        rows = x.numel() // self.input_size
        if rows * self.input_size * 3 * self.hidden_size < route.min_macs:
            return super().forward(x, h)
        # torch's GRU: r, z = sigmoid(W_i x + b_i + W_h h + b_h) per gate; n = tanh(W_in x +
        # b_in + r * (W_hn h + b_hn)); h' = (1 - z) * n + z * h.
        x_r, x_z, x_n = route.linear(x, self.weight_ih, self.bias_ih).chunk(3, -1)
        h_r, h_z, h_n = route.linear(h, self.weight_hh, self.bias_hh).chunk(3, -1)
        reset = torch.sigmoid(x_r + h_r)
        update = torch.sigmoid(x_z + h_z)
        new = torch.tanh(x_n + reset * h_n)
        return new + update * (h - new)


class Linear(nn.Linear):
    """``nn.Linear`` whose multiply may go through the route (same parameters and
    state-dict keys).

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
        route = _route
        # Inputs with fewer elements than the route's size over the outputs per input
        # element stay with ATen: an acting step's few rows decide by one comparison.
        if route is None or x.numel() < -(-route.min_macs // max(self.out_features, 1)):
            if self._narrow_input and self.weight.requires_grad and torch.is_grad_enabled():
                return narrow_input_linear(x, self.weight, self.bias)
            return F.linear(x, self.weight, self.bias)
        return route.linear(x, self.weight, self.bias)
