"""`ParallelEnvironment`: worker processes stepping envs into one shared-memory batch.

Each worker hosts a contiguous slice of the batch (its side is
`cadence.envs.parallel_worker`). Per step the parent writes the actions into
shared memory, writes one byte to every worker's pipe (see
`cadence.envs.channel`), and blocks in ``poll`` on the pipes and the process
sentinels until all of them answer with one byte; the workers write their rows of
the time step straight into a pre-stacked `TimeStepBuffer` in shared memory, so
the parent only copies one block out (nothing is pickled on the hot path).

A worker that dies (a segfault in a simulator, the OOM killer) is noticed through
its sentinel, never a hang; one that hangs (a request unanswered for
``step_timeout_s``: a simulator stuck in a loop, a deadlock in env code) is killed
with ``SIGKILL``. Either is restarted (DESIGN §3): a warning names it, its env ids
and how it died (or how long it hung); a fresh worker is built from the same factories and attached
to the same shared memory; the step that noticed the death returns, for its envs,
LAST with discount 1 (the episode was cut, not terminated), reward 0, zero
``env_info`` and the last observation those envs delivered, so their next step is
a FIRST from a reset (rows whose episode had just ended reset at once instead).
The rest of the batch steps normally. The rebuilt envs are seeded
``seed + env_id + restarts * num_envs`` (``restarts``: how often that worker has
been restarted) where the factory supports it (`GymEnvFactory.with_seed_offset`),
so they do not replay the run's first episodes and a run stays deterministic for
the same deaths. Each worker may be restarted ``max_worker_restarts`` times in any
``restart_window_s`` seconds; one more death (or hang) raises
`EnvironmentWorkerError` and leaves the environment unusable, as does a death
while it is being built or a build that takes longer than ``build_timeout_s``. An
exception raised by an env's ``step`` or ``reset`` (a simulator gone unstable, a
lost connection) is treated as a crash of its worker: a warning gives the env id and
the worker's traceback, the worker is killed and restarted as above, within the
same budget; once that is spent (or with ``max_worker_restarts=0``), the env's error
is re-raised in the parent with the worker's traceback, so an env that keeps raising
(a bug) stops the run. An exception anywhere else (building the envs, ``get_state``, ``set_state``,
``render``) is re-raised in the parent with the worker's traceback and the env id,
and nothing restarts; an env whose state cannot be saved raises
`UnsavableEnvStateError` from `get_state`, one line naming the env, without a
traceback.

Workers start with ``"forkserver"`` by default: the server imports torch and
cadence once, and every worker is forked from it in milliseconds, without
inheriting the parent's threads (forking a process that has run torch is unsafe)
and without importing anything per worker. Workers never run the user's main
script (see `cadence.envs.main_module`): a script without an
``if __name__ == "__main__":`` guard works, and env classes it defines are sent
to the workers by value.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

from cadence.data.nest import Nest, map_structure
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.buffer import TimeStepBuffer, action_to_numpy
from cadence.envs.channel import STEP
from cadence.envs.doorbell import control_block_nbytes
from cadence.envs.env_state import UnsavableEnvStateError
from cadence.envs.environment import Environment, PyEnvironment
from cadence.envs.main_module import MainFree, needs_main
from cadence.envs.parallel_worker import (
    action_layout_for,
    action_rows,
    aligned,
    shared_views,
    start_resource_tracker,
    unlink_shared_memory,
    worker_main,
)
from cadence.envs.serial import check_batch_state
from cadence.envs.worker_pool import RestartBudget, WorkerPool, available_cores

logger = logging.getLogger(__name__)

StartMethod = Literal["forkserver", "spawn", "fork"]
_LAST = int(StepType.LAST)
_RESET = ("reset", None)


class EnvironmentWorkerError(RuntimeError):
    """An environment raised in a worker process, or a worker process died.

    Attributes:
        worker: the worker's index.
        env_ids: the batch indices of the environments concerned.
        worker_traceback: the formatted traceback from the worker ('' if it died).
        died: whether the worker process died (or hung and was killed).
        hung: whether it was killed for not answering in time (``step_timeout_s``, or
            ``build_timeout_s`` while the environment was built).
        restarted: whether a replacement took over (the environment stays usable);
            ``False`` with ``died`` means the environment is unusable.
    """

    def __init__(
        self,
        message: str,
        worker: int,
        env_ids: list[int],
        worker_traceback: str = "",
        died: bool = False,
        restarted: bool = False,
        hung: bool = False,
    ):
        super().__init__(message)
        self.worker = worker
        self.env_ids = env_ids
        self.worker_traceback = worker_traceback
        self.died = died
        self.restarted = restarted
        self.hung = hung


@runtime_checkable
class SeedOffsetFactory(Protocol):
    """An env factory that can build the same env with its seed moved by ``offset``."""

    def with_seed_offset(self, offset: int) -> Callable[[], PyEnvironment]: ...


class ParallelEnvironment(Environment):
    """A batch of environments stepped by worker processes through shared memory.

    Args:
        env_fns: picklable constructors, one per environment (e.g. `GymEnvFactory`);
            ``env_fns[i]`` builds env ``i`` inside its worker.
        num_workers: worker processes; default one per available core. Never more
            than ``len(env_fns)``; the envs are split into contiguous, even slices.
        device: where the time steps are delivered.
        start_method: how workers start (see the module docstring).
        max_worker_restarts: how often each worker may be restarted after dying
            (or hanging) within any ``restart_window_s`` seconds (0: never; a death is
            an error).
        restart_window_s: the window of ``max_worker_restarts``.
        step_timeout_s: the longest a worker may take to answer a request (a step of
            its envs, a reset, ``get_state``, ...); a worker silent for longer has hung:
            it is killed and restarted like one that died. ``None``: wait for ever.
        build_timeout_s: the longest a worker may take to build its envs (from its
            start until it reports them built); a build that takes longer is an error.
            ``None``: wait for ever.
        spin_us: how long the parent and the workers wait for each other by polling
            shared memory (yielding the core on every turn) before they sleep on a
            pipe; see `cadence.envs.doorbell`. Polling saves the wake-ups that make up
            most of a fast env's step; it adapts, so a side that usually waits longer
            sleeps at once. 0: always sleep.
        pin_workers: whether each worker is pinned to a core of its own (worker ``w``
            to the ``w``-th core this process may run on). ``None``: only when there is
            one worker per such core, where pinning is symmetric even if several runs
            share the machine. Pinned, the two halves of a batch can never be left on
            one core: after a pause (a training phase) the scheduler's load estimate
            of the woken workers is low and it did not separate them for ~100 ms.

    Raises:
        EnvironmentWorkerError: an env raised in a worker (with the worker's
            traceback and the env id); a worker died while the environment was
            built, or more often than ``max_worker_restarts`` allows (with its env
            ids and how it died); building took longer than ``build_timeout_s``; or a
            worker died while answering `get_state` or `render` (it was restarted,
            ``restarted`` is set: ask again).
        UnsavableEnvStateError: from `get_state`, an env whose state cannot be saved.

    >>> with ParallelEnvironment([GymEnvFactory("CartPole-v1", i, 0) for i in range(4)]) as env:  # doctest: +SKIP
    ...     time_step = env.step(env.action_spec.sample((4,)))
    """

    uniform_time_steps = True  # each one read out of a `TimeStepBuffer`

    def __init__(
        self,
        env_fns: Sequence[Callable[[], PyEnvironment]],
        num_workers: int | None = None,
        device: Any = "cpu",
        *,
        start_method: StartMethod = "forkserver",
        max_worker_restarts: int = 3,
        restart_window_s: float = 600.0,
        spin_us: float = 1000.0,
        pin_workers: bool | None = None,
        step_timeout_s: float | None = 60.0,
        build_timeout_s: float | None = 300.0,
    ):
        if not env_fns:
            raise ValueError("ParallelEnvironment needs at least one environment")
        if build_timeout_s is not None and not build_timeout_s > 0:
            raise ValueError(f"build_timeout_s must be > 0 or None, got {build_timeout_s}")
        self._closed = False
        self._built = False  # a worker that dies before this is an error, not a restart
        self._broken: str | None = None
        self._device = torch.device(device)
        self._env_fns = list(env_fns)
        # Factories that use what the user's script defines travel by value (see
        # `cadence.envs.main_module`): workers never run the script.
        self._by_value = needs_main(self._env_fns)
        self._build_timeout_s = build_timeout_s
        self._num_envs = len(env_fns)
        self._slices = split_evenly(self._num_envs, num_workers or available_cores())
        self._budget = RestartBudget(max_worker_restarts, restart_window_s)
        self._restarts = [0] * len(self._slices)
        self._ended: dict[int, str] = {}  # worker -> how its last process ended (see `reap`)
        self._pending_cuts: dict[int, list[int]] = {}  # worker -> its envs whose episodes were cut
        self._last: TimeStep | None = None  # the last time step delivered
        self._prepared: tuple[np.ndarray, TimeStep] | None = None  # the next one, unfilled
        self._step_all = dict.fromkeys(range(len(self._slices)), STEP)
        self._shm: SharedMemory | None = None
        self._spin_us = spin_us
        self._cores = worker_cores(len(self._slices), pin_workers)
        context = mp.get_context(start_method)
        if start_method == "forkserver":
            # The server imports this once; workers forked from it import nothing more.
            # Not "__main__": the user's script is never run in a worker (see above).
            context.set_forkserver_preload([__name__])
        self._pool = WorkerPool(context, len(self._slices), step_timeout_s)
        try:
            start_resource_tracker()  # the workers' own would unlink the block as they die
            for worker in range(len(self._slices)):
                self._spawn(worker)
            specs, dead = self._gather_specs(range(len(self._slices)))
            if dead:
                raise self._unrecoverable(min(dead), self._pool.reap(min(dead)))
            self._observation_spec, self._action_spec, self._env_info_spec = specs
            self._attach_shared_memory()
            self._built = True
        except BaseException:
            self.close()
            raise

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def observation_spec(self) -> Spec:
        return self._observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._env_info_spec

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def num_workers(self) -> int:
        return len(self._slices)

    @property
    def processes(self) -> list[Any]:
        """The worker processes, in order (worker ``w`` hosts ``env_ids(w)``)."""
        return list(self._pool.processes)

    @property
    def spin_us(self) -> float:
        """How long the parent and the workers poll for each other before sleeping."""
        return self._spin_us

    @property
    def step_timeout_s(self) -> float | None:
        """The longest a worker may take to answer a request before it counts as hung."""
        return self._pool.timeout_s

    @property
    def restarts(self) -> list[int]:
        """How often each worker has been restarted after dying (or hanging)."""
        return list(self._restarts)

    def env_ids(self, worker: int) -> list[int]:
        """The batch indices of the envs hosted by ``worker``."""
        return list(range(*self._slices[worker]))

    def reset(self) -> TimeStep:
        self._request_all(dict.fromkeys(range(self.num_workers), _RESET), stepping=True)
        self._pending_cuts.clear()  # every env starts a new episode
        return self._deliver()

    def step(self, action: Nest) -> TimeStep:
        self._write_actions(action)
        cuts, self._pending_cuts = self._pending_cuts, {}
        try:
            if cuts:  # workers restarted outside a step: their cut envs wait for this LAST
                messages = {**self._step_all, **{w: ("step", rows) for w, rows in cuts.items()}}
                died = self._request(messages, self._prepare, stepping=True)[1]
            else:
                died = self._step_workers()
            while died:
                # A replacement resets the envs whose episodes had just ended; the others
                # end theirs with LAST here and reset on their next step.
                for worker in died:
                    cuts[worker] = self._pending_cuts.pop(worker)
                died = self._request({w: ("step", cuts[w]) for w in died}, stepping=True)[1]
        except EnvironmentWorkerError:
            # An env raised: the cut episodes still owe their LAST to the next step.
            self._pending_cuts = {**cuts, **self._pending_cuts}
            raise
        if cuts:
            self._end_episodes(cuts)
        return self._deliver()

    def render(self, env_index: int = 0) -> np.ndarray | None:
        worker, local = self._locate(env_index)
        replies, died = self._request({worker: ("render", local)})
        if died:
            raise self._lost_request_error(worker, "render")
        return replies[worker]

    def get_state(self) -> list[Any]:
        """Every env's ``get_state()``, in batch order (the format of `SerialEnvironment`).

        Raises:
            UnsavableEnvStateError: an env's state cannot be saved (e.g. a Box2D env).
        """
        replies, died = self._request({w: ("get_state", None) for w in range(self.num_workers)})
        if died:
            raise self._lost_request_error(min(died), "get_state")
        return [state for w in range(self.num_workers) for state in replies[w]]

    def set_state(self, state: Sequence[Any]) -> None:
        """Restores a `get_state` (or a `SerialEnvironment`'s).

        Raises:
            EnvStateMismatchError: ``state`` was saved by another kind of back end (or for
                another number of envs).
        """
        check_batch_state(state, self._num_envs)
        self._request_all(
            {
                w: ("set_state", list(state[start:stop]))
                for w, (start, stop) in enumerate(self._slices)
            }
        )
        # The states say which envs reset next; the episodes they continue were not
        # delivered by this object, so a worker dying before the next step cuts none.
        self._pending_cuts.clear()
        self._last = None

    def close(self) -> None:
        """Stops the workers (killing any that do not exit) and frees the shared memory; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if hasattr(self, "_pool"):
            self._pool.stop()
        self._release_shared_memory()

    # -- dead workers ---------------------------------------------------------------------------

    def _spawn(self, worker: int, seed_offset: int = 0) -> None:
        """Starts ``worker`` (a replacement, with fresh envs, once the batch is built)."""
        start, stop = self._slices[worker]
        env_fns: Any = [_with_seed_offset(fn, seed_offset) for fn in self._env_fns[start:stop]]
        if self._by_value:
            env_fns = MainFree(env_fns)
        core = None if self._cores is None else self._cores[worker]
        self._pool.spawn(worker, worker_main, (worker, start, env_fns, self._built, core))

    def _gather_specs(self, workers: Sequence[int]) -> tuple[tuple[Any, ...] | None, set[int]]:
        """The specs that new ``workers`` report once their envs are built, and those that died.

        Raises:
            EnvironmentWorkerError: an env's constructor raised (the environment is unusable).
        """
        replies, dead = self._pool.gather(workers, self._build_timeout_s)
        for worker, (status, payload) in sorted(replies.items()):
            if status == "error":
                error = self._worker_error(worker, *payload)
                self._broken = str(error)
                raise error
        return next((payload for _, payload in replies.values()), None), dead

    def _recover(self, worker: int) -> None:
        """Replaces dead ``worker`` within the restart budget, else raises.

        Its envs whose last delivered step was not LAST are recorded in
        ``_pending_cuts``: their episodes end with LAST on the next step.

        Raises:
            EnvironmentWorkerError: restarts are exhausted (or the environment is
                still being built); the environment is then unusable.
        """
        how = self._pool.reap(worker)
        while True:
            self._ended[worker] = how
            if not self._built or not self._budget.spend(worker):
                raise self._unrecoverable(worker, how)
            self._restarts[worker] += 1
            self._warn_restart(worker, how)
            self._pending_cuts[worker] = self._unfinished_rows(worker)
            try:
                self._spawn(worker, seed_offset=self._restarts[worker] * self._num_envs)
            except BaseException as error:
                self._broken = f"starting a replacement for env worker {worker} failed: {error!r}"
                raise
            specs, dead = self._gather_specs([worker])
            if not dead:
                self._check_replacement_specs(worker, specs)
                replies, dead = self._pool.request({worker: self._attach_message()})
                try:
                    self._raise_errors(replies)
                except EnvironmentWorkerError as error:
                    # Left unattached, it could only be reached through its pipe: unusable.
                    self._broken = (
                        f"the replacement for env worker {worker} failed to attach: {error}"
                    )
                    raise
            if not dead:
                self._pool.ring_doorbell(worker)
                return
            how = self._pool.reap(worker)  # the replacement died too: that counts as well

    def _warn_restart(self, worker: int, how: str) -> None:
        logger.warning(
            "%s; restarting it (restart %d of at most %d per %g s): the episodes of its envs "
            "end with LAST, and its rebuilt envs are seeded seed + env_id + %d",
            self._death_message(worker, how),
            self._budget.recent(worker),
            self._budget.max_restarts,
            self._budget.window_s,
            self._restarts[worker] * self._num_envs,
        )

    def _unrecoverable(self, worker: int, how: str) -> EnvironmentWorkerError:
        hung = self._pool.hung_for(worker) is not None
        if not self._built and hung:
            reason = (
                "while the environment was being built: building it timed out "
                "(build_timeout_s; None waits for ever)"
            )
        elif not self._built:
            reason = "while the environment was being built"
        else:
            reason = f"and {self._spent_budget()}"
        message = (
            f"{self._death_message(worker, how)} {reason}; this ParallelEnvironment is unusable: "
            "close it and build a new one (and find what kills the worker)"
        )
        self._broken = message
        return EnvironmentWorkerError(message, worker, self.env_ids(worker), died=True, hung=hung)

    def _spent_budget(self) -> str:
        """Why a worker is not restarted once it is built: restarts are off or spent."""
        budget = self._budget
        if budget.max_restarts == 0:
            return "restarts are off (max_worker_restarts=0)"
        return (
            f"its {budget.max_restarts} restarts within {budget.window_s:g} s are spent "
            f"(max_worker_restarts={budget.max_restarts}, restart_window_s={budget.window_s:g})"
        )

    def _check_replacement_specs(self, worker: int, specs: tuple[Any, ...]) -> None:
        """Raises unless the rebuilt envs lay out the shared memory as the first ones did."""
        if _layout_fields(*specs, self._num_envs) != self._layout:
            message = (
                f"env worker {worker} was restarted but its rebuilt envs have other specs "
                f"({specs}); env factories must build the same envs every time"
            )
            self._broken = message
            raise EnvironmentWorkerError(message, worker, self.env_ids(worker), died=True)

    def _unfinished_rows(self, worker: int) -> list[int]:
        """``worker``'s envs (local indices) whose last delivered step was not LAST."""
        if self._last is None:
            return []  # nothing delivered (since a set_state): no episode to cut
        start, stop = self._slices[worker]
        step_types = self._last.step_type[start:stop].cpu().tolist()
        return [i for i, step_type in enumerate(step_types) if step_type != _LAST]

    def _end_episodes(self, cuts: dict[int, list[int]]) -> None:
        """Writes LAST rows (discount 1, reward 0) for the ``cuts`` envs into the buffer."""
        rows = [self._slices[w][0] + i for w, local in cuts.items() for i in local]
        if not rows:
            return
        observation = map_structure(lambda x: x.cpu().numpy(), self._last.observation)
        zero_info = dict.fromkeys(self._env_info_spec, 0.0)
        for row in rows:
            self._buffer.write(
                row,
                TimeStep(
                    step_type=_LAST,
                    reward=0.0,
                    discount=1.0,
                    observation=map_structure(lambda x, r=row: x[r], observation),
                    prev_action=action_rows(self._actions, slice(row, row + 1))[0],
                    env_id=row,
                    env_info=zero_info,
                ),
            )

    def _death_message(self, worker: int, how: str) -> str:
        """``how``: `WorkerPool.reap`'s predicate (``"died (exit code 3)"``, ``"hung (...)"``)."""
        return (
            f"env worker {worker} (pid {self._pool.processes[worker].pid}, hosting environment "
            f"{_ids(self.env_ids(worker))}) {how}"
        )

    def _lost_request_error(self, worker: int, request: str) -> EnvironmentWorkerError:
        how = self._ended[worker]
        hung = how.startswith("hung")
        message = (
            f"env worker {worker} (hosting environment {_ids(self.env_ids(worker))}) {how} "
            f"during {request} and was restarted: the episodes of its envs end with LAST on "
            f"the next step; call {request} again"
        )
        return EnvironmentWorkerError(
            message, worker, self.env_ids(worker), died=True, restarted=True, hung=hung
        )

    # -- shared memory ---------------------------------------------------------------------------

    def _attach_shared_memory(self) -> None:
        specs = (self._observation_spec, self._action_spec, self._env_info_spec)
        self._layout = _layout_fields(*specs, self._num_envs)
        buffer_layout = TimeStepBuffer.make_layout(*specs, self._num_envs)
        action_layout = action_layout_for(self._action_spec, self._num_envs)
        size = (
            aligned(buffer_layout.nbytes)
            + aligned(action_layout.nbytes)
            + control_block_nbytes(self.num_workers)
        )
        self._shm = SharedMemory(create=True, size=size)
        self._buffer, self._actions, control = shared_views(
            self._shm,
            self._observation_spec,
            self._action_spec,
            self._env_info_spec,
            self._num_envs,
        )
        self._pool.use_doorbell(control, self._spin_us * 1e-6)
        del control  # the doorbell keeps its own view; this one would keep the block open
        self._request({w: self._attach_message() for w in range(self.num_workers)})
        for worker in range(self.num_workers):
            self._pool.ring_doorbell(worker)

    def _attach_message(self) -> tuple[str, tuple[Any, ...]]:
        spin_s = self._spin_us * 1e-6
        return ("attach", (self._shm.name, self._num_envs, self.num_workers, spin_s))

    def _release_shared_memory(self) -> None:
        # Views over the block must go before it can close; unlink frees it system-wide.
        self.__dict__.pop("_buffer", None)
        self.__dict__.pop("_actions", None)
        self._last = None
        if self._shm is None:
            return
        try:
            self._shm.close()
        except BufferError:  # a time step view still held elsewhere; the mapping goes with it
            pass
        unlink_shared_memory(self._shm)
        self._shm = None

    def _deliver(self) -> TimeStep:
        # Kept, not copied: its observation is what a cut episode's LAST row repeats.
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            self._last = self._buffer.read(self._device)
        else:
            self._last = self._buffer.read_prepared(prepared, self._device)
        return self._last

    def _prepare(self) -> None:
        """Builds the next time step's tensors while the workers step (see `_deliver`)."""
        self._prepared = self._buffer.prepare()

    def _write_actions(self, action: Nest) -> None:
        action = action_to_numpy(action)
        for name, array in self._actions.items():
            value = action if name == "" else _leaf(action, name)
            if np.shape(value) != array.shape:
                raise ValueError(
                    f"action{'/' + name if name else ''} has shape {np.shape(value)}, expected {array.shape}"
                )
            np.copyto(array, value, casting="unsafe")

    # -- messaging ---------------------------------------------------------------------------

    def _request_all(self, messages: dict[int, Any], stepping: bool = False) -> dict[int, Any]:
        """`_request`, sending a dead worker's message again to its replacement."""
        replies, died = self._request(messages, stepping=stepping)
        while died:
            more, died = self._request({w: messages[w] for w in died}, stepping=stepping)
            replies.update(more)
        return replies

    def _request(
        self,
        messages: dict[int, Any],
        while_waiting: Callable[[], None] | None = None,
        stepping: bool = False,
    ) -> tuple[dict[int, Any], set[int]]:
        """Sends each worker its message (`STEP` or an object) and waits for all of them.

        ``while_waiting`` (if any) runs while the workers work.

        Workers that died are restarted (see `_recover`) before an env's error, if
        any, is raised, so that the others stay in step with the parent. With
        ``stepping`` (a step or a reset), a worker whose env raised is killed and
        restarted like a dead one.

        Returns:
            The replies' payloads by worker, and the workers that died (and were replaced).
        """
        self._check_usable()
        return self._settle(*self._pool.request(messages, while_waiting), stepping=stepping)

    def _step_workers(self) -> set[int]:
        """`_request` of a plain step from every worker (the hot path of `step`).

        Returns:
            The workers that died (and were replaced).
        """
        self._check_usable()
        outcome = self._pool.step_all(self._prepare)
        return set() if outcome is None else self._settle(*outcome, stepping=True)[1]

    def _settle(
        self, replies: dict[int, tuple[str, Any]], dead: set[int], stepping: bool = False
    ) -> tuple[dict[int, Any], set[int]]:
        """Restarts the ``dead`` workers (and, ``stepping``, those whose env raised), then
        raises an env's error among the ``replies``."""
        not_restarted = ""
        if stepping and self._built:
            for worker, (status, payload) in sorted(replies.items()):
                if status != "error":
                    continue
                if self._budget.allows(worker):
                    self._kill_raising(worker, payload)
                    dead = dead | {worker}
                else:  # raised below, with the worker's traceback; the caller decides
                    not_restarted = f"not restarted: {self._spent_budget()}"
            replies = {w: reply for w, reply in replies.items() if w not in dead}
        for worker in sorted(dead):
            self._recover(worker)
        self._raise_errors(replies, not_restarted)
        return {w: payload for w, (_, payload) in replies.items()}, dead

    def _kill_raising(self, worker: int, payload: tuple[int | None, str, str]) -> None:
        """Kills ``worker``, whose env raised in a step or reset, so that it is replaced;
        the warning carries the worker's traceback."""
        env_index, text, tb = payload
        error = self._worker_error(worker, env_index, text, tb)
        logger.warning("%s", error)
        self._pool.kill(worker, f"raised {text.splitlines()[0]} (traceback above; killed)")

    def _raise_errors(self, replies: dict[int, tuple[str, Any]], why: str = "") -> None:
        """Raises the first env error among ``replies`` (``why``: what the message adds,
        such as why the worker was not restarted)."""
        for worker, (status, payload) in sorted(replies.items()):
            if status == "error":
                raise self._worker_error(worker, *payload, why=why)
            if status == "unsavable":  # expected of some envs: one line, no traceback
                raise UnsavableEnvStateError(payload)

    def _worker_error(
        self, worker: int, env_index: int | None, text: str, tb: str, why: str = ""
    ) -> EnvironmentWorkerError:
        start, stop = self._slices[worker]
        env_ids = list(range(start, stop)) if env_index is None else [start + env_index]
        why = f" ({why})" if why else ""
        message = (
            f"environment {_ids(env_ids)} in worker {worker} raised {text}{why}"
            f"\n\nWorker traceback:\n{tb}"
        )
        return EnvironmentWorkerError(message, worker, env_ids, tb)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("ParallelEnvironment is closed")
        if self._broken is not None:
            raise RuntimeError(
                f"ParallelEnvironment is unusable since a worker died: {self._broken}"
            )

    def _locate(self, env_index: int) -> tuple[int, int]:
        if not 0 <= env_index < self._num_envs:
            raise IndexError(f"env_index {env_index} is out of range for {self._num_envs} envs")
        for worker, (start, stop) in enumerate(self._slices):
            if start <= env_index < stop:
                return worker, env_index - start
        raise AssertionError("the slices cover the batch")


def worker_cores(num_workers: int, pin: bool | None) -> list[int] | None:
    """The core each worker is pinned to (see `ParallelEnvironment`'s ``pin_workers``), or ``None``."""
    if pin is False or not hasattr(os, "sched_setaffinity"):
        if pin:
            logger.warning("pin_workers: this platform cannot pin processes to cores; not pinned")
        return None
    cores = sorted(os.sched_getaffinity(0))
    if pin is None and (len(cores) < 2 or num_workers != len(cores)):
        return None
    return [cores[w % len(cores)] for w in range(num_workers)]


def split_evenly(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` slices of ``num_envs`` for ``min(num_workers, num_envs)`` workers.

    >>> split_evenly(5, 2)
    [(0, 3), (3, 5)]
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    num_workers = min(num_workers, num_envs)
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (worker < extra)
        slices.append((start, stop))
        start = stop
    return slices


def _layout_fields(
    observation_spec: Spec, action_spec: Spec, env_info_spec: CompositeSpec, batch_size: int
) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """What the shared block holds, field by field: workers must agree on it."""
    buffer = TimeStepBuffer.make_layout(observation_spec, action_spec, env_info_spec, batch_size)
    return buffer.fields + action_layout_for(action_spec, batch_size).fields


def _with_seed_offset(fn: Callable[[], PyEnvironment], offset: int) -> Callable[[], PyEnvironment]:
    if offset and isinstance(fn, SeedOffsetFactory):
        return fn.with_seed_offset(offset)
    return fn


def _leaf(nest: Nest, path: str) -> Any:
    for key in path.split("/"):
        nest = nest[key]
    return nest


def _ids(env_ids: list[int]) -> str:
    if len(env_ids) == 1:
        return f"id {env_ids[0]}"
    return f"ids {env_ids[0]}..{env_ids[-1]}"
