"""`CompiledWithFallback`: one function under ``torch.compile``, guards skipped in steady state.

A compiled call first checks its guards; in steady-state training nothing they check can
change but through the inputs, so once a signature (the inputs' structure, shapes, dtypes,
devices; grad mode) has run guarded `GUARDED_CALLS` times, later
calls skip them. Where compiling fails the function runs eagerly from then on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from cadence.accel.precompiled import Precompiled, load_or_compile, precompilable
from cadence.accel.torch_private import (
    mode_options,
    own_size_symbols,
    supported_nodes,
    trace_autograd_ops,
)
from cadence.data.time_step import TimeStep
from cadence.machine_record import compile_cache_dir

logger = logging.getLogger(__name__)

REGISTERED_NODES = supported_nodes()
"""torch's registered pytree node types (one dict, which later registrations fill)."""

GUARDED_CALLS = 2
"""Calls of a signature that evaluate all guards before later ones skip them."""


class CompiledWithFallback:
    """``torch.compile(fn)`` that skips its guards in steady state, or ``fn`` once compiling fails.

    On entry a compiled function evaluates its guards (hundreds for an update: every
    parameter's shape, dtype and strides, every constant it read, grad mode, ...), a
    noticeable part of a small update. In steady-state training none of them can change
    between calls except through the inputs, so once a call with inputs of one signature
    (each tensor's shape, with ``dynamic`` each size only as 0, 1 or more; whether it is
    contiguous; its dtype, device and ``requires_grad``; every other input's value; grad
    mode; the layers' CPU matmul backend; ``state_key()``) has run with all guards `GUARDED_CALLS` times, later calls with
    that signature skip them (``skip_guard_eval_unsafe``). Any other signature, e.g. a
    smaller minibatch, runs with all guards and may recompile.

    Args:
        fn: the function to compile.
        mode: the ``torch.compile`` mode.
        state_key: what else the compiled code depends on that the inputs do not show
            (e.g. a module's ``training`` flag); part of the signature.
        on_compile: called with ``True`` before a call that compiles (a new signature's
            first) and ``False`` after it, e.g. to say so in a progress bar.
        dynamic: ``torch.compile``'s: True compiles one graph for every size of the
            inputs' dims (parameters keep theirs); None, one graph per shape until a
            second size of a dim turns up, then one for all its sizes.
        options: inductor options on top of ``mode``'s (e.g. ``{"cpp_wrapper": True}``).

    >>> double = CompiledWithFallback(lambda x: 2 * x, "default")
    >>> [float(double(torch.ones(1))) for _ in range(3)]
    [2.0, 2.0, 2.0]
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        mode: str,
        state_key: Callable[[], Hashable] | None = None,
        on_compile: Callable[[bool], None] | None = None,
        dynamic: bool | None = None,
        options: dict[str, Any] | None = None,
    ):
        self.fn = fn
        self.mode = mode
        self.options = options
        # Made by the first call, inside `on_compile`'s bracket: the first torch.compile of
        # a process imports the rest of inductor (about 0.7 s after `configure_inductor`),
        # which is compile time, not run time.
        self.compiled: Callable[..., Any] | None = None
        self.failed = False
        self.forbid_compile = False
        """Set while a CUDA graph records a call (`cadence.accel.cuda_graphs`): a call
        that would compile raises instead (a compile runs CUDA work of its own)."""
        self.dynamic = dynamic
        self.state_key = state_key
        self.on_compile = on_compile
        self._guarded_calls: dict[Hashable, int] = {}
        self.signatures_worked_out = 0
        """Calls whose signature was worked out from their inputs (the callers of
        `call_with` that know it save that work: e.g. an unroll of uniform time steps)."""
        self.precompile = precompilable(fn) and os.environ.get("CADENCE_PRECOMPILE") != "0"
        # Per signature: its graph saved whole (`cadence.accel.precompiled`), or None
        # where it runs through `compiled`.
        self._precompiled: dict[Hashable, Precompiled | None] = {}
        # Per signature of a dynamic graph: the exact input sizes its guards passed.
        self._passed_sizes: dict[Hashable, set[tuple[torch.Size, ...]]] = {}

    def __call__(self, *args: Any) -> Any:
        if self.failed:
            return self.fn(*args)
        return self.call_with(self._signatures(args), *args)

    def call_with(self, exact_signature: Hashable, *args: Any) -> Any:
        """``self(*args)`` for inputs whose `exact_signature` the caller knows (e.g. every
        time step of an env whose steps share one layout), which saves working it out:
        5 us of an acting step of 8 CartPoles."""
        if self.failed:
            return self.fn(*args)
        key, sizes = exact_signature
        calls = self._guarded_calls.get(key, 0)
        precompiled = self._precompiled.get(key)
        if precompiled is not None and calls >= GUARDED_CALLS:
            # A static signature shows every size the graph depends on; a dynamic one does
            # not (a size of 1 derived from larger ones), so its guards run (about 12 us)
            # once for each set of exact sizes.
            if not self.dynamic or self._sizes_pass(key, sizes, precompiled, args):
                return precompiled(*args)
            calls = 0
        elif calls >= GUARDED_CALLS:
            try:
                with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                    return self.compiled(*args)
            except RuntimeError as error:
                # None of the graphs fits (a size the signature does not show, such as a
                # last minibatch of one sample, which a dynamic graph specialises on):
                # this call runs with all guards, compiling the graph it needs.
                if "skip_guard_eval_unsafe" not in str(error):
                    raise
                calls = 0
        try:
            if calls == 0 and self.on_compile is not None:
                self.on_compile(True)
            try:
                result = self._guarded_call(key, args)
            finally:
                if calls == 0 and self.on_compile is not None:
                    self.on_compile(False)
        except Exception as error:  # noqa: BLE001 - any backend failure falls back to eager
            if self.forbid_compile:
                raise
            logger.warning(
                "torch.compile of %s failed (%s); running it eagerly", function_name(self.fn), error
            )
            self.compiled = None
            self.failed = True
            return self.fn(*args)
        self._guarded_calls[key] = calls + 1
        return result

    def _guarded_call(self, key: Hashable, args: tuple[Any, ...]) -> Any:
        """A call that checks every guard, compiling (or loading) the graph it needs (with
        `forbid_compile`, raising where it would compile)."""
        with self._tracing():
            return self._guarded_call_traced(key, args)

    def _tracing(self) -> contextlib.AbstractContextManager:
        """Where a graph may be traced: a dynamic graph's input sizes each get a symbol of
        their own. With torch's duck sizing, sizes equal at the first call share one and
        the graph guards on their equality: a fused PPO update first called on minibatches
        of 256, 256, 256 and 256 compiled a second graph (28 s for CartPole's network, 65 s
        for Atari's CNN) when an episode's end left 256, 256, 256 and 248, and every later
        run compiled it again, as only a signature's first graph is saved."""
        if not self.dynamic:
            return contextlib.nullcontext()
        return own_size_symbols()

    def _guarded_call_traced(self, key: Hashable, args: tuple[Any, ...]) -> Any:
        if self.precompile and key not in self._precompiled:
            if self.forbid_compile:
                raise RuntimeError(f"{function_name(self.fn)} would compile a graph for new inputs")
            self._precompiled[key] = self._load_or_compile(key, args)
        precompiled = self._precompiled.get(key)
        if precompiled is not None and precompiled.check(*args):
            return precompiled(*args)
        if self.compiled is None:  # inputs its guards reject, or none: torch.compile's way
            if self.forbid_compile:
                raise RuntimeError(f"{function_name(self.fn)} would compile a graph for new inputs")
            self.compiled = torch.compile(self.fn, **self._compile_kwargs())
        stance = (
            torch.compiler.set_stance("fail_on_recompile")
            if self.forbid_compile
            else contextlib.nullcontext()
        )
        with stance, trace_autograd_ops():
            return self.compiled(*args)

    def _load_or_compile(self, key: Hashable, args: tuple[Any, ...]) -> Precompiled | None:
        """The signature's graph saved whole, or None (then `torch.compile` compiles it)."""
        directory = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or compile_cache_dir())
        # A dynamic graph's file is named apart from those saved with duck sizing (`_tracing`).
        name = (key, "sizes: own symbols") if self.dynamic else key
        return load_or_compile(
            self.fn, args, name, directory / "cadence" / "graphs", self._compile_kwargs()
        )

    @property
    def is_compiled(self) -> bool:
        """Whether calls have run compiled (through ``torch.compile`` or a graph saved
        whole) and compiling has not failed."""
        has_graph = self.compiled is not None or any(self._precompiled.values())
        return has_graph and not self.failed

    @property
    def guarded_calls(self) -> Mapping[Hashable, int]:
        """Read-only: by `signature` seen, the calls that evaluated all guards (compiling
        where needed). A signature's count stops at `GUARDED_CALLS`, after which its calls
        skip the guards; it starts again where a call of it had to recompile."""
        return MappingProxyType(self._guarded_calls)

    @property
    def num_precompiled_signatures(self) -> int:
        """Signatures whose graph was looked up among those saved whole (`precompile`),
        whether it loaded, compiled and saved, or could not be saved (then ``torch.compile``
        runs it): a dynamic graph taking minibatches of every size counts one."""
        return len(self._precompiled)

    def _compile_kwargs(self) -> dict[str, Any]:
        if not self.options:
            return {"mode": self.mode, "dynamic": self.dynamic}
        # torch.compile takes a mode or options, not both: the mode as its options
        options = {**mode_options(self.mode, self.dynamic), **self.options}
        return {"options": options, "dynamic": self.dynamic}

    def signature(self, args: tuple[Any, ...]) -> Hashable:
        """What a call's graph depends on beyond the guards skipped in steady state."""
        return self._signatures(args)[0]

    def exact_signature(self, args: tuple[Any, ...]) -> Hashable:
        """`signature` with the input tensors' exact sizes (a dynamic graph's signature
        shows each only as 0, 1 or more), as a CUDA graph, made for one set of sizes,
        depends on them."""
        return self._signatures(args)

    def _signatures(self, args: tuple[Any, ...]) -> tuple[Hashable, tuple[torch.Size, ...]]:
        """`signature`, and the exact sizes of the input tensors (which a dynamic
        signature shows only as 0, 1 or more)."""
        self.signatures_worked_out += 1
        described: list[Hashable] = []
        sizes: list[torch.Size] = []
        self._describe(args, described, sizes)
        state = self.state_key() if self.state_key is not None else None
        modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        return (tuple(described), modes, state), tuple(sizes)

    def _sizes_pass(
        self,
        key: Hashable,
        sizes: tuple[torch.Size, ...],
        precompiled: Precompiled,
        args: tuple[Any, ...],
    ) -> bool:
        """Whether the dynamic graph ``precompiled`` takes inputs of these exact sizes: its
        guards (about 12 us of a PPO update) run the first time only, as a static
        signature's do."""
        passed = self._passed_sizes.setdefault(key, set())
        if sizes in passed:
            return True
        if not precompiled.check(*args):
            return False
        passed.add(sizes)
        return True

    def _describe(self, value: Any, described: list[Hashable], sizes: list[torch.Size]) -> None:
        """Appends ``value``'s structure and leaves to ``described`` (and its tensors'
        sizes to ``sizes``), depth first: what ``tree_flatten``'s spec and leaves tell, in
        flat tuples that hash fast (a call's signature took 10-16 us through
        ``tree_flatten``, 5 us so)."""
        kind = type(value)
        if isinstance(value, torch.Tensor):
            sizes.append(value.shape)
            described.append(
                (
                    self._shape(value.shape),
                    value.is_contiguous(),
                    value.dtype,
                    value.device,
                    value.requires_grad,
                )
            )
        elif isinstance(value, (tuple, list)):  # named tuples too
            described.append((kind, len(value)))
            for item in value:
                self._describe(item, described, sizes)
        elif kind is dict:
            described.append((kind, tuple(value)))
            for item in value.values():
                self._describe(item, described, sizes)
        elif kind is TimeStep:  # every acting step's input: its fields read at once
            described.append((kind, value.untransformed is None))
            for child in _time_step_fields(value):
                self._describe(child, described, sizes)
            if value.untransformed is not None:
                self._describe(value.untransformed, described, sizes)
        elif kind in REGISTERED_NODES:  # e.g. another registered dataclass
            children, context = REGISTERED_NODES[kind].flatten_fn(value)
            described.append((kind, _frozen(context)))
            for child in children:
                self._describe(child, described, sizes)
        else:
            described.append((kind, value))

    def _shape(self, shape: torch.Size) -> tuple[int, ...]:
        """A shape as the graph depends on it: with ``dynamic`` True, each size only as
        0, 1 or more (the sizes dynamo still specialises on), so that a dynamic graph
        skips its guards for every size, not only for those seen twice."""
        return tuple(min(size, 2) for size in shape) if self.dynamic else tuple(shape)


_time_step_fields = operator.attrgetter(
    *(field.name for field in dataclasses.fields(TimeStep) if field.name != "untransformed")
)
"""A `TimeStep`'s fields but ``untransformed``, as a tuple (a signature takes 4 us for an
acting step's inputs so, 7 us through its pytree flattening)."""


def _frozen(context: Any) -> Hashable:
    """A pytree node's context (lists, dicts) as nested tuples."""
    if isinstance(context, (list, tuple)):
        return tuple(_frozen(item) for item in context)
    if isinstance(context, dict):
        return tuple((key, _frozen(item)) for key, item in context.items())
    return context


def function_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", type(fn).__name__)
