"""`CompiledUnroll`: the collector's unroll strategy that compiles acting, or whole steps.

The trainer injects it into a `cadence.collect.Collector` (`Collector.set_unroll_strategy`)
when the algorithm's update is compiled. With a tensor-native env without data transformers
the unroll runs as compiled graphs (`TensorEnvironment.step_in_graph`): ``rollout_step``, the
env step and the stacking of the unroll's buffers for up to ``steps_per_graph`` steps per
call (`MAX_STEPS_PER_GRAPH` unless told; the whole unroll in one call when ``unroll_length``
is at most that), giving the eager unroll's numbers. Beside a Gymnasium env, the acting step
is compiled. Under ``compile: reduce-overhead`` on a GPU the compiled unroll's calls replay
as CUDA graphs (`cadence.accel.cuda_graphs`), as the updates do; the env's state then passes
through each call's inputs and outputs (`TensorEnvironment.graph_state`). Under
``compile: auto`` it times its first unrolls eagerly and compiled and keeps the faster way
(`CompiledUnroll.choice`, checkpointed with the collector's state), which it records for the
machine: a later run with the same algorithm, env and unroll takes it from its first unroll
(`cadence.accel.update_compiler.AUTO_RECORD`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from cadence.accel.compile_cache import graph_options
from cadence.accel.compiled_function import CompiledWithFallback
from cadence.accel.cuda_graphs import CudaGraphReplay
from cadence.accel.update_compiler import (
    UpdateCompiler,
    auto_record_key,
    median_times,
    record_auto_choice,
    recorded_auto_choice,
    sync,
)
from cadence.algorithms.algorithm import Algorithm, AlgStep
from cadence.collect.unroll import Collector, UnrolledSteps, run_steps
from cadence.data.devices import same_device
from cadence.data.nest import Nest, map_structure
from cadence.data.time_step import TimeStep
from cadence.envs.environment import Environment

logger = logging.getLogger(__name__)

AUTO_TIMED_UNROLLS = 3
"""``compile: auto``: unrolls timed each way, after an untimed first each (which
compiles), before the collector keeps the faster way."""

MAX_STEPS_PER_GRAPH = 8
"""Unroll steps one compiled call runs at most. The graph holds every step's ops (the loop
is unrolled when compiled), so its compile time grows with them while the gain per step
shrinks: in PPO's training loop on 8 tensor CartPoles (one thread), an unroll of 32 steps
took 10.7 ms in 32 one-step calls, 5.3 ms in 4 calls of 8 and 4.9 ms in one call of 32,
whose graph took 4.2 s to load from a warm cache (8 steps: 1.7 s) and 41 s to compile on
an empty one (14 s). An unroll runs in calls of the largest divisor of ``unroll_length``
up to this."""

COMPILED_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "auto")
"""The update's compile modes under which the unroll compiles too."""


class CompiledUnroll:
    """The unroll strategy of a collector whose algorithm's update is compiled.

    Args:
        collector: the collector it unrolls for (its env, acting algorithm, device and
            data transformer decide what compiles).
        steps_per_graph: steps per compiled call of a tensor-native env's unroll at most
            (the largest divisor of ``unroll_length`` up to it): more steps run faster but
            take longer to trace at every start and to compile (`MAX_STEPS_PER_GRAPH`).
    """

    def __init__(self, collector: Collector, steps_per_graph: int = MAX_STEPS_PER_GRAPH):
        if steps_per_graph < 1:
            raise ValueError(f"steps_per_graph must be at least 1; got {steps_per_graph}")
        self.collector = collector
        self.steps_per_graph = steps_per_graph
        self.compiled_steps: CompiledWithFallback | None = None
        """The compiled unroll steps of a tensor-native env (None: none compiled)."""
        self.steps_replay: CudaGraphReplay | None = None
        self.compiled_act: CompiledWithFallback | None = None
        """The compiled acting step beside an env stepping outside the graph."""
        self.choice: str | None = None
        """``compile: auto``'s way for the unroll, ``"eager"`` or ``"compiled"``, once
        `AUTO_TIMED_UNROLLS` unrolls each way have measured it (None before)."""
        self.unroll_timings: dict[str, list[float]] = {"eager": [], "compiled": []}
        self._record_key: str | None = None  # `_auto_record_key` ("": none), once looked up

    @property
    def compiler(self) -> UpdateCompiler | None:
        """The acting algorithm's update compiler (None: its update is eager)."""
        accelerator = getattr(self.collector.acting, "accelerator", None)
        return accelerator if isinstance(accelerator, UpdateCompiler) else None

    def unroll(self, initial_state: Nest, stateful: bool) -> UnrolledSteps:
        """One unroll: compiled (whole steps, or the acting step), or eagerly while
        ``compile: auto`` measures or chose so."""
        mode = self._compile_mode()
        measuring = self._measuring()
        start = time.perf_counter()
        if mode is not None and self._steps_compile(mode):
            steps = self._compiled_unroll(initial_state, stateful)
        else:
            act = self._act(mode, stateful) if mode else self.collector.acting.rollout_step
            steps = self.collector.run_steps(act, initial_state, stateful)
        if measuring:
            sync(steps[1])  # a GPU's work done
            self._note_unroll("eager" if mode is None else "compiled", time.perf_counter() - start)
        return steps

    def _compiled_unroll(self, initial_state: Nest, stateful: bool) -> UnrolledSteps:
        """`Collector.run_steps` as compiled calls of `run_steps` (with the env's
        ``step_in_graph``), each several steps."""
        collector = self.collector
        graph = self._steps_call()
        length = _steps_per_call(collector.unroll_length, self.steps_per_graph)
        chunks = []
        for index in range(collector.unroll_length // length):
            time_step, state = collector.carried()
            args = (time_step, state, collector.agent_info, initial_state, length, stateful)
            if self.steps_replay is None:
                outputs = graph(*args)
            else:  # the env's state through the graph's inputs and outputs
                *outputs, env_state = graph(collector.env.graph_state(), *args)
                collector.env.bind_graph_state(env_state)
            time_steps, actions, infos, states, last, state = outputs
            collector.carry(last, state)
            if index:  # its first time step ends the chunk before
                time_steps = time_steps[1:]
            chunks.append((time_steps, actions, infos, states))
        if len(chunks) == 1:
            return chunks[0]
        time_steps = TimeStep.cat([chunk[0] for chunk in chunks])
        return time_steps, *map_structure(lambda *xs: torch.cat(xs), *[c[1:] for c in chunks])

    def _compile_mode(self) -> str | None:
        """The compile mode of the acting algorithm's update, or None where it runs eagerly
        (a duck-typed policy has no compiler); the unroll compiles with it."""
        compiler = self.compiler
        if compiler is None or compiler.mode not in COMPILED_MODES:
            self.compiled_steps = self.steps_replay = self.compiled_act = None
            return None
        if compiler.mode == "auto":  # this unroll's way, while measuring, or the faster
            return None if self._auto_way() == "eager" else "default"
        # CUDA graphs replay the compiled unroll (`_steps_compile`), not the acting step
        # of an env stepping outside the graph, which waits for the host anyway.
        return "default" if compiler.mode == "reduce-overhead" else compiler.mode

    def _auto_way(self) -> str:
        """``compile: auto``'s way for the next unroll: the choice, once made or as this
        machine's first run made it (`_recorded_choice`); before, each way in turn."""
        if self.choice is None:
            self.choice = self._recorded_choice()
        if self.choice is not None:
            return self.choice
        timings = self.unroll_timings
        return "eager" if len(timings["eager"]) <= len(timings["compiled"]) else "compiled"

    def _recorded_choice(self) -> str | None:
        """The way this machine's first run with this algorithm, env and unroll chose
        (`cadence.accel.update_compiler.AUTO_RECORD`), looked up at the first unroll only."""
        if self._record_key is not None:
            return None
        self._record_key = self._auto_record_key()
        choice = recorded_auto_choice(self._record_key) if self._record_key else None
        if choice not in ("eager", "compiled"):
            return None
        logger.info("compile=auto: the unroll: %s, as first measured on this machine", choice)
        return choice

    def _auto_record_key(self) -> str:
        """`auto_record_key` of the acting step, for this env (its kind, specs and batch)
        and unroll: what the unroll's choice depends on."""
        collector = self.collector
        env = collector.env
        signature = (
            "unroll", type(env).__qualname__, repr(env.observation_spec),
            repr(env.action_spec), env.batch_size, collector.unroll_length, self.steps_per_graph,
        )  # fmt: skip
        return auto_record_key(collector.acting.rollout_step, signature) or ""

    def _measuring(self) -> bool:
        """Whether this unroll is timed for ``compile: auto``."""
        compiler = self.compiler
        return compiler is not None and compiler.mode == "auto" and self.choice is None

    def _note_unroll(self, way: str, seconds: float) -> None:
        """Records an unroll timed ``way``; chooses once each way has its timed unrolls
        (eager, where compiling failed)."""
        timings = self.unroll_timings
        timings[way].append(seconds)
        if min(len(t) for t in timings.values()) < 1 + AUTO_TIMED_UNROLLS:
            return
        medians = median_times(timings, {"eager": 1, "compiled": 1})
        graphs = (self.compiled_steps, self.compiled_act)
        failed = any(graph is not None and graph.failed for graph in graphs)
        self.choice = "eager" if failed else min(medians, key=medians.__getitem__)
        if self._record_key and not failed:
            record_auto_choice(self._record_key, self.choice)
        logger.info(
            "compile=auto: the unroll: eager %.2f ms, compiled %.2f ms: %s",
            1e3 * medians["eager"], 1e3 * medians["compiled"], self.choice,
        )  # fmt: skip

    def _steps_compile(self, mode: str) -> bool:
        """Whether whole steps run compiled: the env is tensor-native on the acting device
        and no data transformer runs between it and the algorithm."""
        collector = self.collector
        step_in_graph = getattr(collector.env, "step_in_graph", None)
        if step_in_graph is None or collector.transformer is not None:
            return False
        if not same_device(collector.env.device, collector.device):  # "cuda": the current
            return False
        if self.compiled_steps is None:
            steps = UnrollSteps(collector.acting, collector.env)
            if not self.compiler.replays_on(collector.device):
                self.compiled_steps = self._compile(steps.unroll_steps, mode)
                return True
            # Only then does the env's state pass through the graph's inputs and outputs:
            # 4 more of each cost a PPO unroll of 8 CartPoles on the CPU 5%.
            self.compiled_steps = self._compile(steps.replayable_steps, mode)
            self.steps_replay = CudaGraphReplay(
                self.compiled_steps, self.compiled_steps.exact_signature, "the unroll"
            )
        return True

    def _steps_call(self) -> Callable[..., Any]:
        """The compiled unroll's calls: replayed as CUDA graphs (under ``reduce-overhead`` on
        a GPU) once the graph has compiled."""
        graph, replay = self.compiled_steps, self.steps_replay
        assert graph is not None
        if replay is None or graph.failed or not graph.is_compiled:
            return graph
        return replay

    def _act(self, mode: str, stateful: bool) -> Callable[[TimeStep, Nest, Nest], AlgStep]:
        """``rollout_step`` compiled, for an env that steps outside the graph (Gymnasium's):
        a PPO step on 8 CartPoles (one thread) acts in 31 us instead of eager's 46.

        For one unroll: where every input but the time step is the same at each step (a
        stateless algorithm) and the env's time steps share one layout
        (`Environment.uniform_time_steps`, no data transformer between), the inputs'
        signature is worked out at the first two steps only (`SteadyInputs`).
        """
        collector = self.collector
        if self.compiled_act is None:
            self.compiled_act = self._compile(collector.acting.rollout_step, mode)
        uniform = getattr(collector.env, "uniform_time_steps", False)
        if stateful or collector.transformer is not None or not uniform:
            return self.compiled_act
        return SteadyInputs(self.compiled_act)

    def _compile(self, fn: Callable[..., Any], mode: str) -> CompiledWithFallback:
        return CompiledWithFallback(
            fn,
            mode,
            on_compile=self.compiler.note_compiling,
            options=graph_options(self.collector.device),
        )


class SteadyInputs:
    """A compiled acting step for one unroll whose inputs share one signature from the
    second step on: the first step's time step is the one carried over (from the last
    unroll, a reset or a checkpoint), each later one is the env's. It works out the
    signature at those two steps and reuses the second's: working it out each step cost
    5 us in a tight loop, 12 us of a step of 8 CartPoles in a PPO unroll."""

    def __init__(self, graph: CompiledWithFallback):
        self.graph = graph
        self.calls = 0
        self.signature: Any = None

    def __call__(self, *args: Any) -> AlgStep:
        self.calls += 1
        if self.calls <= 2:
            self.signature = self.graph.exact_signature(args)
        return self.graph.call_with(self.signature, *args)


class UnrollSteps(torch.nn.Module):
    """`run_steps` of an algorithm's ``rollout_step`` and a tensor env's ``step_in_graph``,
    as a method of a module: the compiled graph can then be saved whole
    (`cadence.accel.precompiled`), with the algorithm and the env bound again at load,
    so a warm start loads the unroll's graph instead of tracing its steps."""

    def __init__(self, algorithm: Algorithm, env: Environment):
        super().__init__()
        self.algorithm = algorithm
        self.env = env

    def unroll_steps(
        self,
        time_step: TimeStep,
        state: Nest,
        agent_info: Nest,
        initial_state: Nest,
        length: int,
        stateful: bool,
    ) -> tuple[TimeStep, Nest, Nest, Nest, TimeStep, Nest]:
        return run_steps(
            self.algorithm.rollout_step, self.env.step_in_graph, time_step, state,
            agent_info, initial_state, length, stateful,
        )  # fmt: skip

    def replayable_steps(
        self, env_state: dict[str, torch.Tensor], *args: Any
    ) -> tuple[TimeStep, Nest, Nest, Nest, TimeStep, Nest, dict[str, torch.Tensor]]:
        """`unroll_steps` from the env's `graph_state` ``env_state``, returning the stepped
        one last: a CUDA graph replays on copies of its inputs, at fixed addresses, and
        runs none of the Python that rebinds the env's attributes."""
        self.env.bind_graph_state(env_state)
        return (*self.unroll_steps(*args), self.env.graph_state())

    def extra_repr(self) -> str:
        # Part of a saved graph's name (`precompiled`): the env is not a module.
        return f"env={self.env!r}"


def _steps_per_call(unroll_length: int, most: int) -> int:
    """The largest divisor of ``unroll_length`` up to ``most``."""
    return max(n for n in range(1, most + 1) if unroll_length % n == 0)
