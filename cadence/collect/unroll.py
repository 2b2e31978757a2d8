"""`Collector`: runs an algorithm's `rollout_step` in a batched environment.

The collector carries the algorithm's recurrent state from step to step and across
unrolls: where a time step is FIRST (a new episode) the state is reset to
``algorithm.initial_state``'s before ``rollout_step`` sees it, and the state each step
started from is stored with the experience (``Experience.state``), so a replayed
sequence can start from it.

With data transformers the algorithm sees transformed time steps, while each
step keeps the raw one in ``untransformed``: the replay buffer stores raw steps
and episode returns are those of the raw rewards.

The seam to the optional fast path: the collector unrolls eagerly, one step at a time
(`run_steps`), unless an unroll strategy (`UnrollStrategy`, injected with
`set_unroll_strategy`: the trainer's `cadence.accel.CompiledUnroll` when a run compiles)
runs its unrolls; a strategy steps through `Collector.run_steps` or its own calls of
`run_steps`, carrying the current time step and state with `carried` and `carry`, and gives
the eager unroll's numbers. The collector never imports a strategy.

An env that steps asynchronously (`ParallelEnvironment`'s ``async_batch_size``) is
unrolled by `cadence.collect.async_unroll` (eagerly): the experience has the same
``[T, N]`` layout, each env's steps in its own column and order.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any, Protocol

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, reset_state
from cadence.collect.async_unroll import is_async, run_async_steps
from cadence.collect.episode_stats import EpisodeStats
from cadence.data.devices import same_device
from cadence.data.experience import Experience
from cadence.data.nest import Nest, flatten, map_structure
from cadence.data.time_step import TimeStep
from cadence.envs.environment import Environment
from cadence.transforms.transformer import DataTransformer

logger = logging.getLogger(__name__)

UnrolledSteps = tuple[TimeStep, Nest, Nest, Nest]
"""An unroll's stacked time steps (the current one first), actions, infos and states
(``()`` for a stateless algorithm)."""


class UnrollStrategy(Protocol):
    """Runs a collector's unrolls another way than one eager step at a time (the seam
    through which `cadence.accel` compiles them; `Collector.set_unroll_strategy`).

    Attributes:
        choice: what the strategy measured and chose (None: nothing), checkpointed with
            the collector's state.
    """

    choice: str | None

    def unroll(self, initial_state: Nest, stateful: bool) -> UnrolledSteps:
        """One unroll of the collector's ``unroll_length`` steps, as `Collector.run_steps`
        gives it."""


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
        self.episode_stats = EpisodeStats(env.batch_size, self.device)
        self._time_step: TimeStep | None = None
        self._state: Nest = ()
        self._transform_state: Nest = ()
        self.strategy: UnrollStrategy | None = None
        """Runs the unrolls where set (`set_unroll_strategy`); None: eagerly."""

    def set_unroll_strategy(self, strategy: UnrollStrategy | None) -> None:
        """Lets ``strategy`` run the algorithm's unrolls (None: eagerly, the default)."""
        self.strategy = strategy

    def carried(self) -> tuple[TimeStep, Nest]:
        """The current time step and recurrent state, which the next step starts from."""
        assert self._time_step is not None, "the collector has not reset its env yet"
        return self._time_step, self._state

    def carry(self, time_step: TimeStep, state: Nest) -> None:
        """Sets the time step and recurrent state the next step starts from."""
        self._time_step, self._state = time_step, state

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
        if policy is None and self.strategy is not None and not is_async(self.env):
            time_steps, actions, infos, states = self.strategy.unroll(initial_state, stateful)
        else:
            act = policy or self.acting.rollout_step
            time_steps, actions, infos, states = self.run_steps(act, initial_state, stateful)
        experience = Experience(time_step=time_steps, action=actions, info=infos, state=states)
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

    def run_steps(
        self, act: Callable[[TimeStep, Nest, Nest], AlgStep], initial_state: Nest, stateful: bool
    ) -> UnrolledSteps:
        """``unroll_length`` steps of ``act``, one at a time, from the carried time step and
        state (which it carries on): the stacked time steps (the current one first),
        actions, infos and states (``()`` for a stateless algorithm)."""

        # An env on the acting device (the usual case) hands over its time steps as they
        # are: `TimeStep.to` rebuilds one (4 us of a 100 us step of 8 CartPoles).
        on_device = same_device(self.env.device, self.device)
        if is_async(self.env):

            def received(time_step: TimeStep) -> TimeStep:
                raw = time_step if on_device else time_step.to(self.device)
                return self._transform_rows(raw, raw.env_id.to(self.device))

            *stacked, self._time_step, self._state = run_async_steps(
                act, self.env, received, self._time_step, self._state, self.agent_info,
                initial_state, self.unroll_length, stateful,
            )  # fmt: skip
            return tuple(stacked)

        def env_step(action: Nest) -> TimeStep:
            time_step = self.env.step(action)
            return self._transform(time_step if on_device else time_step.to(self.device))

        *stacked, self._time_step, self._state = run_steps(
            act, env_step, self._time_step, self._state, self.agent_info, initial_state,
            self.unroll_length, stateful,
        )  # fmt: skip
        return tuple(stacked)

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
            "compile_choice": None if self.strategy is None else self.strategy.choice,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        time_step = state["time_step"]
        self._time_step = None if time_step is None else TimeStep.from_dict(time_step)
        if self._time_step is not None:
            self._time_step = self._time_step.to(self.device)
        self._state = map_structure(lambda x: x.to(self.device), state["state"])
        self._transform_state = state.get("transform_state", ())
        self.episode_stats.load_state_dict(state["episode_stats"])
        if self.strategy is not None:
            self.strategy.choice = state.get("compile_choice")

    def _transform_rows(self, raw: TimeStep, rows: torch.Tensor) -> TimeStep:
        """`_transform` of the envs ``rows`` alone (an asynchronous env's partial batch):
        their rows of the transformers' ``[N, ...]`` state are gathered and written back."""
        if self.transformer is None:
            return raw
        state = self._transform_state
        time_step, new = self.transformer.transform_time_step(
            raw, map_structure(lambda x: x[rows], state)
        )
        for target, value in zip(flatten(state), flatten(new), strict=True):
            target[rows] = value
        return time_step.replace(untransformed=raw)

    def _transform(self, raw: TimeStep) -> TimeStep:
        if self.transformer is None:
            return raw
        time_step, self._transform_state = self.transformer.transform_time_step(
            raw, self._transform_state
        )
        return time_step.replace(untransformed=raw)


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


def run_steps(
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
