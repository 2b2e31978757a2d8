"""The asynchronous mode of `ParallelEnvironment`: each step returns the envs ready first.

In lockstep (the default) a step waits for every worker, so the batch moves at the pace
of its slowest worker on every step. With ``async_batch_size=M`` of ``N`` envs (the idea
of EnvPool's and PufferLib's asynchronous modes) the parent sends actions to the envs it
last returned and waits only until ``M`` envs have answered: the others keep stepping
meanwhile, and the policy acts on the ``M`` ready ones. Each returned `TimeStep`'s
``env_id`` says which env each row is; rows of one worker come together.

A worker's envs always step together (one request, one answer), so ``M`` must be a whole
number of workers' slices: ``N`` splits evenly over the workers and ``M`` is a multiple
of the envs per worker, below ``N`` (``M = N`` is lockstep itself: the same code path).

The guarantees of lockstep hold per env: env ``i`` is seeded ``seed + i``; a worker that
dies or hangs while its envs step is restarted by the same `cadence.envs.recovery` policy
(its envs' episodes end with LAST, the replacement's envs are reseeded
``seed + i + restarts * N``) and its envs come back in a later batch; an env that raises
is killed and restarted within the same budget. What the mode gives up: which envs come
back together, and so the order in which the policy sees them, depends on timing, and is
not recorded. Per-env trajectories under a policy that acts on each env alone (no
randomness shared across rows) are the same as lockstep's; a run's numbers are not.
`get_state`, `set_state` and `render` need every env's last step delivered and no step in
flight (between `cadence.collect.Collector` unrolls, which end with every env waiting).

The parent waits for the next ready workers by polling the doorbell (``spin_us``) only
where it has a core to itself (fewer workers than cores); sharing one with a stepping
worker, it sleeps until an answer wakes it (see `AsyncStepping`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.time_step import TimeStep
from cadence.envs.buffer import RowGather, TimeStepBuffer
from cadence.envs.worker_pool import available_cores

if TYPE_CHECKING:
    from cadence.envs.parallel import ParallelEnvironment

_MAX_GATHERS = 256  # row gathers kept (one per ordered set of workers seen in a batch)
_NO_ROWS = np.zeros(0, dtype=np.intp)


def workers_per_batch(
    async_batch_size: int | None, num_envs: int, slices: Sequence[tuple[int, int]]
) -> int | None:
    """How many workers' envs make one asynchronous batch, or None for lockstep.

    Raises:
        ValueError: ``async_batch_size`` is not a whole number of workers' slices below
            ``num_envs`` (the message says which values work).
    """
    if async_batch_size is None or async_batch_size == num_envs:
        return None
    per_worker = slices[0][1] - slices[0][0]
    even = all(stop - start == per_worker for start, stop in slices)
    valid = [per_worker * k for k in range(1, len(slices))] if even else []
    if async_batch_size not in valid:
        if not even:
            why = (
                f"the {num_envs} envs do not split evenly over {len(slices)} workers: make "
                "env.num_envs a multiple of env.num_workers"
            )
        else:
            why = f"it must be one of {valid} (or {num_envs}: lockstep)"
        raise ValueError(
            f"env.async_batch_size={async_batch_size} does not fit: a worker's envs step "
            f"together, so the async batch must be a multiple of the {per_worker} envs per "
            f"worker and below num_envs={num_envs}; {why}"
        )
    return async_batch_size // per_worker


def lockstep_error(what: str) -> ValueError:
    """The error for `send` or `recv` of an env that steps in lockstep."""
    return ValueError(
        f"ParallelEnvironment.{what} is for the asynchronous mode; this one steps in "
        "lockstep (pass async_batch_size below the batch size: env.async_batch_size)"
    )


def busy_error(what: str) -> RuntimeError:
    """The error for ``what`` (`get_state`, ...) while envs step asynchronously."""
    return RuntimeError(
        f"ParallelEnvironment.{what} in the asynchronous mode needs every env's last step "
        "delivered and none in flight: call it between unrolls (recv until every env you "
        "sent actions to is back)"
    )


class AsyncStepping:
    """The asynchronous mode's bookkeeping and its `send`/`recv`, for one `ParallelEnvironment`.

    Each worker is in one of three places: *held* (its last time step delivered, waiting
    for actions), *in flight* (rung, with the time it must answer by) or *ready* (answered,
    not yet delivered; in order of arrival).

    A step's parent side costs about what lockstep's does per env: the actions go to the
    held workers' rows, the batch is read from the ready workers' rows alone into tensors
    made while they stepped (`cadence.envs.buffer.RowGather`, one per ordered set of
    workers, kept), and each env's last delivered step is a reference to its batch.

    Args:
        env: the environment whose workers it steps (it uses its transport and recovery).
        batch_workers: the workers whose envs make one batch (`workers_per_batch`).
    """

    def __init__(self, env: ParallelEnvironment, batch_workers: int):
        self._env = env
        self.batch_workers = batch_workers
        self.in_flight: dict[int, float | None] = {}
        self.ready: list[int] = []
        self.delivered: list[int] = []  # the workers of the last batch returned
        self._delivered_ids: list[int] = []  # their envs, in order
        self._cut_on_arrival: dict[int, list[int]] = {}  # worker -> envs to end with LAST
        self._per_worker = env._slices[0][1] - env._slices[0][0]
        self._on_cpu = env.device.type == "cpu"
        # Waiting for *any* worker, a parent that shares a core with a stepping worker
        # would spin on that core, yielding it, and see another worker's answer only once
        # that worker yields or the scheduler's tick (ms) comes: it sleeps instead, and
        # the answer's wake-up runs it at once (`cadence.envs.doorbell`).
        self._spin = env.num_workers < available_cores()
        # Each worker's envs' last delivered step: (the batch, their first row in it).
        self._last_of: list[tuple[TimeStep, int] | None] = [None] * env.num_workers
        self._targets: dict[int, TimeStepBuffer] = {}  # workers in a batch -> its buffer
        self._gathers: dict[tuple[int, ...], RowGather] = {}

    @property
    def busy(self) -> bool:
        """Whether a step is in flight or answered but not delivered."""
        return bool(self.in_flight or self.ready)

    def reset(self, first: TimeStep) -> None:
        """Every worker is held after a reset that delivered ``first`` (all envs)."""
        self.in_flight.clear()
        self.ready.clear()
        self._cut_on_arrival.clear()
        self._hold_all()
        self._last_of = [(first, start) for start, _ in self._env._slices]

    def forget_last(self) -> None:
        """After `set_state`: no episode was delivered by this object."""
        self._last_of = [None] * len(self._last_of)
        self._hold_all()

    def release(self) -> None:
        """Drops the gathers' views of the shared block (before it closes)."""
        self._gathers.clear()

    def last_step_types(self, worker: int) -> torch.Tensor | None:
        """``[envs of worker]`` the step types last delivered for ``worker``'s envs (None:
        none since `set_state`)."""
        last = self._last_of[worker]
        if last is None:
            return None
        batch, first = last
        return batch.step_type[first : first + self._per_worker]

    def step(self, action: Nest) -> TimeStep:
        """`send` for the envs the last batch returned (``action``'s rows), then `recv`."""
        self._start(action, self.delivered)
        return self.recv()

    def send(self, action: Nest, env_ids: Sequence[int]) -> None:
        """Writes ``action`` (rows in the order of ``env_ids``) and starts those envs' step.

        Raises:
            ValueError: ``env_ids`` are not whole held workers' envs, or the action's rows
                do not match them.
        """
        self._start(action, self._workers_of(env_ids))

    def _start(self, action: Nest, workers: list[int]) -> None:
        env = self._env
        env._shared.write_action_rows(action, self._gather(workers).index if workers else _NO_ROWS)
        messages = {}
        for worker in workers if env._pending_cuts else ():
            cuts = env._pending_cuts.pop(worker, None)
            if cuts is not None:  # restarted outside a step: its cut envs wait for a LAST
                messages[worker] = ("step", cuts)
                self._cut_on_arrival[worker] = cuts
        env._check_usable()
        env._pool.ring_steps(workers, messages)
        timeout_s = env.step_timeout_s
        due = None if timeout_s is None else time.perf_counter() + timeout_s
        self.in_flight.update(dict.fromkeys(workers, due))
        if workers == self.delivered:  # the usual step: all of the last batch
            self.delivered, self._delivered_ids = [], []
        else:
            self.delivered = [w for w in self.delivered if w not in workers]
            self._delivered_ids = self._ids_of(self.delivered)

    def recv(self) -> TimeStep:
        """The next batch of ready envs: ``batch_workers`` workers' envs, or all those in
        flight where fewer are; rows by worker in order of arrival.

        Raises:
            RuntimeError: no env is stepping (send actions first).
        """
        if not self.busy:
            raise RuntimeError(
                "ParallelEnvironment.recv: no env is stepping; send actions first (step() "
                "sends them for the envs it last returned)"
            )
        count = min(self.batch_workers, len(self.in_flight) + len(self.ready))
        prepared = self._target(count).prepare()  # the batch's tensors, while workers step
        while len(self.ready) < count:
            self._wait(count - len(self.ready))
        workers, self.ready = self.ready[:count], self.ready[count:]
        return self._deliver(workers, prepared)

    def drain(self) -> None:
        """Waits for every step in flight and drops the answers (before a reset)."""
        while self.in_flight:
            self._wait(len(self.in_flight))
        self.ready.clear()

    def _wait(self, count: int) -> None:
        """Waits for ``count`` more workers to be ready, recovering those that died."""
        env = self._env
        env._check_usable()
        answered, replies, dead = env._pool.wait_any(self.in_flight, count, self._spin)
        for worker in answered:
            del self.in_flight[worker]
        for worker in dead:
            del self.in_flight[worker]
        if replies is not None:  # not all plain answers: an error, or a worker died
            try:
                dead = env._settle(replies, dead, stepping=True)[1]
            except BaseException:
                self.delivered += [w for w in answered if w not in self.delivered]
                self._delivered_ids = self._ids_of(self.delivered)
                raise
        self.ready += [w for w in answered if w not in dead]
        for worker in sorted(dead):  # replaced: it resets its envs but those it cuts
            cuts = env._pending_cuts.pop(worker)
            while env._request({worker: ("step", cuts)}, stepping=True)[1]:
                cuts = env._pending_cuts.pop(worker)
            self._cut_on_arrival[worker] = cuts
            self.ready.append(worker)

    def _deliver(self, workers: list[int], prepared: tuple[np.ndarray, TimeStep]) -> TimeStep:
        env = self._env
        if self._cut_on_arrival:
            self._end_cut_episodes(workers)
        gather = self._gather(workers)
        batch = gather.read(prepared)
        per_worker = self._per_worker
        for position, worker in enumerate(workers):
            self._last_of[worker] = (batch, position * per_worker)
        self.delivered, self._delivered_ids = workers, gather.row_list
        return batch if self._on_cpu else batch.to(env.device)

    def _end_cut_episodes(self, workers: list[int]) -> None:
        """Writes LAST rows for the envs of ``workers`` whose episodes a restart cut."""
        for worker in workers:
            cuts = self._cut_on_arrival.pop(worker, None)
            last = self._last_of[worker]
            if cuts and last is not None:
                batch, first = last
                start = self._env._slices[worker][0]
                rows = [start + i for i in cuts]
                self._env._shared.end_episodes(rows, batch, [first + i for i in cuts])

    def _hold_all(self) -> None:
        self.delivered = list(range(self._env.num_workers))
        self._delivered_ids = list(range(self._env.batch_size))

    def _ids_of(self, workers: list[int]) -> list[int]:
        return [i for w in workers for i in range(*self._env._slices[w])]

    def _target(self, count: int) -> TimeStepBuffer:
        """The buffer that batches of ``count`` workers' envs are read into."""
        target = self._targets.get(count)
        if target is None:
            source = self._env._shared.buffer
            target = self._targets[count] = source.resized(count * self._per_worker)
        return target

    def _gather(self, workers: list[int]) -> RowGather:
        """The reader of ``workers``' rows, in that order (made once, kept)."""
        key = tuple(workers)
        gather = self._gathers.get(key)
        if gather is None:
            if len(self._gathers) >= _MAX_GATHERS:
                self._gathers.clear()
            source, target = self._env._shared.buffer, self._target(len(workers))
            gather = self._gathers[key] = RowGather(source, self._ids_of(workers), target)
        return gather

    def _workers_of(self, env_ids: Sequence[int]) -> list[int]:
        """The held workers whose envs ``env_ids`` are, each slice whole and in order."""
        ids = list(env_ids)
        if ids == self._delivered_ids:
            return list(self.delivered)
        env = self._env
        starts = {start: w for w, (start, _) in enumerate(env._slices)}
        workers, at = [], 0
        while at < len(ids):
            worker = starts.get(ids[at])
            start, stop = env._slices[worker] if worker is not None else (0, 0)
            if worker is None or ids[at : at + stop - start] != list(range(start, stop)):
                raise ValueError(
                    f"env ids {ids} are not whole workers' envs in order (worker slices: "
                    f"{env._slices}); send actions for the env ids a step returned"
                )
            if worker in self.in_flight or worker in self.ready:
                raise ValueError(
                    f"env worker {worker}'s envs {list(range(start, stop))} are still "
                    "stepping or not yet returned; send actions only for envs a step returned"
                )
            workers.append(worker)
            at += stop - start
        return workers
