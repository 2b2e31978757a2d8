"""`ParallelEnvironment`: worker processes stepping envs into one shared-memory batch.

Each worker hosts a contiguous slice of the batch (its side is
`cadence.envs.parallel_worker`). Per step the parent writes the actions into
shared memory, writes one byte to every worker's pipe (see
`cadence.envs.channel`), and blocks in ``poll`` on the pipes and the process
sentinels until all of them answer with one byte; the workers write their rows of
the time step straight into a pre-stacked `TimeStepBuffer` in shared memory, so
the parent only copies one block out (nothing is pickled on the hot path).

A worker that dies (a segfault in a simulator, the OOM killer) or hangs (a request
unanswered for ``step_timeout_s``; it is killed with ``SIGKILL``) is restarted as
`cadence.envs.recovery` says for every worker pool (DESIGN §3): a warning names it,
its env ids and how it ended; a fresh worker is built from the same factories, its envs
seeded ``seed + env_id + restarts * num_envs`` where the factory supports it
(`GymEnvFactory.with_seed_offset`), and attached to the same shared memory. The step
that noticed the death returns, for its envs, LAST with discount 1 (the episode was
cut, not terminated), reward 0, zero ``env_info`` and the last observation those envs
delivered, so their next step is a FIRST from a reset (rows whose episode had just
ended reset at once instead); the rest of the batch steps normally. Past
``max_worker_restarts`` within ``restart_window_s``, or a death while the environment
is built (or a build longer than ``build_timeout_s``), raises `EnvironmentWorkerError`
and leaves it unusable. An exception raised by an env's ``step`` or ``reset`` (a
simulator gone unstable, a lost connection) is treated as a crash of its worker: a
warning gives the env id and the worker's traceback, and the worker is killed and
restarted within the same budget; once that is spent (or with
``max_worker_restarts=0``), the env's error is re-raised in the parent with the
worker's traceback, so an env that keeps raising (a bug) stops the run. An exception
anywhere else (building the envs, ``get_state``, ``set_state``, ``render``) is
re-raised in the parent with the worker's traceback and the env id, and nothing
restarts; an env whose state cannot be saved raises `UnsavableEnvStateError` from
`get_state`, one line naming the env, without a traceback.

Workers start with ``"forkserver"`` by default: the server imports torch and
cadence once, and every worker is forked from it in milliseconds, without
inheriting the parent's threads (forking a process that has run torch is unsafe)
and without importing anything per worker. Workers never run the user's main
script (see `cadence.envs.main_module`): a script without an
``if __name__ == "__main__":`` guard works, and env classes it defines are sent
to the workers by value.

With ``async_batch_size`` below the batch, steps are asynchronous (see
`cadence.envs.async_batch`): each returns the envs that are ready first.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.async_batch import AsyncStepping, busy_error, lockstep_error, workers_per_batch
from cadence.envs.channel import STEP
from cadence.envs.env_state import UnsavableEnvStateError
from cadence.envs.environment import Environment, PyEnvironment
from cadence.envs.main_module import MainFree, needs_main
from cadence.envs.parallel_worker import start_resource_tracker, worker_main
from cadence.envs.recovery import RecoveryPolicy
from cadence.envs.serial import check_batch_state
from cadence.envs.shared_batch import SharedBatch, layout_fields
from cadence.envs.worker_errors import EnvironmentWorkerError, describe_ids, env_error
from cadence.envs.worker_layout import split_evenly, with_seed_offset, worker_cores
from cadence.envs.worker_pool import WorkerPool, available_cores

logger = logging.getLogger(__name__)

StartMethod = Literal["forkserver", "spawn", "fork"]
_LAST = int(StepType.LAST)
_RESET = ("reset", None)


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
        async_batch_size: envs per step in the asynchronous mode (`cadence.envs.async_batch`),
            a multiple of the envs per worker; ``None`` or the batch size: lockstep.

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
        async_batch_size: int | None = None,
    ):
        if not env_fns:
            raise ValueError("ParallelEnvironment needs at least one environment")
        if build_timeout_s is not None and not build_timeout_s > 0:
            raise ValueError(f"build_timeout_s must be > 0 or None, got {build_timeout_s}")
        self._closed = False
        self._device = torch.device(device)
        self._env_fns = list(env_fns)
        # Factories that use what the user's script defines travel by value (see
        # `cadence.envs.main_module`): workers never run the script.
        self._by_value = needs_main(self._env_fns)
        self._build_timeout_s = build_timeout_s
        self._num_envs = len(env_fns)
        self._slices = split_evenly(self._num_envs, num_workers or available_cores())
        batch_workers = workers_per_batch(async_batch_size, self._num_envs, self._slices)
        self._async: AsyncStepping | None = None
        self._pending_cuts: dict[int, list[int]] = {}  # worker -> its envs whose episodes were cut
        self._last: TimeStep | None = None  # the last time step delivered
        self._prepared: tuple[np.ndarray, TimeStep] | None = None  # the next one, unfilled
        self._step_all = dict.fromkeys(range(len(self._slices)), STEP)
        self._shared: SharedBatch | None = None
        self._spin_us = spin_us
        self._cores = worker_cores(len(self._slices), pin_workers)
        context = mp.get_context(start_method)
        if start_method == "forkserver":
            # The server imports this once; workers forked from it import nothing more.
            # Not "__main__": the user's script is never run in a worker (see above).
            context.set_forkserver_preload([__name__])
        self._pool = WorkerPool(context, len(self._slices), step_timeout_s)
        self._recovery = self._recovery_policy(max_worker_restarts, restart_window_s)
        try:
            start_resource_tracker()  # the workers' own would unlink the block as they die
            for worker in range(len(self._slices)):
                self._spawn(worker)
            specs, dead = self._gather_specs(range(len(self._slices)))
            if dead:
                raise self._recovery.lost_while_building(min(dead), self._pool.reap(min(dead)))
            self._observation_spec, self._action_spec, self._env_info_spec = specs
            self._attach_shared_memory()
            self._recovery.built = True
            if batch_workers is not None:
                self._async = AsyncStepping(self, batch_workers)
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
    def async_batch_size(self) -> int:
        """Envs per step: the batch size in lockstep, fewer in the asynchronous mode."""
        if self._async is None:
            return self._num_envs
        return self._async.batch_workers * (self._slices[0][1] - self._slices[0][0])

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
        return list(self._recovery.restarts)

    def env_ids(self, worker: int) -> list[int]:
        """The batch indices of the envs hosted by ``worker``."""
        return list(range(*self._slices[worker]))

    def reset(self) -> TimeStep:
        """Resets every env; returns the whole batch (in the asynchronous mode too)."""
        if self._async is not None:
            self._async.drain()
        self._request_all(dict.fromkeys(range(self.num_workers), _RESET), stepping=True)
        self._pending_cuts.clear()  # every env starts a new episode
        time_step = self._deliver()
        if self._async is not None:
            self._async.reset(time_step)
        return time_step

    def step(self, action: Nest) -> TimeStep:
        """Steps the envs the last step (or reset) returned with ``action`` (their rows in
        that order); returns them all in lockstep, else the next envs ready."""
        if self._async is not None:
            return self._async.step(action)
        return self._step_lockstep(action)

    def send(self, action: Nest, env_ids: Sequence[int]) -> None:
        """Asynchronous mode: steps envs ``env_ids`` (whole workers' envs a step returned)
        with ``action``'s rows; ValueError in lockstep or for other envs."""
        self._require_async("send")
        self._async.send(action, env_ids)

    def recv(self) -> TimeStep:
        """Asynchronous mode: the next ``async_batch_size`` envs ready, by ``env_id``."""
        self._require_async("recv")
        return self._async.recv()

    def _require_async(self, what: str) -> None:
        if self._async is None:
            raise lockstep_error(what)

    def _refuse_busy(self, what: str) -> None:
        """Asynchronous mode: ``what`` needs every env's last step delivered."""
        if self._async is not None and self._async.busy:
            raise busy_error(what)

    def _step_lockstep(self, action: Nest) -> TimeStep:
        self._shared.write_actions(action)
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
        self._refuse_busy("render")
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
        self._refuse_busy("get_state")
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
        self._refuse_busy("set_state")
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
        if self._async is not None:
            self._async.forget_last()

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
        env_fns: Any = [with_seed_offset(fn, seed_offset) for fn in self._env_fns[start:stop]]
        if self._by_value:
            env_fns = MainFree(env_fns)
        core = None if self._cores is None else self._cores[worker]
        self._pool.spawn(worker, worker_main, (worker, start, env_fns, self._recovery.built, core))

    def _gather_specs(self, workers: Sequence[int]) -> tuple[tuple[Any, ...] | None, set[int]]:
        """The specs that new ``workers`` report once their envs are built, and those that died.

        Raises:
            EnvironmentWorkerError: an env's constructor raised (the environment is unusable).
        """
        replies, dead = self._pool.gather(workers, self._build_timeout_s)
        for worker, (status, payload) in sorted(replies.items()):
            if status == "error":
                error = env_error(worker, self._slices[worker], *payload)
                self._recovery.broken = str(error)
                raise error
        return next((payload for _, payload in replies.values()), None), dead

    def _recovery_policy(self, max_restarts: int, window_s: float) -> RecoveryPolicy:
        """The shared worker-recovery policy (`cadence.envs.recovery`), worded for envs."""
        return RecoveryPolicy(
            self._pool,
            owner="ParallelEnvironment",
            worker_kind="env worker",
            batch_size=self._num_envs,
            max_restarts=max_restarts,
            window_s=window_s,
            hosted=lambda w: f"hosting environment {describe_ids(self.env_ids(w))}",
            cut="the episodes of its envs end with LAST",
            make_error=lambda message, w, hung: EnvironmentWorkerError(
                message, w, self.env_ids(w), died=True, hung=hung
            ),
            building="while the environment was being built",
            build_timeout="build_timeout_s",
        )

    def _recover(self, worker: int) -> None:
        """Replaces dead ``worker`` as the recovery policy says, else raises.

        Its envs whose last delivered step was not LAST are recorded in
        ``_pending_cuts``: their episodes end with LAST on the next step.

        Raises:
            EnvironmentWorkerError: restarts are exhausted (or the environment is
                still being built); the environment is then unusable.
        """
        self._recovery.recover(worker, self._pool.reap(worker), self._restart, self._ready)

    def _restart(self, worker: int) -> None:
        """Starts a replacement for ``worker``, its envs reseeded; their episodes are cut."""
        self._pending_cuts[worker] = self._unfinished_rows(worker)
        self._spawn(worker, seed_offset=self._recovery.seed_offset(worker))

    def _ready(self, worker: int) -> bool:
        """Builds and attaches ``worker``'s replacement; False if it died meanwhile."""
        specs, dead = self._gather_specs([worker])
        if not dead:
            self._check_replacement_specs(worker, specs)
            replies, dead = self._pool.request({worker: self._attach_message()})
            try:
                self._raise_errors(replies)
            except EnvironmentWorkerError as error:
                # Left unattached, it could only be reached through its pipe: unusable.
                self._recovery.broken = (
                    f"the replacement for env worker {worker} failed to attach: {error}"
                )
                raise
        if not dead:
            self._pool.ring_doorbell(worker)
        return not dead

    def _check_replacement_specs(self, worker: int, specs: tuple[Any, ...]) -> None:
        """Raises unless the rebuilt envs lay out the shared memory as the first ones did."""
        if layout_fields(*specs, self._num_envs) != self._shared.layout:
            message = (
                f"env worker {worker} was restarted but its rebuilt envs have other specs "
                f"({specs}); env factories must build the same envs every time"
            )
            self._recovery.broken = message
            raise EnvironmentWorkerError(message, worker, self.env_ids(worker), died=True)

    def _unfinished_rows(self, worker: int) -> list[int]:
        """``worker``'s envs (local indices) whose last delivered step was not LAST."""
        start, stop = self._slices[worker]
        if self._async is not None:
            step_types = self._async.last_step_types(worker)
        else:
            step_types = None if self._last is None else self._last.step_type[start:stop].cpu()
        if step_types is None:
            return []  # nothing delivered (since a set_state): no episode to cut
        return [i for i, step_type in enumerate(step_types.tolist()) if step_type != _LAST]

    def _end_episodes(self, cuts: dict[int, list[int]]) -> None:
        """Writes LAST rows (discount 1, reward 0) for the ``cuts`` envs into the buffer."""
        rows = [self._slices[w][0] + i for w, local in cuts.items() for i in local]
        if rows:
            self._shared.end_episodes(rows, self._last)

    def _lost_request_error(self, worker: int, request: str) -> EnvironmentWorkerError:
        how = self._recovery.ended(worker)
        hung = how.startswith("hung")
        message = (
            f"env worker {worker} (hosting environment {describe_ids(self.env_ids(worker))}) {how} "
            f"during {request} and was restarted: the episodes of its envs end with LAST on "
            f"the next step; call {request} again"
        )
        return EnvironmentWorkerError(
            message, worker, self.env_ids(worker), died=True, restarted=True, hung=hung
        )

    # -- shared memory ---------------------------------------------------------------------------

    def _attach_shared_memory(self) -> None:
        specs = (self._observation_spec, self._action_spec, self._env_info_spec)
        self._shared = SharedBatch(*specs, self._num_envs, self.num_workers)
        self._pool.use_doorbell(self._shared.take_control(), self._spin_us * 1e-6)
        self._request({w: self._attach_message() for w in range(self.num_workers)})
        for worker in range(self.num_workers):
            self._pool.ring_doorbell(worker)

    def _attach_message(self) -> tuple[str, tuple[Any, ...]]:
        spin_s = self._spin_us * 1e-6
        return ("attach", (self._shared.name, self._num_envs, self.num_workers, spin_s))

    def _release_shared_memory(self) -> None:
        self._last = None
        if self._async is not None:
            self._async.release()
        if self._shared is not None:
            self._shared.release()
            self._shared = None

    def _deliver(self) -> TimeStep:
        # Kept, not copied: its observation is what a cut episode's LAST row repeats.
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            self._last = self._shared.buffer.read(self._device)
        else:
            self._last = self._shared.buffer.read_prepared(prepared, self._device)
        return self._last

    def _prepare(self) -> None:
        """Builds the next time step's tensors while the workers step (see `_deliver`)."""
        self._prepared = self._shared.buffer.prepare()

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
        if stepping and self._recovery.built:
            for worker, (status, payload) in sorted(replies.items()):
                if status != "error":
                    continue
                if self._recovery.allows(worker):
                    self._kill_raising(worker, payload)
                    dead = dead | {worker}
                else:  # raised below, with the worker's traceback; the caller decides
                    not_restarted = f"not restarted: {self._recovery.spent()}"
            replies = {w: reply for w, reply in replies.items() if w not in dead}
        for worker in sorted(dead):
            self._recover(worker)
        self._raise_errors(replies, not_restarted)
        return {w: payload for w, (_, payload) in replies.items()}, dead

    def _kill_raising(self, worker: int, payload: tuple[int | None, str, str]) -> None:
        """Kills ``worker``, whose env raised in a step or reset, so that it is replaced;
        the warning carries the worker's traceback."""
        env_index, text, tb = payload
        error = env_error(worker, self._slices[worker], env_index, text, tb)
        logger.warning("%s", error)
        self._pool.kill(worker, f"raised {text.splitlines()[0]} (traceback above; killed)")

    def _raise_errors(self, replies: dict[int, tuple[str, Any]], why: str = "") -> None:
        """Raises the first env error among ``replies`` (``why``: what the message adds,
        such as why the worker was not restarted)."""
        for worker, (status, payload) in sorted(replies.items()):
            if status == "error":
                raise env_error(worker, self._slices[worker], *payload, why=why)
            if status == "unsavable":  # expected of some envs: one line, no traceback
                raise UnsavableEnvStateError(payload)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("ParallelEnvironment is closed")
        if self._recovery.broken is not None:
            raise RuntimeError(
                f"ParallelEnvironment is unusable since a worker died: {self._recovery.broken}"
            )

    def _locate(self, env_index: int) -> tuple[int, int]:
        if not 0 <= env_index < self._num_envs:
            raise IndexError(f"env_index {env_index} is out of range for {self._num_envs} envs")
        for worker, (start, stop) in enumerate(self._slices):
            if start <= env_index < stop:
                return worker, env_index - start
        raise AssertionError("the slices cover the batch")
