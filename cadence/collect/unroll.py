"""`Collector`: runs an algorithm's `rollout_step` in a batched environment.

The collector carries the algorithm's recurrent state from step to step and across
unrolls: where a time step is FIRST (a new episode) the state is reset to
``algorithm.initial_state``'s before ``rollout_step`` sees it, and the state each step
started from is stored with the experience (``Experience.state``), so a replayed
sequence can start from it.

With data transformers the algorithm sees transformed time steps, while each
step keeps the raw one in ``untransformed``: the replay buffer stores raw steps
and episode returns are those of the raw rewards.

With a compiled update (`Algorithm.set_compile`) and a tensor-native env without data
transformers, the unroll runs as compiled graphs (`TensorEnvironment.step_in_graph`):
``rollout_step``, the env step and the stacking of the unroll's buffers for up to
``steps_per_graph`` steps per call (`MAX_STEPS_PER_GRAPH` unless told; the whole unroll in
one call when ``unroll_length`` is at most that), giving the eager unroll's numbers.
Under ``compile: reduce-overhead`` on a GPU those calls replay as CUDA graphs
(`cadence.algorithms.cuda_graphs`), as the updates do; the env's state then passes
through each call's inputs and outputs (`TensorEnvironment.graph_state`). Under
``compile: auto`` the collector times its first unrolls eagerly and compiled (its
compiled acting step beside a Gymnasium env, or its compiled steps in a tensor-native
one) and keeps the faster way (`Collector.compile_choice`, checkpointed with its state),
which it records for the machine: a later run with the same algorithm, env and unroll
takes it from its first unroll (`cadence.algorithms.compiled.AUTO_RECORD`).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, reset_state
from cadence.algorithms.compiled import (
    CompiledWithFallback,
    auto_record_key,
    graph_options,
    median_times,
    record_auto_choice,
    recorded_auto_choice,
    sync,
)
from cadence.algorithms.cuda_graphs import CudaGraphReplay
from cadence.collect.episode_stats import EpisodeStats
from cadence.data.devices import same_device
from cadence.data.experience import Experience
from cadence.data.nest import Nest, flatten, map_structure
from cadence.data.time_step import TimeStep
from cadence.envs.environment import Environment
from cadence.transforms.transformer import DataTransformer

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


class Collector:
    """Unrolls ``algorithm`` in ``env``, carrying the current time step between unrolls.

    Args:
        env: the training environments.
        algorithm: provides `rollout_step` and `initial_state`.
        unroll_length: steps per environment per `unroll`.
        device: where the algorithm acts; time steps are moved there. None: where
            ``algorithm``'s parameters are (the CPU for one without any, or that is not
            an ``nn.Module``).
        transformer: data transformers applied to every time step (training mode
            updates their statistics); None for none.
        agent_info: per-slot parameters passed to every ``rollout_step`` (a nest of
            ``[B, ...]`` tensors, e.g. ``{"epsilon": ...}``); ``()`` for none.
        action_repeat: simulator steps per env step (``env.action_repeat``): env steps
            are counted in simulator steps.
        learner_device: where ``algorithm`` learns, when it is not ``device``: the
            collector then acts with a copy of ``algorithm`` on ``device`` (`acting`),
            refreshed from it before every unroll, and moves each unroll's experience to
            ``learner_device`` (through pinned memory from the CPU to a GPU).
        steps_per_graph: with a compiled unroll, steps per graph call at most (the
            largest divisor of ``unroll_length`` up to it): more steps run faster but
            take longer to trace at every start and to compile (`MAX_STEPS_PER_GRAPH`).
        acting_threads: torch's intra-op threads while it unrolls, where fewer than the
            process's (the cores env worker processes leave them); None: the process's.
    """

    def __init__(
        self,
        env: Environment,
        algorithm: Algorithm,
        unroll_length: int,
        device: Any = None,
        transformer: DataTransformer | None = None,
        agent_info: Nest = (),
        action_repeat: int = 1,
        learner_device: Any = None,
        steps_per_graph: int = MAX_STEPS_PER_GRAPH,
        acting_threads: int | None = None,
    ):
        self.env = env
        self.acting_threads = acting_threads
        self.algorithm = algorithm
        self.unroll_length = unroll_length
        if device is None:  # an algorithm is a module, or any object with its two methods
            parameters = algorithm.parameters() if isinstance(algorithm, torch.nn.Module) else ()
            device = next((p.device for p in parameters), torch.device("cpu"))
        self.device = torch.device(device)
        self.learner_device = (
            self.device if learner_device is None else torch.device(learner_device)
        )
        self.acting = algorithm
        self._refresh_pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        if self.learner_device != self.device:
            self.acting = _acting_copy(algorithm, self.device, self.learner_device)
            self._refresh_pairs = _tensor_pairs(self.acting, algorithm)
        self.transformer = transformer
        self.agent_info = agent_info
        self.action_repeat = action_repeat
        if steps_per_graph < 1:
            raise ValueError(f"steps_per_graph must be at least 1; got {steps_per_graph}")
        self.steps_per_graph = steps_per_graph
        self.episode_stats = EpisodeStats(env.batch_size, self.device)
        self._time_step: TimeStep | None = None
        self._state: Nest = ()
        self._transform_state: Nest = ()
        self._compiled_steps: CompiledWithFallback | None = None
        self._steps_replay: CudaGraphReplay | None = None
        self._compiled_act: CompiledWithFallback | None = None
        self.compile_choice: str | None = None
        """``compile: auto``'s way for the unroll, ``"eager"`` or ``"compiled"``, once
        `AUTO_TIMED_UNROLLS` unrolls each way have measured it (None before)."""
        self._unroll_timings: dict[str, list[float]] = {"eager": [], "compiled": []}
        self._record_key: str | None = None  # `_auto_record_key` ("": none), once looked up

    @torch.no_grad()
    def unroll(
        self, policy: Callable[[TimeStep, Nest], AlgStep] | None = None
    ) -> tuple[Experience, dict[str, torch.Tensor]]:
        """Runs ``unroll_length`` steps; returns the experience and completed-episode stats.

        Args:
            policy: acts instead of the algorithm's ``rollout_step`` (same signature), e.g.
                the random actions of an off-policy algorithm's initial collection.
        """
        threads = torch.get_num_threads()
        if self.acting_threads is None or self.acting_threads >= threads:
            return self._unroll(policy)
        torch.set_num_threads(self.acting_threads)
        try:
            return self._unroll(policy)
        finally:
            torch.set_num_threads(threads)

    def _unroll(
        self, policy: Callable[[TimeStep, Nest], AlgStep] | None
    ) -> tuple[Experience, dict[str, torch.Tensor]]:
        self._refresh()
        initial_state = self.acting.initial_state(self.env.batch_size)
        stateful = bool(flatten(initial_state))
        if self._time_step is None:
            if self.transformer is not None:
                self._transform_state = self.transformer.initial_state(self.env.batch_size)
            self._time_step = self._transform(self.env.reset().to(self.device))
            self._state = initial_state
        mode = self._compile_mode() if policy is None else None
        measuring = policy is None and self._measuring()
        start = time.perf_counter()
        if mode is not None and self._steps_compile(mode):
            time_steps, actions, infos, states = self._compiled_unroll(initial_state, stateful)
        else:
            act = policy or (self._act(mode, stateful) if mode else self.acting.rollout_step)
            time_steps, actions, infos, states = self._eager_unroll(act, initial_state, stateful)
        experience = Experience(time_step=time_steps, action=actions, info=infos, state=states)
        if measuring:
            sync(actions)  # a GPU's work done
            self._note_unroll("eager" if mode is None else "compiled", time.perf_counter() - start)
        raw = experience.time_step.untransformed
        stats = self.episode_stats.update((experience.time_step if raw is None else raw)[1:])
        if self.learner_device != self.device:
            experience = _move(experience, self.learner_device)
            stats = _move(stats, self.learner_device)
        return experience, stats

    def _refresh(self) -> None:
        """Copies the learner's parameters and buffers into the acting copy (if any)."""
        if not self._refresh_pairs:
            return
        with torch.no_grad():
            for acting, learning in self._refresh_pairs:
                acting.copy_(learning, non_blocking=True)
        if self.learner_device.type == "cuda":
            torch.cuda.synchronize(self.learner_device)

    def _eager_unroll(
        self, act: Callable[[TimeStep, Nest, Nest], AlgStep], initial_state: Nest, stateful: bool
    ) -> tuple[TimeStep, Nest, Nest, Nest]:
        """One step at a time: the stacked time steps (the current one first), actions,
        infos and states (``()`` for a stateless algorithm)."""

        # An env on the acting device (the usual case) hands over its time steps as they
        # are: `TimeStep.to` rebuilds one (4 us of a 100 us step of 8 CartPoles).
        on_device = same_device(self.env.device, self.device)

        def env_step(action: Nest) -> TimeStep:
            time_step = self.env.step(action)
            return self._transform(time_step if on_device else time_step.to(self.device))

        *stacked, self._time_step, self._state = _run_steps(
            act, env_step, self._time_step, self._state, self.agent_info, initial_state,
            self.unroll_length, stateful,
        )  # fmt: skip
        return tuple(stacked)

    def _compiled_unroll(
        self, initial_state: Nest, stateful: bool
    ) -> tuple[TimeStep, Nest, Nest, Nest]:
        """`_eager_unroll` as compiled calls of `_run_steps` (with the env's
        ``step_in_graph``), each several steps."""
        graph = self._steps_call()
        length = _steps_per_call(self.unroll_length, self.steps_per_graph)
        chunks = []
        for index in range(self.unroll_length // length):
            args = (self._time_step, self._state, self.agent_info, initial_state, length, stateful)
            if self._steps_replay is None:
                outputs = graph(*args)
            else:  # the env's state through the graph's inputs and outputs
                *outputs, env_state = graph(self.env.graph_state(), *args)
                self.env.bind_graph_state(env_state)
            time_steps, actions, infos, states, self._time_step, self._state = outputs
            if index:  # its first time step ends the chunk before
                time_steps = time_steps[1:]
            chunks.append((time_steps, actions, infos, states))
        if len(chunks) == 1:
            return chunks[0]
        time_steps = TimeStep.cat([chunk[0] for chunk in chunks])
        return time_steps, *map_structure(lambda *xs: torch.cat(xs), *[c[1:] for c in chunks])

    @property
    def num_env_steps_per_unroll(self) -> int:
        """Simulator steps per unroll: ``unroll_length x batch size x action_repeat``."""
        return self.unroll_length * self.env.batch_size * self.action_repeat

    def state_dict(self) -> dict[str, Any]:
        """The in-progress episode: current time step (and its raw form), recurrent and
        transformer state, episode sums."""
        return {
            # Its own copy: a back end's time step may view a larger block (a slab of
            # `TimeStepBuffer`), all of which saving the view would write.
            "time_step": None if self._time_step is None else self._time_step.clone().to_dict(),
            "state": self._state,
            "transform_state": self._transform_state,
            "episode_stats": self.episode_stats.state_dict(),
            "compile_choice": self.compile_choice,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        time_step = state["time_step"]
        self._time_step = None if time_step is None else TimeStep.from_dict(time_step)
        if self._time_step is not None:
            self._time_step = self._time_step.to(self.device)
        self._state = map_structure(lambda x: x.to(self.device), state["state"])
        self._transform_state = state.get("transform_state", ())
        self.episode_stats.load_state_dict(state["episode_stats"])
        self.compile_choice = state.get("compile_choice")

    def _compile_mode(self) -> str | None:
        """The compile mode of the acting algorithm's update, or None where it runs eagerly
        (a duck-typed policy has no compiler); the unroll compiles with it."""
        compiler = getattr(self.acting, "compiler", None)
        modes = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "auto")
        if compiler is None or compiler.mode not in modes:
            self._compiled_steps = self._steps_replay = self._compiled_act = None
            return None
        if compiler.mode == "auto":  # this unroll's way, while measuring, or the faster
            return None if self._auto_way() == "eager" else "default"
        # CUDA graphs replay the compiled unroll (`_steps_compile`), not the acting step
        # of an env stepping outside the graph, which waits for the host anyway.
        return "default" if compiler.mode == "reduce-overhead" else compiler.mode

    def _auto_way(self) -> str:
        """``compile: auto``'s way for the next unroll: the choice, once made or as this
        machine's first run made it (`_recorded_choice`); before, each way in turn."""
        if self.compile_choice is None:
            self.compile_choice = self._recorded_choice()
        if self.compile_choice is not None:
            return self.compile_choice
        timings = self._unroll_timings
        return "eager" if len(timings["eager"]) <= len(timings["compiled"]) else "compiled"

    def _recorded_choice(self) -> str | None:
        """The way this machine's first run with this algorithm, env and unroll chose
        (`cadence.algorithms.compiled.AUTO_RECORD`), looked up at the first unroll only."""
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
        env = self.env
        signature = (
            "unroll", type(env).__qualname__, repr(env.observation_spec),
            repr(env.action_spec), env.batch_size, self.unroll_length, self.steps_per_graph,
        )  # fmt: skip
        return auto_record_key(self.acting.rollout_step, signature) or ""

    def _measuring(self) -> bool:
        """Whether this unroll is timed for ``compile: auto``."""
        compiler = getattr(self.acting, "compiler", None)
        return compiler is not None and compiler.mode == "auto" and self.compile_choice is None

    def _note_unroll(self, way: str, seconds: float) -> None:
        """Records an unroll timed ``way``; chooses once each way has its timed unrolls
        (eager, where compiling failed)."""
        timings = self._unroll_timings
        timings[way].append(seconds)
        if min(len(t) for t in timings.values()) < 1 + AUTO_TIMED_UNROLLS:
            return
        medians = median_times(timings, {"eager": 1, "compiled": 1})
        graphs = (self._compiled_steps, self._compiled_act)
        failed = any(graph is not None and graph.failed for graph in graphs)
        self.compile_choice = "eager" if failed else min(medians, key=medians.__getitem__)
        if self._record_key and not failed:
            record_auto_choice(self._record_key, self.compile_choice)
        logger.info(
            "compile=auto: the unroll: eager %.2f ms, compiled %.2f ms: %s",
            1e3 * medians["eager"], 1e3 * medians["compiled"], self.compile_choice,
        )  # fmt: skip

    def _steps_compile(self, mode: str) -> bool:
        """Whether whole steps run compiled: the env is tensor-native on the acting device
        and no data transformer runs between it and the algorithm."""
        step_in_graph = getattr(self.env, "step_in_graph", None)
        if step_in_graph is None or self.transformer is not None:
            return False
        if not same_device(self.env.device, self.device):  # "cuda" is the current cuda:N
            return False
        if self._compiled_steps is None:
            steps = _UnrollSteps(self.acting, self.env)
            if not self._replays_graphs():
                self._compiled_steps = self._compile(steps.unroll_steps, mode)
                return True
            # Only then does the env's state pass through the graph's inputs and outputs:
            # 4 more of each cost a PPO unroll of 8 CartPoles on the CPU 5%.
            self._compiled_steps = self._compile(steps.replayable_steps, mode)
            self._steps_replay = CudaGraphReplay(
                self._compiled_steps, self._compiled_steps.exact_signature, "the unroll"
            )
        return True

    def _replays_graphs(self) -> bool:
        """Whether the compiled unroll replays as CUDA graphs: ``reduce-overhead`` on a GPU."""
        return self.acting.compiler.replays_on(self.device)

    def _steps_call(self) -> Callable[..., Any]:
        """The compiled unroll's calls: replayed as CUDA graphs (under ``reduce-overhead`` on
        a GPU) once the graph has compiled."""
        graph, replay = self._compiled_steps, self._steps_replay
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
        signature is worked out at the first two steps only (`_SteadyInputs`).
        """
        if self._compiled_act is None:
            self._compiled_act = self._compile(self.acting.rollout_step, mode)
        uniform = getattr(self.env, "uniform_time_steps", False)
        if stateful or self.transformer is not None or not uniform:
            return self._compiled_act
        return _SteadyInputs(self._compiled_act)

    def _compile(self, fn: Callable[..., Any], mode: str) -> CompiledWithFallback:
        return CompiledWithFallback(
            fn,
            mode,
            on_compile=self.acting.compiler.note_compiling,
            options=graph_options(self.device),
        )

    def _transform(self, raw: TimeStep) -> TimeStep:
        if self.transformer is None:
            return raw
        time_step, self._transform_state = self.transformer.transform_time_step(
            raw, self._transform_state
        )
        return time_step.replace(untransformed=raw)


class _SteadyInputs:
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


class _UnrollSteps(torch.nn.Module):
    """`_run_steps` of an algorithm's ``rollout_step`` and a tensor env's ``step_in_graph``,
    as a method of a module: the compiled graph can then be saved whole
    (`cadence.algorithms.precompiled`), with the algorithm and the env bound again at load,
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
        return _run_steps(
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


def _acting_copy(algorithm: Algorithm, device: torch.device, learner: torch.device) -> Algorithm:
    """A copy of ``algorithm`` on ``device`` to act with; on the CPU beside a GPU learner its
    tensors are pinned, so the refresh from the learner copies without staging."""
    acting = copy.deepcopy(algorithm).to(device)
    if device.type == "cpu" and learner.type == "cuda":
        with torch.no_grad():
            for tensor in [*acting.parameters(), *acting.buffers()]:
                tensor.data = tensor.data.pin_memory()
    return acting


def _tensor_pairs(
    acting: Algorithm, learning: Algorithm
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (acting, learning) pairs of every parameter and buffer, matched by name."""
    learned = dict(learning.named_parameters()) | dict(learning.named_buffers())
    acted = dict(acting.named_parameters()) | dict(acting.named_buffers())
    if acted.keys() != learned.keys():
        raise ValueError("the acting copy's tensors do not match the learner's")
    return [(acted[name], learned[name]) for name in learned]


def _move(nest: Any, device: torch.device) -> Any:
    """``nest`` on ``device``; from the CPU to a GPU through pinned memory, asynchronously."""
    pin = device.type == "cuda"

    def move(x: torch.Tensor) -> torch.Tensor:
        if pin and x.device.type == "cpu":
            return x.pin_memory().to(device, non_blocking=True)
        return x.to(device)

    if isinstance(nest, Experience):
        return Experience(
            time_step=nest.time_step.map(move),
            action=map_structure(move, nest.action),
            info=map_structure(move, nest.info),
            state=map_structure(move, nest.state),
        )
    return map_structure(move, nest)


def _run_steps(
    act: Callable[[TimeStep, Nest, Nest], AlgStep],
    env_step: Callable[[Nest], TimeStep],
    time_step: TimeStep,
    state: Nest,
    agent_info: Nest,
    initial_state: Nest,
    length: int,
    stateful: bool,
) -> tuple[TimeStep, Nest, Nest, Nest, TimeStep, Nest]:
    """``length`` steps from ``time_step`` and ``state``: the stacked time steps (the given
    one first), actions, infos and states (``()`` when not ``stateful``; each the state its
    step started from, reset where the step is FIRST), then the last time step and state."""
    time_steps, actions, infos, states = [time_step], [], [], []
    for _ in range(length):
        if stateful:
            state = reset_state(time_step.step_type, state, initial_state)
            states.append(state)
        step = act(time_step, state, agent_info)
        state = step.state
        time_step = env_step(step.output)
        time_steps.append(time_step)
        actions.append(step.output)
        infos.append(step.info)
    stacked = TimeStep.stack(time_steps), _stack(actions), _stack(infos)
    return (*stacked, _stack(states) if stateful else (), time_step, state)


def _stack(items: list[Nest]) -> Nest:
    return map_structure(lambda *xs: torch.stack(xs), *items)


def _steps_per_call(unroll_length: int, most: int) -> int:
    """The largest divisor of ``unroll_length`` up to ``most``."""
    return max(n for n in range(1, most + 1) if unroll_length % n == 0)
