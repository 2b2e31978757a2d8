"""The update compiler: an algorithm's whole minibatch step as one ``torch.compile`` graph.

Eager PyTorch spends most of a small network's update in per-op overhead: a PPO step of a
64x64 network costs milliseconds where its arithmetic takes microseconds. Compiled, the
update a `cadence.algorithms.Algorithm` already owns (forward, loss, gradients, clipping,
Adam, target update) runs as one graph per minibatch shape:

- inside the graph `Algorithm.minimize` takes the gradients with ``torch.autograd.grad``
  (traced, ``trace_autograd_ops``) and steps the optimizer with `GraphOptimizer`, on the very state
  tensors of the algorithm's ``torch.optim.Adam`` (so checkpoints of compiled and eager
  runs load into each other, and the state-dict keys stay the eager ones: no module is
  wrapped);
- the learning rates enter as 0-d tensors refreshed before each call, so a schedule does
  not recompile;
- Python bookkeeping (counters, schedules) stays outside: an algorithm calls
  `Algorithm.in_graph` for the pure part of its update.

`UpdateCompiler` holds an algorithm's compiled functions. Its modes are those of
``torch.compile`` plus ``"auto"``, which times eager and compiled calls (on a GPU, also
compiled calls replayed as CUDA graphs) on the first minibatches and keeps the fastest,
per function (`UpdateCompiler.choices`, checkpointed with the
algorithm so that a resumed run does not measure again). The first run on a machine to
choose records its choices there (`AUTO_RECORD`), and later runs of the same graphs take
them from their first call: two of them with one seed give the same numbers.

Compiled artifacts persist per machine in `compile_cache_dir` (PyTorch's FX-graph and
AOTAutograd caches, written atomically, so the runs of a sweep can share them): a second
run of a config loads its graphs instead of compiling them (`cadence.accel.compile_cache`).
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

from cadence.accel.compile_cache import configure_inductor, cpp_compiler_available, graph_options
from cadence.accel.compiled_function import CompiledWithFallback, function_name
from cadence.accel.cuda_graphs import WARMUP_CALLS, CudaGraphReplay
from cadence.accel.graph_optimizer import GraphOptimizer, clip_grads, total_norm
from cadence.accel.joint_adam import JointAdamStep
from cadence.accel.precompiled import file_stem
from cadence.accel.torch_private import tree_flatten
from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.compile_config import COMPILE_MODES
from cadence.machine_record import machine_key, recall, record_first

logger = logging.getLogger(__name__)

AUTO_TIMED_CALLS = 5
"""``"auto"``: calls timed each way (after one untimed call each) before choosing."""

AUTO_RECORD = "compile_auto.json"
"""``"auto"``'s choices by machine and graph (`auto_record_key`), in the compile cache
folder: the first run to choose records them, and later runs take them from their first
call (`cadence.machine_record`)."""


class UpdateCompiler:
    """The compiled functions of one algorithm's update (see the module docstring).

    Args:
        mode: one of `COMPILE_MODES` other than ``"off"``.
        optimizers: returns the algorithm's optimizers (Adam or RMSprop: their state is
            initialised here so that the graph can step it in place).
        state_key: the algorithm's state the graphs depend on (its ``training`` flag).
        choices: ``"auto"``'s earlier choices (from a checkpoint), by function.
        dynamic: the minibatches' sizes vary (an on-policy batch loses the steps dropped
            at episode ends): compile one graph for all sizes at once, not one for the
            first size and another when a second turns up.
    """

    def __init__(
        self,
        mode: str,
        optimizers: Callable[[], Iterable[torch.optim.Optimizer]],
        state_key: Callable[[], Hashable] | None = None,
        choices: dict[str, str] | None = None,
        dynamic: bool = False,
    ):
        if mode not in COMPILE_MODES or mode == "off":
            raise ValueError(f"compile mode must be one of {COMPILE_MODES[1:]}, got {mode!r}")
        self.mode = mode
        self.cuda_graphs = mode == "reduce-overhead"
        """Whether the graphs' calls replay as CUDA graphs where the parameters are on a GPU."""
        self.optimizers = optimizers
        self.state_key = state_key
        self.choices: dict[str, str] = dict(choices or {})
        self.dynamic = dynamic
        self.on_compile: Callable[[bool], None] | None = None
        self.compile_seconds = 0.0
        self._graphs: dict[str, CompiledWithFallback] = {}
        self._replays: dict[str, CudaGraphReplay] = {}
        self._timings: dict[str, dict[str, list[float]]] = {}
        self._record_keys: dict[str, str | None] = {}  # by function: `auto_record_key`
        # A list searched by identity, not a dict by id(): an id would enter the graph's
        # cache key and differ in every process, and the cache would never hit.
        self._optimizers: list[GraphOptimizer] = []
        self._compile_started: float | None = None
        configure_inductor()
        if mode == "auto" and not cpp_compiler_available():
            logger.warning(
                "compile=auto: no C++ compiler found (inductor's CPU back end needs g++ or "
                "clang++; `apt install g++`), so the update runs eagerly"
            )
            self.mode = "eager"

    def run(self, fn: Callable[..., Any], *args: Any, steps: int = 1) -> Any:
        """``fn(*args)``, compiled (or, under ``"auto"``, as measured faster); ``fn`` takes
        ``steps`` optimizer steps (see `GraphOptimizer`).

        A method, not ``__call__``: a saved graph's guards pickle the callable attributes
        of the modules the trace went through (the unroll's, the algorithm), and a
        compiler that is not callable stays out of the unroll's file."""
        if self.mode == "eager":
            return fn(*args)
        name = function_name(fn)
        graph = self._graphs.get(name)
        if graph is None:
            mode = "default" if self.mode in ("auto", "reduce-overhead") else self.mode
            dynamic = True if self.dynamic else None
            device = self._device()
            options = None if device is None else graph_options(device)
            graph = CompiledWithFallback(
                fn, mode, self.state_key, self.note_compiling, dynamic, options
            )
            self._graphs[name] = graph
            if self._may_replay(device):
                self._replays[name] = CudaGraphReplay(graph, graph.exact_signature, name)
        if self.mode != "auto":
            return self._run(graph, args, steps, name)
        choice = self.choices.get(name) or self._recorded_choice(name, fn, graph, args)
        if choice == "eager":
            return fn(*args)
        if choice is not None:
            return self._run(graph, args, steps, name if choice == "graphs" else "")
        return self._measure(name, fn, graph, args, steps)

    @property
    def graphs(self) -> Mapping[str, CompiledWithFallback]:
        """The compiled functions made so far, read-only, by name (`function_name`, e.g.
        ``"Algorithm.update_step"``) in the order of their first calls; empty under
        ``"eager"``. Each tells its ``mode``, ``options`` and whether it ``is_compiled``."""
        return MappingProxyType(self._graphs)

    @property
    def replays(self) -> Mapping[str, CudaGraphReplay]:
        """The CUDA-graph replays of the `graphs`, read-only, by name: one per function
        whose parameters are on a GPU under ``reduce-overhead`` or ``auto``; empty on the
        CPU. Each tells its ``num_graphs``, its ``replays`` and whether recording ``failed``."""
        return MappingProxyType(self._replays)

    @property
    def timings(self) -> dict[str, dict[str, tuple[float, ...]]]:
        """``"auto"``'s measured call times in seconds, a copy: by function name, then by
        way (``"eager"``, ``"compiled"`` and, on a GPU, ``"graphs"``), the untimed calls
        first (`median_times`). Empty where nothing was measured (another mode, or a
        choice taken from a checkpoint or `AUTO_RECORD`)."""
        return {
            name: {way: tuple(times) for way, times in ways.items()}
            for name, ways in self._timings.items()
        }

    def _recorded_choice(
        self, name: str, fn: Callable[..., Any], graph: CompiledWithFallback, args: tuple
    ) -> str | None:
        """The way this machine's first run chose for ``fn``'s graph (`AUTO_RECORD`),
        taken as this run's from its first call; None where none is recorded (looked up at
        the first call only)."""
        if name in self._record_keys:
            return None
        key = self._record_keys[name] = auto_record_key(fn, graph.signature(args))
        ways = ("eager", "compiled", "graphs") if name in self._replays else ("eager", "compiled")
        choice = None if key is None else recorded_auto_choice(key)
        if choice not in ways:
            return None
        self.choices[name] = choice
        logger.info("compile=auto: %s: %s, as first measured on this machine", name, choice)
        return choice

    def replays_on(self, device: torch.device | None) -> bool:
        """Whether graphs on ``device`` replay as CUDA graphs: under ``reduce-overhead``,
        on a GPU (the updates' and the tensor-native unroll's)."""
        return self.cuda_graphs and _is_cuda(device)

    def _may_replay(self, device: torch.device | None) -> bool:
        """Whether graphs on ``device`` may replay as CUDA graphs: where they always do
        (`replays_on`), and under ``auto`` on a GPU, where they are one of the ways timed."""
        return (self.cuda_graphs or self.mode == "auto") and _is_cuda(device)

    def _device(self) -> torch.device | None:
        """The device of the optimizers' parameters (None: no parameters)."""
        params = (p for o in self.optimizers() for g in o.param_groups for p in g["params"])
        first = next(params, None)
        return None if first is None else first.device

    def __getstate__(self) -> dict[str, Any]:
        """Copied or pickled without its graphs and ``on_compile`` hook: a copy compiles
        (or loads) its own graphs for its own algorithm's methods. A saved update's guards
        pickle the compiler (the graph reads its optimizers' state), and another graph
        already loaded, or a progress bar's hook, would not pickle."""
        return {**self.__dict__, "_graphs": {}, "_replays": {}, "on_compile": None}

    def minimize(
        self,
        loss: torch.Tensor,
        optimizers: Sequence[torch.optim.Optimizer],
        max_grad_norm: float | None,
        skip_nonfinite: bool,
        update_index: int = 0,
    ) -> torch.Tensor | None:
        """`Algorithm.minimize` inside a compiled graph: the same arithmetic without ``.grad``
        (``torch.autograd.grad``, then `clip_grads` and `GraphOptimizer.step` per optimizer).

        With ``skip_nonfinite``, a non-finite update leaves every parameter and optimizer
        state as it was, selected in the graph rather than branched on.
        """
        steppers = [self.graph_optimizer(optimizer) for optimizer in optimizers]
        params = [p for stepper in steppers for p in stepper.params]
        # None for a parameter the loss does not reach: an eager optimizer skips it, and
        # so does the graph's.
        grads = list(torch.autograd.grad(loss, params, allow_unused=True))
        clipped, norms, start = [], [], 0
        for stepper in steppers:
            end = start + len(stepper.params)
            group_grads, norm = clip_grads(grads[start:end], max_grad_norm)
            clipped.append(group_grads)
            norms.append(norm)
            start = end
        grad_norm = None if max_grad_norm is None else torch.stack(norms).max()
        apply = None
        if skip_nonfinite:
            if grad_norm is None:
                grad_norm = total_norm(grads)
            apply = torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)
        with torch.no_grad():
            for stepper, group_grads in zip(steppers, clipped, strict=True):
                stepper.step(group_grads, apply, update_index)
        return grad_norm

    def optimizer_steps(self, optimizers: Sequence[torch.optim.Optimizer]) -> JointAdamStep:
        """The optimizers' eager steps outside a graph, fused Adams as one kernel call
        (`JointAdamStep`: the same numbers as each one's own step)."""
        return JointAdamStep(optimizers)

    def load_choices(self, choices: dict[str, str]) -> None:
        """Takes a checkpoint's ``"auto"`` choices (under another mode, none apply)."""
        if self.mode == "auto":
            self.choices.update(choices)

    def graph_optimizer(self, optimizer: torch.optim.Optimizer) -> GraphOptimizer:
        """``optimizer`` as the graph steps it (made by the first compiled call)."""
        for graph_optimizer in self._optimizers:
            if graph_optimizer.optimizer is optimizer:
                return graph_optimizer
        raise KeyError(f"{optimizer!r} is not among the algorithm's optimizers")

    def reattach(self) -> None:
        """After the optimizers loaded a checkpoint: see `GraphOptimizer.reattach`."""
        for graph_optimizer in self._optimizers:
            graph_optimizer.reattach()

    def _run(
        self, graph: CompiledWithFallback, args: tuple[Any, ...], steps: int = 1, name: str = ""
    ) -> Any:
        optimizers = list(self.optimizers())
        if [g.optimizer for g in self._optimizers] != optimizers:
            on_device = self._may_replay(self._device())  # a replay steps the counts itself
            self._optimizers = [GraphOptimizer(o, counts_on_device=on_device) for o in optimizers]
        for graph_optimizer in self._optimizers:
            graph_optimizer.refresh(steps)
        replay = self._replay(name, graph)
        if replay is None:
            return graph(*args)
        return replay(*args)

    def _replay(self, name: str, graph: CompiledWithFallback) -> CudaGraphReplay | None:
        """The CUDA graphs of ``graph``'s calls (made with it under ``reduce-overhead``
        with the parameters on a GPU), once it has compiled; else None."""
        replay = self._replays.get(name)
        if replay is None or graph.failed or not graph.is_compiled:
            return None
        return replay

    def _measure(
        self,
        key: str,
        fn: Callable[..., Any],
        graph: CompiledWithFallback,
        args: tuple[Any, ...],
        steps: int = 1,
    ) -> Any:
        """``"auto"``: this call runs one way and is timed. The ways, in turn: eager,
        compiled and, on a GPU, compiled and replayed as CUDA graphs; each has
        `AUTO_TIMED_CALLS` timed calls after its untimed ones (one; for CUDA graphs the
        warm-up and the recording). Then the fastest wins.

        On a GPU, Adam's step counts move there for the graphs (`GraphOptimizer`) and stay
        whichever way wins: an eager step then reads each count from the GPU, a wait that
        costs a launch-bound update little."""
        replay = self._replays.get(key)
        untimed = {"eager": 1, "compiled": 1}
        if replay is not None:
            untimed["graphs"] = WARMUP_CALLS + 1
        timings = self._timings.setdefault(key, {way: [] for way in untimed})
        way = next(w for w, n in untimed.items() if len(timings[w]) < n + AUTO_TIMED_CALLS)
        if way != "eager" and graph.failed:  # compiling failed: eager it is
            self.choices[key] = "eager"
            return fn(*args)
        start = time.perf_counter()
        if way == "eager":
            result = fn(*args)
        else:
            result = self._run(graph, args, steps, key if way == "graphs" else "")
        sync(result)
        timings[way].append(time.perf_counter() - start)
        if all(len(timings[w]) == n + AUTO_TIMED_CALLS for w, n in untimed.items()):
            medians = median_times(timings, untimed)
            if replay is not None and replay.failed:  # its calls ran compiled
                del medians["graphs"]
            self.choices[key] = min(medians, key=medians.__getitem__)
            record_key = self._record_keys.get(key)
            if record_key is not None:
                record_auto_choice(record_key, self.choices[key])
            logger.info(
                "compile=auto: %s: %s per call: %s",
                key,
                ", ".join(f"{w} {1e3 * t:.3f} ms" for w, t in medians.items()),
                self.choices[key],
            )
        return result

    def note_compiling(self, started: bool) -> None:
        """Called around a call that compiles: counts `compile_seconds`, tells `on_compile`."""
        if started:
            self._compile_started = time.perf_counter()
        elif self._compile_started is not None:
            seconds = time.perf_counter() - self._compile_started
            self.compile_seconds += seconds
            self._compile_started = None
            if seconds >= 0.5:  # not a graph that a new size of a dynamic dim reused
                logger.info(
                    "compiled a graph in %.1f s (cache: %s)",
                    seconds, os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
                )  # fmt: skip
        if self.on_compile is not None:
            self.on_compile(started)


def recorded_auto_choice(key: str) -> str | None:
    """The way recorded under ``key`` (`auto_record_key`) in `AUTO_RECORD`, if any."""
    return recall(AUTO_RECORD, key)


def record_auto_choice(key: str, way: str) -> None:
    """Records ``way`` under ``key`` in `AUTO_RECORD` unless a way is there already."""
    record_first(AUTO_RECORD, key, way)


def auto_record_key(fn: Callable[..., Any], signature: Hashable) -> str | None:
    """What ``"auto"``'s choice for the calls of ``fn`` with this `signature` is recorded
    under (`AUTO_RECORD`): the machine and the graph's name (`file_stem`: the method, its
    module's tensors and structure, the signature, the torch version). None for a function
    that is not a module's method, whose choice every run measures."""
    if not isinstance(getattr(fn, "__self__", None), torch.nn.Module):
        return None
    return f"{machine_key()} {file_stem(fn, signature, {'mode': 'auto'})}"


def _is_cuda(device: torch.device | None) -> bool:
    return device is not None and device.type == "cuda"


def median_times(
    timings: Mapping[str, list[float]], untimed: Mapping[str, int]
) -> dict[str, float]:
    """``auto``'s measure of each way: the median of its times after its first
    ``untimed[way]`` (which compile, warm up or record)."""
    return {way: statistics.median(times[untimed[way] :]) for way, times in timings.items()}


def sync(result: Any) -> None:
    """Waits for ``result``'s device work (timing a GPU call)."""
    for leaf in tree_flatten(result)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
            torch.cuda.synchronize(leaf.device)
            return


def compile_update(algorithm: Algorithm, mode: str) -> None:
    """Installs an `UpdateCompiler` of ``mode`` as ``algorithm``'s accelerator (``"off"``:
    none, the update runs eagerly); ``"auto"``'s choices of an earlier compiler carry over."""
    if mode == "off":
        algorithm.set_accelerator(None)
        return
    previous = algorithm.accelerator
    algorithm.set_accelerator(
        UpdateCompiler(
            mode,
            lambda: algorithm.optimizers().values(),
            lambda: algorithm.training,
            previous.choices if previous is not None else None,
            dynamic=algorithm.variable_batch_size,
        )
    )
