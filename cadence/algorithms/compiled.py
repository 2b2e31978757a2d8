"""The compiled update: an algorithm's whole minibatch step as one ``torch.compile`` graph.

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
run of a config loads its graphs instead of compiling them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import operator
import os
import shutil
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten

from cadence.algorithms.compile_config import COMPILE_MODES, MAX_UPDATES_PER_GRAPH
from cadence.algorithms.cuda_graphs import WARMUP_CALLS, CudaGraphReplay
from cadence.algorithms.precompiled import (
    Precompiled,
    file_stem,
    load_or_compile,
    machine,
    precompilable,
)
from cadence.data.time_step import TimeStep
from cadence.machine_record import machine_key, recall, record_first
from cadence.networks.matmul import cpu_matmul

logger = logging.getLogger(__name__)

GUARDED_CALLS = 2
"""Calls of a signature that evaluate all guards before later ones skip them."""

AUTO_TIMED_CALLS = 5
"""``"auto"``: calls timed each way (after one untimed call each) before choosing."""

AUTO_RECORD = "compile_auto.json"
"""``"auto"``'s choices by machine and graph (`auto_record_key`), in the compile cache
folder: the first run to choose records them, and later runs take them from their first
call (`cadence.machine_record`)."""


def compile_cache_dir() -> Path:
    """Where compiled artifacts persist: ``$CADENCE_COMPILE_CACHE``, else
    ``$XDG_CACHE_HOME/cadence/torch-compile`` (``~/.cache/...``; PyTorch's own default
    is under ``/tmp``, which a reboot empties). The caches key every entry by the torch
    version, the code and the shapes, so one folder serves every config and version."""
    explicit = os.environ.get("CADENCE_COMPILE_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "cadence" / "torch-compile"


def configure_inductor() -> Path:
    """Points PyTorch's compile caches at `compile_cache_dir` (unless the user set
    ``TORCHINDUCTOR_CACHE_DIR``) and turns them on, makes compiled random ops draw
    eager's numbers (``fallback_random``: a compiled SAC samples the actions an eager one
    would) and CPU kernels compute tanh from one exp; returns the cache folder in use."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # PyTorch writes its default into the variable once it has looked for one.
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, default_cache_dir()):
        directory = compile_cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    inductor_config.fallback_random = True
    # CPU kernels take tanh as 2 / (1 + exp(-2x)) - 1: within 2e-7 of torch.tanh (eager is
    # within 6e-8), and a 64x64 tanh network's compiled PPO loop runs 13% faster.
    inductor_config.cpp.use_decompose_tanh = True
    # A compiled call checks every input's sizes and strides against the graph's
    # (`assert_size_stride`, about 0.3 us each: 20 us of a 64-input update). Dynamo's
    # guards check the same, and `CompiledWithFallback` skips those only for inputs of a
    # signature already seen (contiguity included), so the checks would repeat them.
    inductor_config.size_asserts = False
    functorch_config.enable_autograd_cache = True
    directory = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    with contextlib.suppress(Exception):  # only a shortcut: inductor checks by itself
        if check_vec_isa(directory):
            inductor_config.cpp.vec_isa_ok = True
    return directory


def check_vec_isa(directory: Path) -> bool:
    """Whether this machine's SIMD instruction sets pass inductor's check, remembered.

    Inductor otherwise checks them in every process (a test program built and loaded in
    a child process per instruction set: about a second of every warm start). The first
    check on a machine runs it and records a pass in ``directory``, keyed by the CPU's
    flags, the torch version and the compiler (a folder shared by different machines
    keeps one record per machine). Telling inductor so (``cpp.vec_isa_ok``) also enters
    its cache keys, so every run, the first included, must tell it alike.
    """
    import torch._inductor.config as inductor_config
    from torch._inductor import cpu_vec_isa

    marker = _vec_isa_marker(directory)
    if marker.exists():
        return True
    if inductor_config.cpp.vec_isa_ok is not None:
        return False
    isa_list = cpu_vec_isa.valid_vec_isa_list()
    if not (isa_list and all(isa_list)):
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return True


def _vec_isa_marker(directory: Path) -> Path:
    import torch._inductor.config as inductor_config

    key = "|".join((torch.__version__, machine(), str(inductor_config.cpp.cxx)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return directory / "cadence" / f"vec-isa-ok-{digest}"


def cpp_compiler_available() -> bool:
    """Whether inductor's CPU back end finds a C++ compiler."""
    import torch._inductor.config as inductor_config

    candidates = inductor_config.cpp.cxx
    names = [c for c in (candidates if isinstance(candidates, tuple) else (candidates,)) if c]
    return any(shutil.which(name) for name in [*names, "g++", "clang++"])


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
        """Set while a CUDA graph records a call (`cadence.algorithms.cuda_graphs`): a call
        that would compile raises instead (a compile runs CUDA work of its own)."""
        self.dynamic = dynamic
        self.state_key = state_key
        self.on_compile = on_compile
        self._guarded_calls: dict[Hashable, int] = {}
        self.precompile = precompilable(fn) and os.environ.get("CADENCE_PRECOMPILE") != "0"
        # Per signature: its graph saved whole (`cadence.algorithms.precompiled`), or None
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
                "torch.compile of %s failed (%s); running it eagerly", _name(self.fn), error
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
        return torch.fx.experimental._config.patch(use_duck_shape=False)

    def _guarded_call_traced(self, key: Hashable, args: tuple[Any, ...]) -> Any:
        if self.precompile and key not in self._precompiled:
            if self.forbid_compile:
                raise RuntimeError(f"{_name(self.fn)} would compile a graph for new inputs")
            self._precompiled[key] = self._load_or_compile(key, args)
        precompiled = self._precompiled.get(key)
        if precompiled is not None and precompiled.check(*args):
            return precompiled(*args)
        if self.compiled is None:  # inputs its guards reject, or none: torch.compile's way
            if self.forbid_compile:
                raise RuntimeError(f"{_name(self.fn)} would compile a graph for new inputs")
            self.compiled = torch.compile(self.fn, **self._compile_kwargs())
        stance = (
            torch.compiler.set_stance("fail_on_recompile")
            if self.forbid_compile
            else contextlib.nullcontext()
        )
        with stance, torch._dynamo.config.patch(trace_autograd_ops=True):
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

    def _compile_kwargs(self) -> dict[str, Any]:
        if not self.options:
            return {"mode": self.mode, "dynamic": self.dynamic}
        # torch.compile takes a mode or options, not both: the mode as its options
        options = {**torch._inductor.list_mode_options(self.mode, self.dynamic), **self.options}
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
        described: list[Hashable] = []
        sizes: list[torch.Size] = []
        self._describe(args, described, sizes)
        state = self.state_key() if self.state_key is not None else None
        modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), cpu_matmul())
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
        elif kind in SUPPORTED_NODES:  # e.g. another registered dataclass
            children, context = SUPPORTED_NODES[kind].flatten_fn(value)
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
        name = _name(fn)
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


class GraphOptimizer:
    """One optimizer's step as the graph takes it: everything read outside the graph.

    Inside a graph, reading ``optimizer.param_groups`` would guard on every value in it,
    the learning rate included, and so recompile at every change of a schedule. This
    holds instead what the step reads, fixed: the parameters, their state tensors
    (created here as the optimizer's first step would, then gathered into one flat tensor
    per group and name, `flat`, of which the optimizer's own become views), each group's
    constants, and a 0-d tensor per group that `refresh` sets to its current learning
    rate.

    `step` is the arithmetic of PyTorch's Adam (L2 weight decay, bias corrections,
    ``eps`` outside the square root) or RMSprop (no momentum, no centring), in place.

    Adam's bias corrections depend on each parameter's step count only. Where the counts
    live on the CPU (torch's default, and a fused optimizer's on CPU parameters),
    `refresh` computes them before the call, in double precision as torch's Adam does,
    into two small tensors per group that the graph reads, a row per step the call takes
    (a call of several updates, `Algorithm.update_rows_many`, steps row ``update_index``).
    Computed inside the graph instead, they are scalar ``pow``s that inductor folds into
    every vector iteration of every parameter's loop: a compiled step of a 64x64 PPO's 9k
    parameters took 70 us that way, and of SAC's 200k parameters 460 us, against 15 and
    50 us for the arithmetic itself. Counts on an accelerator stay in the graph (reading
    them would wait for the device). The rows of a call of several steps assume that each
    one applies (`Algorithm.fuses_updates` leaves out skipping non-finite updates).

    Args:
        optimizer: a ``torch.optim.Adam`` or ``RMSprop``.
        host_corrections: compute Adam's bias corrections before each call (None: where
            the step counts are on the CPU).
        counts_on_device: keep the step counts on the parameters' device (moved there if
            on the CPU), as a CUDA graph, which runs no host work, must.

    Raises:
        NotImplementedError: another optimizer, or an option `step` does not have.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        host_corrections: bool | None = None,
        counts_on_device: bool = False,
    ):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        self.rmsprop = isinstance(optimizer, torch.optim.RMSprop)
        self.names = ("square_avg",) if self.rmsprop else ("exp_avg", "exp_avg_sq")
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        sizes = [len(group["params"]) for group in optimizer.param_groups]
        starts = [sum(sizes[:index]) for index in range(len(sizes))]
        self.members = [
            list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)
        ]
        """Each group's indices into `params`."""
        self.learning_rates = [
            torch.zeros((), device=group["params"][0].device) for group in optimizer.param_groups
        ]
        for group in optimizer.param_groups:
            on_device = counts_on_device or group.get("fused") or group.get("capturable")
            for param in group["params"]:
                state = optimizer.state[param]
                if not state:  # as the first step would make it
                    device = param.device if on_device else None
                    state["step"] = torch.zeros((), dtype=torch.float32, device=device)
                    for name in self.names:
                        state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
                elif on_device:
                    state["step"] = state["step"].to(param.device)
        self.states = [optimizer.state[p] for p in self.params]
        self.shapes = [{name: tuple(t.shape) for name, t in state.items()} for state in self.states]
        """Each parameter's state shapes, by name (read in the graph as plain numbers)."""
        self.flat = [_flatten_states([self.states[i] for i in members]) for members in self.members]
        """Per group, its states as one flat tensor per name (``step`` and the moments), of
        which the optimizer's own tensors are views; None for a group whose tensors of a
        name differ in dtype or device. The graph reads and writes these: each input a
        compiled call takes costs its Python wrapper about 0.35 us, and a 64x64 PPO's
        update read 36 state tensors (now 3)."""
        self.constants = [
            _group_constants(group, optimizer.state[group["params"][0]]["step"].device)
            for group in optimizer.param_groups
        ]
        if host_corrections is None:
            host_corrections = all(state["step"].device.type == "cpu" for state in self.states)
        use_corrections = host_corrections and not self.rmsprop
        self.corrections: list[tuple[torch.Tensor, torch.Tensor] | None] = [
            _zeros_pair(len(members), rate.device) if use_corrections else None
            for members, rate in zip(self.members, self.learning_rates, strict=True)
        ]
        """Per Adam group computed before each call: each parameter's step size (the
        learning rate over its first bias correction) and its second bias correction's
        square root, ``[MAX_UPDATES_PER_GRAPH, num_params]``, row ``k`` for the call's
        ``k``-th step (None: the graph computes them)."""

    def refresh(self, steps: int = 1) -> None:
        """Before each call: each group's learning rate into the tensor the graph reads,
        or, for a group with `corrections`, its parameters' step sizes (which hold the
        rate) and bias corrections for the ``steps`` steps the call takes."""
        if not 1 <= steps <= MAX_UPDATES_PER_GRAPH:
            raise ValueError(
                f"a compiled call takes 1 to {MAX_UPDATES_PER_GRAPH} optimizer steps; got {steps}"
            )
        for group, rate, members, corrections, flat in zip(
            self.optimizer.param_groups,
            self.learning_rates,
            self.members,
            self.corrections,
            self.flat,
            strict=True,
        ):
            lr = float(group["lr"])
            if corrections is None:
                rate.fill_(lr)
            else:  # the graph reads the step sizes, not the rate
                counts = (
                    torch.stack([self.states[i]["step"] for i in members])
                    if flat is None
                    else flat["step"]
                )
                _fill_corrections(corrections, counts.tolist(), lr, *group["betas"], steps)

    def reattach(self) -> None:
        """After ``optimizer.load_state_dict``, which makes new state tensors: their values
        copied into the ones the graph reads, and those put back in the optimizer."""
        for param, kept in zip(self.params, self.states, strict=True):
            loaded = self.optimizer.state[param]
            if loaded is not kept:
                for name, tensor in kept.items():
                    tensor.copy_(loaded[name])
                self.optimizer.state[param] = kept

    def step(
        self,
        grads: Sequence[torch.Tensor | None],
        apply: torch.Tensor | None,
        update_index: int = 0,
    ) -> None:
        """``optimizer.step()`` with ``grads`` (one per parameter; None leaves one alone, as
        an eager optimizer leaves a parameter without ``.grad``); where the 0-d bool
        ``apply`` is False nothing changes (a skipped non-finite update). ``update_index``:
        which of the call's steps this is (the row of `corrections` it reads).

        Each group's parameters step together in ``torch._foreach_*`` ops: a dozen traced
        calls per group instead of a dozen per parameter, which is most of what a warm
        start spends tracing an optimizer (compiled, the arithmetic fuses alike)."""
        if len(grads) != len(self.params):
            raise ValueError(f"{len(grads)} gradients for {len(self.params)} parameters")
        for members, constants, lr, corrections, flat in zip(
            self.members,
            self.constants,
            self.learning_rates,
            self.corrections,
            self.flat,
            strict=True,
        ):
            stepped = [k for k, i in enumerate(members) if grads[i] is not None]
            if not stepped:
                continue
            params = [self.params[members[k]] for k in stepped]
            if flat is not None and len(stepped) < len(members):
                # A parameter without a gradient keeps its state: each stepped one's as a
                # view of the flat tensors, taken here, so that the graph reads those.
                views = _views(flat, [self.shapes[i] for i in members])
                flat, states = None, [views[k] for k in stepped]
            else:
                states = [self.states[members[k]] for k in stepped]
            self._step_group(
                params,
                [grads[members[k]] for k in stepped],
                states,
                constants,
                lr,
                apply,
                None if corrections is None else _pick(corrections, update_index, stepped),
                flat,
            )

    def _step_group(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, torch.Tensor]],
        constants: dict[str, torch.Tensor],
        lr: torch.Tensor,
        apply: torch.Tensor | None,
        corrections: list[list[torch.Tensor]] | None,
        flat: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """One group's step. With ``flat`` (every parameter of the group stepped), the
        states' arithmetic runs on the flat tensors, one list entry each, and the moments
        are split into per-parameter views for the parameters' changes."""
        if "weight_decay" in constants:
            grads = torch._foreach_add(grads, torch._foreach_mul(params, constants["weight_decay"]))
        if flat is None:
            state_grads = grads
            old_steps = [state["step"] for state in states]
            olds = {name: [state[name] for state in states] for name in self.names}
        else:
            state_grads = [torch.cat([grad.reshape(-1) for grad in grads])]
            old_steps = [flat["step"]]
            olds = {name: [flat[name]] for name in self.names}

        def per_parameter(values: list[torch.Tensor]) -> list[torch.Tensor]:
            if flat is None:
                return values
            pieces = values[0].split([param.numel() for param in params])
            return [piece.view(param.shape) for piece, param in zip(pieces, params, strict=True)]

        steps = torch._foreach_add(old_steps, 1)
        squares = torch._foreach_mul(state_grads, state_grads)
        if self.rmsprop:
            alpha = constants["alpha"]
            old_square = olds["square_avg"]
            square_avg = torch._foreach_mul(old_square, alpha)
            torch._foreach_add_(square_avg, torch._foreach_mul(squares, 1 - alpha))
            denom = torch._foreach_sqrt(per_parameter(square_avg))
            torch._foreach_add_(denom, [constants["eps"]] * len(denom))
            change = torch._foreach_div(torch._foreach_mul(grads, lr), denom)
            updates = [(old_square, square_avg)]
        else:
            beta1, beta2 = constants["beta1"], constants["beta2"]
            old_avg, old_square = olds["exp_avg"], olds["exp_avg_sq"]
            # lerp's arithmetic: exp_avg + (1 - beta1) * (grad - exp_avg)
            exp_avg = torch._foreach_sub(state_grads, old_avg)
            torch._foreach_mul_(exp_avg, 1 - beta1)
            torch._foreach_add_(exp_avg, old_avg)
            exp_avg_sq = torch._foreach_mul(old_square, beta2)
            torch._foreach_add_(exp_avg_sq, torch._foreach_mul(squares, 1 - beta2))
            if corrections is not None:
                step_sizes, roots = corrections
            else:
                # 1 - beta ** step, per parameter's own step (on the steps' device)
                counts = steps if flat is None else list(steps[0].unbind())
                powers1 = torch._foreach_pow([constants["step_beta1"]] * len(counts), counts)
                powers2 = torch._foreach_pow([constants["step_beta2"]] * len(counts), counts)
                bias_correction1 = torch._foreach_neg(powers1)
                bias_correction2 = torch._foreach_neg(powers2)
                torch._foreach_add_(bias_correction1, 1)
                torch._foreach_add_(bias_correction2, 1)
                roots = torch._foreach_sqrt(bias_correction2)
                step_sizes = torch._foreach_div([lr] * len(params), bias_correction1)
            denom = torch._foreach_div(torch._foreach_sqrt(per_parameter(exp_avg_sq)), roots)
            torch._foreach_add_(denom, [constants["eps"]] * len(denom))
            change = torch._foreach_div(
                torch._foreach_mul(per_parameter(exp_avg), step_sizes), denom
            )
            updates = [(old_avg, exp_avg), (old_square, exp_avg_sq)]
        updates += [(old_steps, steps)]

        def write(targets: list[torch.Tensor], values: list[torch.Tensor], each: bool) -> None:
            if apply is not None:
                values = [torch.where(apply, v, t) for v, t in zip(values, targets, strict=True)]
            if not each:
                torch._foreach_copy_(targets, values)
                return
            for target, value in zip(targets, values, strict=True):
                target.copy_(value)

        for targets, values in updates:
            write(targets, values, each=False)
        # One copy per parameter on a GPU: with one foreach copy, inductor (2.11, on an H200)
        # scheduled a fused kernel computing the update's loss terms after it, so the losses
        # an A2C update reported were those of the stepped parameters (its steps themselves
        # were right); copied one by one, they were eager's, though in a graph then broken
        # elsewhere (docs/compile.md).
        write(params, torch._foreach_sub(params, change), each=params[0].is_cuda)


def _flatten_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor] | None:
    """One flat tensor per state name holding every ``state[name]``, each replaced by its
    view into it; None (nothing replaced) where a name's tensors differ in dtype or
    device (or the states differ in names)."""
    if not states or any(state.keys() != states[0].keys() for state in states):
        return None
    names = list(states[0])
    for name in names:
        if len({(state[name].dtype, state[name].device) for state in states}) != 1:
            return None
    flat = {}
    for name in names:
        tensors = [state[name] for state in states]
        flat[name] = torch.cat([tensor.detach().reshape(-1) for tensor in tensors])
        pieces = flat[name].split([tensor.numel() for tensor in tensors])
        for state, piece, tensor in zip(states, pieces, tensors, strict=True):
            state[name] = piece.view(tensor.shape)
    return flat


def _views(
    flat: dict[str, torch.Tensor], shapes: list[dict[str, tuple[int, ...]]]
) -> list[dict[str, torch.Tensor]]:
    """A group's per-parameter states (of these shapes) as views of its flat tensors."""
    states: list[dict[str, torch.Tensor]] = [{} for _ in shapes]
    for name, tensor in flat.items():
        sizes = [math.prod(shape[name]) for shape in shapes]
        for state, piece, shape in zip(states, tensor.split(sizes), shapes, strict=True):
            state[name] = piece.view(shape[name])
    return states


def _pick(
    corrections: tuple[torch.Tensor, ...], row: int, stepped: list[int]
) -> list[list[torch.Tensor]]:
    """Each of ``corrections``' row ``row`` at the positions ``stepped``: one traced op per
    tensor (an index per position cost the trace 0.1 s for 12 parameters)."""
    return [[parts[k] for k in stepped] for parts in (c[row].unbind() for c in corrections)]


def _zeros_pair(size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (MAX_UPDATES_PER_GRAPH, size)
    return torch.zeros(shape, device=device), torch.zeros(shape, device=device)


def _fill_corrections(
    corrections: tuple[torch.Tensor, torch.Tensor],
    steps: list[float],
    lr: float,
    beta1: float,
    beta2: float,
    ahead: int = 1,
) -> None:
    """Adam's step sizes and second bias-correction roots for parameters at ``steps``
    about to take ``ahead`` more (row ``k`` for the ``k``-th), in double precision as
    ``torch.optim.Adam`` computes them."""

    def scalars(step: float) -> tuple[float, float]:
        step += 1
        return lr / (1 - beta1**step), math.sqrt(1 - beta2**step)

    step_sizes, roots = corrections
    if all(step == steps[0] for step in steps):  # the usual case: one fill per row
        if ahead == 1:  # every row: one op each, where a row's view would cost another
            size, root = scalars(steps[0])
            step_sizes.fill_(size)
            roots.fill_(root)
            return
        values = torch.tensor([scalars(steps[0] + k) for k in range(ahead)], dtype=torch.float64)
        step_sizes[:ahead].copy_(values[:, :1].expand(ahead, step_sizes.shape[1]))
        roots[:ahead].copy_(values[:, 1:].expand(ahead, roots.shape[1]))
        return
    values = torch.tensor(
        [[scalars(step + k) for step in steps] for k in range(ahead)], dtype=torch.float64
    )
    step_sizes[:ahead].copy_(values[..., 0])
    roots[:ahead].copy_(values[..., 1])


def _group_constants(group: dict[str, Any], step_device: torch.device) -> dict[str, torch.Tensor]:
    """A param group's hyperparameters as 0-d tensors on its device (no weight decay
    entry for none; Adam's betas also on ``step_device``, for the bias corrections). A
    graph reads Python floats as symbolic inputs, which the foreach ops cannot take
    (tracing restarts, specialising them, and the graph then misses the compile cache);
    tensors they take as they are."""
    device = group["params"][0].device
    values = {"eps": group["eps"], "weight_decay": group["weight_decay"]}
    if "betas" in group:
        values["beta1"], values["beta2"] = group["betas"]
    if "alpha" in group:
        values["alpha"] = group["alpha"]
    if not values["weight_decay"]:
        del values["weight_decay"]
    constants = {key: torch.tensor(float(v), device=device) for key, v in values.items()}
    if "betas" in group:
        for key in ("beta1", "beta2"):
            constants[f"step_{key}"] = torch.tensor(float(values[key]), device=step_device)
    return constants


def total_norm(grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The global 2-norm of ``grads`` (None entries left out), as ``clip_grad_norm_`` takes it."""
    norms = [torch.linalg.vector_norm(g) for g in grads if g is not None]
    return torch.linalg.vector_norm(torch.stack(norms))


def clip_grads(
    grads: list[torch.Tensor | None], max_norm: float | None
) -> tuple[list[torch.Tensor | None], torch.Tensor | None]:
    """``clip_grad_norm_``'s arithmetic on a list of gradients (None for a parameter the
    loss does not reach, kept): the clipped gradients and the norm before clipping (None,
    and the gradients unchanged, for ``max_norm`` None)."""
    if max_norm is None:
        return grads, None
    norm = total_norm(grads)
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return [None if g is None else g * scale for g in grads], norm


def _check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Raises unless `GraphOptimizer.step` reproduces ``optimizer.step()``."""
    for group in optimizer.param_groups:
        if isinstance(optimizer, torch.optim.Adam):
            unsupported = group["amsgrad"] or group["maximize"] or group["decoupled_weight_decay"]
        elif isinstance(optimizer, torch.optim.RMSprop):
            unsupported = group["momentum"] or group["centered"] or group["maximize"]
        else:
            unsupported = True
        if unsupported:
            raise NotImplementedError(
                "the compiled update steps Adam (without amsgrad, maximize or AdamW's decay) "
                f"and RMSprop (without momentum, centring or maximize), not this {optimizer!r}"
            )


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


def graph_options(device: torch.device) -> dict[str, Any] | None:
    """Inductor's options for cadence's graphs (updates, unrolls, acting steps) on
    ``device``: on the CPU their kernels are called from C++ (``cpp_wrapper``) rather than
    from a Python wrapper. Measured on one thread: a CartPole unroll of 32 steps x 8 envs
    took 1.2 ms from Python, 0.84 ms from C++; a PPO acting step 36 us, 31 us; the compiled
    PPO CartPole loop ran 2.73 s instead of 2.90 and warmed up in 1.0 s instead of 1.15 (the
    saved graphs load faster), and the model-based graphs compile faster.

    On a GPU with torch before 2.13, inductor's loop reordering after fusion is off: there
    it asserts on a fused node of SAC's and TD3's updates (``reorder_loops_by_dep_pair``),
    which then ran eagerly; torch 2.13 returns at that point instead."""
    if device.type == "cpu":
        return {"cpp_wrapper": True}
    if torch.__version__ < (2, 13):
        return {"loop_ordering_after_fusion": False}
    return None


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


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", type(fn).__name__)
