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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from cadence.data.nest import Nest, flatten
from cadence.data.time_step import TimeStep

if TYPE_CHECKING:
    from cadence.envs.parallel import ParallelEnvironment


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
        self._cut_on_arrival: dict[int, list[int]] = {}  # worker -> envs to end with LAST
        self._last: TimeStep | None = None  # every env's last delivered step

    @property
    def busy(self) -> bool:
        """Whether a step is in flight or answered but not delivered."""
        return bool(self.in_flight or self.ready)

    def reset(self, first: TimeStep) -> None:
        """Every worker is held after a reset that delivered ``first`` (all envs)."""
        self.in_flight.clear()
        self.ready.clear()
        self._cut_on_arrival.clear()
        self.delivered = list(range(self._env.num_workers))
        self._last = first.clone()

    def forget_last(self) -> None:
        """After `set_state`: no episode was delivered by this object."""
        self._last = None
        self.delivered = list(range(self._env.num_workers))

    def last(self) -> TimeStep | None:
        """Every env's last delivered time step (None: none since `set_state`)."""
        return self._last

    def send(self, action: Nest, env_ids: Sequence[int]) -> None:
        """Writes ``action`` (rows in the order of ``env_ids``) and starts those envs' step.

        Raises:
            ValueError: ``env_ids`` are not whole held workers' envs, or the action's rows
                do not match them.
        """
        env = self._env
        workers = self._workers_of(env_ids)
        env._shared.write_action_rows(action, list(env_ids))
        messages = {}
        for worker in workers:
            cuts = env._pending_cuts.pop(worker, None)
            if cuts is not None:  # restarted outside a step: its cut envs wait for a LAST
                messages[worker] = ("step", cuts)
                self._cut_on_arrival[worker] = cuts
        env._check_usable()
        env._pool.ring_steps(workers, messages)
        timeout_s = env.step_timeout_s
        due = None if timeout_s is None else time.perf_counter() + timeout_s
        self.in_flight.update(dict.fromkeys(workers, due))
        self.delivered = [w for w in self.delivered if w not in workers]

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
        while len(self.ready) < count:
            self._wait(count - len(self.ready))
        workers, self.ready = self.ready[:count], self.ready[count:]
        return self._deliver(workers)

    def drain(self) -> None:
        """Waits for every step in flight and drops the answers (before a reset)."""
        while self.in_flight:
            self._wait(len(self.in_flight))
        self.ready.clear()

    def _wait(self, count: int) -> None:
        """Waits for ``count`` more workers to be ready, recovering those that died."""
        env = self._env
        env._check_usable()
        answered, replies, dead = env._pool.wait_any(dict(self.in_flight), count)
        for worker in [*answered, *dead]:
            del self.in_flight[worker]
        try:
            dead = env._settle(replies, dead, stepping=True)[1]
        except BaseException:
            self.delivered += [w for w in answered if w not in self.delivered]
            raise
        self.ready += [w for w in answered if w not in dead]
        for worker in sorted(dead):  # replaced: it resets its envs but those it cuts
            cuts = env._pending_cuts.pop(worker)
            while env._request({worker: ("step", cuts)}, stepping=True)[1]:
                cuts = env._pending_cuts.pop(worker)
            self._cut_on_arrival[worker] = cuts
            self.ready.append(worker)

    def _deliver(self, workers: list[int]) -> TimeStep:
        env = self._env
        cuts = {w: self._cut_on_arrival.pop(w) for w in workers if w in self._cut_on_arrival}
        if cuts and self._last is not None:
            rows = [env._slices[w][0] + i for w, local in cuts.items() for i in local]
            env._shared.end_episodes(rows, self._last)
        rows = torch.tensor([r for w in workers for r in range(*env._slices[w])])
        batch = env._shared.buffer.read("cpu")[rows]
        if self._last is None:
            self._last = env._shared.buffer.read("cpu").clone()
        _write_rows(self._last, rows, batch)
        self.delivered = workers
        return batch if env.device.type == "cpu" else batch.to(env.device)

    def _workers_of(self, env_ids: Sequence[int]) -> list[int]:
        """The held workers whose envs ``env_ids`` are, each slice whole and in order."""
        env = self._env
        starts = {start: w for w, (start, _) in enumerate(env._slices)}
        workers, ids, at = [], list(env_ids), 0
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


def _write_rows(dst: TimeStep, rows: torch.Tensor, src: TimeStep) -> None:
    """``dst[rows] = src``, leaf by leaf."""
    for target, value in zip(flatten(dst.to_dict(False)), flatten(src.to_dict(False)), strict=True):
        target[rows] = value
