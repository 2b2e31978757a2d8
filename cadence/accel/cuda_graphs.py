"""CUDA graphs for compiled updates and unrolls: a call's kernels replayed as one launch.

On a GPU a compiled update of small networks is bound by launching its kernels, not by
running them: inductor's wrapper launches each of its dozens of kernels from Python, and
the GPU idles between them. A CUDA graph records those launches once and replays them
with one call. ``compile: reduce-overhead`` wraps each compiled update, and the compiled
unroll of a tensor-native env (`cadence.collect.unroll`), in a `CudaGraphReplay`:

- a signature's first calls run the compiled function as usual (it compiles, its guards
  settle, cuBLAS and the allocator initialise); the next one records the graph, on
  copies of its inputs, and replays it;
- every later call of that signature copies its input tensors into those copies (one
  ``_foreach_copy_``), replays, and returns a copy of the outputs, which the next replay
  overwrites in place.

What makes this safe for cadence's updates:

- the function passed through `cadence.algorithms.Algorithm.in_graph` is pure (tensors
  in, tensors out; counters stay in Python outside it), and so is the unroll's, which
  takes the env's state as inputs and returns the stepped state
  (`cadence.envs.tensor.TensorEnvironment.graph_state`);
- what it changes in place (parameters, optimizer state, the learning-rate tensors
  `GraphOptimizer.refresh` fills before each call) keeps its storage from call to call:
  a checkpoint loads into those tensors rather than replacing them
  (`GraphOptimizer.reattach`);
- Adam's step counts, which an eager optimizer keeps on the CPU, live on the GPU (as a
  fused or capturable Adam's do), where the graph increments them;
- a Python number the update reads is fixed when the graph is recorded: the learning
  rate, the one cadence schedules, enters as a tensor.

Random ops in a graph draw from the generator's state at each replay, so every replay
draws new numbers.

A recording that fails (an op that waits for the host, such as ``.item()``, or a call
that would compile: `CompiledWithFallback.forbid_compile`) logs a warning and leaves that
function running compiled without graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import torch

from cadence.accel.torch_private import foreach_copy_, tree_flatten, tree_unflatten

if TYPE_CHECKING:
    from cadence.accel.compiled_function import CompiledWithFallback

logger = logging.getLogger(__name__)

MAX_GRAPHS = 16
"""Graphs recorded per function at most (each holds its own memory): calls of further
signatures, such as an on-policy minibatch of yet another size, run without one."""

WARMUP_CALLS = 3
"""Calls of a signature run without a graph before it is recorded: the compiled function's
guards are skipped from its third call on (`cadence.accel.compiled_function.GUARDED_CALLS`),
and the recording call must not compile."""


class CudaGraphReplay:
    """``fn``'s calls replayed as CUDA graphs, one per input signature (see the module
    docstring).

    Args:
        fn: a compiled update (`cadence.accel.compiled_function.CompiledWithFallback`): a pure
            function of tensors on one CUDA device.
        signature: what of a call's inputs a graph depends on (shapes, dtypes, the values
            of non-tensor inputs, ...): calls of another signature record another graph.
        name: for the warning when recording fails.
    """

    def __init__(self, fn: CompiledWithFallback, signature: Callable[[tuple], Hashable], name: str):
        self.fn = fn
        self.signature = signature
        self.name = name
        self.failed = False
        self.replays = 0
        self._calls: dict[Hashable, int] = {}
        self._graphs: dict[Hashable, _Recorded] = {}

    def __call__(self, *args: Any) -> Any:
        if self.failed:
            return self.fn(*args)
        key = self.signature(args)
        recorded = self._graphs.get(key)
        if recorded is None:
            if len(self._graphs) >= MAX_GRAPHS:
                return self.fn(*args)
            calls = self._calls.get(key, 0)
            if calls < WARMUP_CALLS:
                self._calls[key] = calls + 1
                return self.fn(*args)
            recorded = self._record(args)
            if recorded is None:
                return self.fn(*args)
            self._graphs[key] = recorded
        self.replays += 1
        return recorded.replay(args)

    @property
    def num_graphs(self) -> int:
        """Graphs recorded so far."""
        return len(self._graphs)

    @property
    def recorded_inputs(self) -> tuple[tuple[torch.Tensor, ...], ...]:
        """Per recorded graph, in the order recorded, the copies of the call's input
        tensors that each replay copies its inputs into: they keep the call's sizes and
        strides, and views keep a copy of their base."""
        return tuple(tuple(recorded.inputs) for recorded in self._graphs.values())

    def _record(self, args: tuple[Any, ...]) -> _Recorded | None:
        """A graph of ``fn`` on copies of ``args``; None (and no more graphs) if recording fails."""
        leaves, spec = tree_flatten(args)
        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        inputs = list(leaves)
        bases: dict[int, torch.Tensor] = {}
        for i in positions:  # with the inputs' layouts, which the compiled graph guards on
            inputs[i] = _like(leaves[i], bases)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        self.fn.forbid_compile = True  # a compile would run its own CUDA work inside
        try:
            with torch.cuda.graph(graph):
                outputs = self.fn(*tree_unflatten(inputs, spec))
        except Exception as error:  # noqa: BLE001 - any capture failure: run without graphs
            logger.warning(
                "recording %s as a CUDA graph failed (%s); it runs compiled without graphs",
                self.name, error,
            )  # fmt: skip
            self.failed = True
            return None
        finally:
            self.fn.forbid_compile = False
        return _Recorded(graph, [inputs[i] for i in positions], positions, outputs)


def _like(tensor: torch.Tensor, bases: dict[int, torch.Tensor]) -> torch.Tensor:
    """A copy of ``tensor`` with its sizes and strides (``clone`` makes a strided view,
    such as a replayed window's first step, contiguous) and, for a view, a base of the
    base's sizes: a compiled graph guards on a view's base (e.g. that a minibatch's
    indices, slices of one permutation, come from a permutation of the batch's size).
    Views of one base get copies of one copy of it (``bases``, by the base's id)."""
    base = tensor._base
    if base is None:
        copy = torch.empty_strided(
            tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device
        )
        return copy.copy_(tensor)
    base_copy = bases.get(id(base))
    if base_copy is None:
        base_copy = bases[id(base)] = _like(base, bases)
    offset = tensor.storage_offset() - base.storage_offset()
    return base_copy.as_strided(tensor.size(), tensor.stride(), base_copy.storage_offset() + offset)


class _Recorded:
    """One recorded graph: its input copies and its outputs (overwritten by each replay)."""

    def __init__(
        self,
        graph: torch.cuda.CUDAGraph,
        inputs: list[torch.Tensor],
        positions: list[int],
        outputs: Any,
    ):
        self.graph = graph
        self.inputs = inputs
        self.positions = positions
        self.outputs, self.output_spec = tree_flatten(outputs)
        self.output_tensors = [i for i, o in enumerate(self.outputs) if isinstance(o, torch.Tensor)]

    def replay(self, args: tuple[Any, ...]) -> Any:
        leaves = tree_flatten(args)[0]
        if self.inputs:
            foreach_copy_(self.inputs, [leaves[i] for i in self.positions])
        self.graph.replay()
        outputs = list(self.outputs)
        kept = [outputs[i] for i in self.output_tensors]
        copies = [torch.empty_like(tensor) for tensor in kept]
        if copies:
            foreach_copy_(copies, kept)
        for i, copy in zip(self.output_tensors, copies, strict=True):
            outputs[i] = copy
        return tree_unflatten(outputs, self.output_spec)
