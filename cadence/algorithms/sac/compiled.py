"""`compile_with_fallback`: ``torch.compile`` for a training step, with guards paid once.

On entry a compiled function evaluates its guards (~235 for SAC's loss: every parameter's
shape, dtype and strides, every constant it read, grad mode, ...), ~0.3-0.4 ms of a ~9 ms
update on one CPU thread. In steady-state training none of them can change between calls
except through the inputs, so once a call with inputs of one signature (each tensor's
shape, dtype, device and ``requires_grad``, grad mode, and the caller's ``state_key``) has
run with all guards twice, later calls with that signature skip them
(``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``). Any other signature, e.g.
a smaller minibatch, runs with all guards and may recompile as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

logger = logging.getLogger(__name__)

GUARDED_CALLS = 2
"""Calls of a signature that evaluate all guards before later ones skip them."""


class CompiledWithFallback:
    """``torch.compile(fn)`` that skips its guards in steady state, or ``fn`` once compiling fails.

    Args:
        fn: the function to compile.
        mode: the ``torch.compile`` mode.
        state_key: what else the compiled code depends on that the inputs do not show
            (e.g. a module's ``training`` flag); part of the signature.

    >>> double = CompiledWithFallback(lambda x: 2 * x, "default")
    >>> [float(double(torch.ones(1))) for _ in range(3)]
    [2.0, 2.0, 2.0]
    """

    def __init__(
        self, fn: Callable[..., Any], mode: str, state_key: Callable[[], Hashable] | None = None
    ):
        self.fn = fn
        self.compiled: Callable[..., Any] | None = torch.compile(fn, mode=mode, dynamic=False)
        self.state_key = state_key
        self._guarded_calls: dict[Hashable, int] = {}

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.fn(*args)
        key = self._signature(args)
        calls = self._guarded_calls.get(key, 0)
        try:
            if calls >= GUARDED_CALLS:
                with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                    return self.compiled(*args)
            result = self.compiled(*args)
        except Exception as error:  # noqa: BLE001 - any backend failure falls back to eager
            logger.warning(
                "torch.compile of %s failed (%s); running it eagerly", _name(self.fn), error
            )
            self.compiled = None
            return self.fn(*args)
        self._guarded_calls[key] = calls + 1
        return result

    def _signature(self, args: tuple[Any, ...]) -> Hashable:
        leaves, spec = tree_flatten(args)
        tensors = tuple(
            (leaf.shape, leaf.dtype, leaf.device, leaf.requires_grad)
            if isinstance(leaf, torch.Tensor)
            else (type(leaf), leaf)
            for leaf in leaves
        )
        state = self.state_key() if self.state_key is not None else None
        return (spec, tensors, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), state)


def compile_with_fallback(
    fn: Callable[..., Any], mode: str, state_key: Callable[[], Hashable] | None = None
) -> Callable[..., Any]:
    """``fn`` compiled with ``mode`` (see `CompiledWithFallback`), or ``fn`` itself for ``"off"``."""
    return fn if mode == "off" else CompiledWithFallback(fn, mode, state_key)


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)
