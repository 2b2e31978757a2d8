"""`RecoveryPolicy`: what happens to a worker process that died or hung, for every pool of them.

`ParallelEnvironment` and the `cadence.collect` `Batcher` both run their work in worker
processes (or Ray actors) and follow this one policy:

- **Detection** is the transport's (`cadence.envs.worker_pool.WorkerPool`): a worker that
  dies is noticed through its process sentinel; one silent past the request's timeout has
  hung and is killed with ``SIGKILL``. ``reap`` then says how it ended (``"died (exit
  code 3)"``, ``"hung (no answer within 60 s; killed with SIGKILL)"``).
- **Before the owner is built**, a lost worker is an error, never a restart: the owner is
  unusable (a build that timed out says which timeout to raise).
- **Once built**, a lost worker is restarted within a `RestartBudget`: at most
  ``max_restarts`` restarts of each worker within any ``window_s`` seconds. Each restart
  logs one warning (the worker, its pid, what it hosts, how it ended, the restart's number,
  what became of its work and the seed offset of its rebuilt envs); the rebuilt envs are
  seeded with their seed moved by ``restarts * batch_size`` (`seed_offset`). A replacement
  that dies too counts as another restart.
- **Past the budget** (or with ``max_restarts=0``), or when a replacement cannot even be
  started, the owner raises its worker error, naming the worker, how it ended and which
  setting spent the budget, and is unusable from then on (`broken`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class RestartBudget:
    """At most ``max_restarts`` restarts of each worker within any ``window_s`` seconds.

    >>> budget = RestartBudget(max_restarts=1, window_s=60.0)
    >>> budget.spend(0), budget.spend(0), budget.spend(1)
    (True, False, True)
    """

    def __init__(
        self, max_restarts: int, window_s: float, clock: Callable[[], float] = time.monotonic
    ):
        if max_restarts < 0 or window_s <= 0:
            raise ValueError(
                f"need max_restarts >= 0 and window_s > 0, got {max_restarts} and {window_s}"
            )
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._clock = clock
        self._times: dict[int, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )

    def spend(self, worker: int) -> bool:
        """Records a restart of ``worker`` if the budget allows one; returns whether it did."""
        now, times = self._clock(), self._times[worker]
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if len(times) >= self.max_restarts:
            return False
        times.append(now)
        return True

    def allows(self, worker: int) -> bool:
        """Whether `spend` would record a restart of ``worker`` now (nothing is recorded)."""
        now, times = self._clock(), self._times[worker]
        return sum(now - t < self.window_s for t in times) < self.max_restarts

    def recent(self, worker: int) -> int:
        """The restarts of ``worker`` recorded within the window (as of the last `spend`)."""
        return len(self._times[worker])


class RecoveryPolicy:
    """The one recovery policy (module docstring) for the workers of one owner.

    Args:
        pool: the workers' transport (`WorkerPool` or the Batcher's Ray pool): its
            ``processes`` (each with a ``pid``), ``reap`` and ``hung_for``.
        owner: the owner's name in messages (``"ParallelEnvironment"``, ``"Batcher"``).
        worker_kind: a worker's name in messages (``"env worker"``, ``"batcher worker"``).
        batch_size: the envs of the whole batch (the seed offset's unit).
        max_restarts: restarts of each worker allowed within any ``window_s`` seconds.
        window_s: the window of ``max_restarts``.
        hosted: what worker ``w`` hosts, for messages (``"hosting environment ids 0..3"``).
        cut: what a restart does to the worker's unfinished work, for the warning.
        make_error: the owner's error for a lost worker: ``(message, worker, hung)``.
        building: the phrase for "before the owner was built" (``"while the environment
            was being built"``).
        build_timeout: the setting that bounds building, named when a build timed out.
    """

    def __init__(
        self,
        pool: Any,
        *,
        owner: str,
        worker_kind: str,
        batch_size: int,
        max_restarts: int,
        window_s: float,
        hosted: Callable[[int], str],
        cut: str,
        make_error: Callable[[str, int, bool], Exception],
        building: str,
        build_timeout: str,
    ):
        self.budget = RestartBudget(max_restarts, window_s)
        self.restarts = [0] * len(pool.processes)
        self.built = False  # a worker lost before this is an error, not a restart
        self.broken: str | None = None  # why the owner is unusable
        self._pool, self._owner, self._kind = pool, owner, worker_kind
        self._batch_size, self._hosted, self._cut = batch_size, hosted, cut
        self._make_error, self._building, self._build_timeout = make_error, building, build_timeout
        self._ended: dict[int, str] = {}

    def seed_offset(self, worker: int) -> int:
        """How far ``worker``'s envs' seeds move: ``restarts * batch_size``."""
        return self.restarts[worker] * self._batch_size

    def ended(self, worker: int) -> str:
        """How ``worker``'s last lost process ended (`recover` records it)."""
        return self._ended[worker]

    def allows(self, worker: int) -> bool:
        """Whether ``worker`` may be restarted now (its budget is not spent)."""
        return self.budget.allows(worker)

    def recover(
        self,
        worker: int,
        how: str,
        start: Callable[[int], None],
        ready: Callable[[int], bool],
    ) -> None:
        """Replaces lost ``worker`` within the budget, else raises the owner's error.

        Args:
            worker: the lost worker.
            how: how it ended (the pool's ``reap``).
            start: starts a replacement (its envs seeded with `seed_offset`); if it
                raises, the owner is unusable.
            ready: readies the started replacement (builds, attaches); returns False if
                it died meanwhile (another restart, within the same budget).

        Raises:
            Exception: the owner's error (``make_error``): the owner is still being built,
                or the budget is spent; the owner is then unusable.
        """
        while True:
            self._ended[worker] = how
            if not self.built:
                raise self.lost_while_building(worker, how)
            if not self.budget.spend(worker):
                raise self.unusable(worker, how, f"and {self.spent()}")
            self.restarts[worker] += 1
            self._warn(worker, how)
            try:
                start(worker)
            except BaseException as error:
                self.broken = f"starting a replacement for {self._kind} {worker} failed: {error!r}"
                raise
            if ready(worker):
                return
            how = self._pool.reap(worker)  # the replacement died too: that counts as well

    def lost_while_building(self, worker: int, how: str) -> Exception:
        """The error for ``worker`` lost before the owner was built; the owner is unusable."""
        reason = self._building
        if self._pool.hung_for(worker) is not None:
            reason += f": building it timed out ({self._build_timeout}; None waits for ever)"
        return self.unusable(worker, how, reason)

    def unusable(self, worker: int, how: str, reason: str) -> Exception:
        """The error for lost ``worker`` that is not restarted (``reason``: why); marks the
        owner unusable."""
        message = (
            f"{self.describe(worker, how)} {reason}; this {self._owner} is unusable: close it "
            "and build a new one (and find what kills the worker)"
        )
        self.broken = message
        return self._make_error(message, worker, self._pool.hung_for(worker) is not None)

    def spent(self) -> str:
        """Why a built owner's worker is not restarted: restarts are off or spent."""
        budget = self.budget
        if budget.max_restarts == 0:
            return "restarts are off (max_worker_restarts=0)"
        return (
            f"its {budget.max_restarts} restarts within {budget.window_s:g} s are spent "
            f"(max_worker_restarts={budget.max_restarts}, restart_window_s={budget.window_s:g})"
        )

    def describe(self, worker: int, how: str) -> str:
        """``"env worker 0 (pid 123, hosting environment ids 0..3) died (exit code 3)"``."""
        pid = self._pool.processes[worker].pid
        return f"{self._kind} {worker} (pid {pid}, {self._hosted(worker)}) {how}"

    def _warn(self, worker: int, how: str) -> None:
        logger.warning(
            "%s; restarting it (restart %d of at most %d per %g s): %s, and its rebuilt envs "
            "are seeded seed + env_id + %d",
            self.describe(worker, how),
            self.budget.recent(worker),
            self.budget.max_restarts,
            self.budget.window_s,
            self._cut,
            self.seed_offset(worker),
        )
