"""`WorkerPool`: worker processes with one pipe each, and waiting on their replies or deaths.

The transport under `ParallelEnvironment`, which knows nothing of envs: start a
worker, send each worker a message (`STEP` or a pickled object), and wait until
every addressed worker has answered or died. A new worker is reached through its
pipe (see `cadence.envs.channel`); once it is attached to the shared control
block (`use_doorbell`, then `ring_doorbell` for that worker), its requests go
through the `cadence.envs.doorbell` instead. Waiting covers both the answers and
the process sentinels, so a worker that dies mid-request is reported, never
waited for forever; and a deadline (the pool's ``timeout_s`` for a request, a
caller's own for `gather`), so a worker that hangs (a simulator stuck in a loop, a
deadlock in env code) is killed with ``SIGKILL`` and reported with the dead. The
deadline costs the hot path nothing: the waits read the clock they read anyway,
and only once the answers are late. What then becomes of a lost worker is
`cadence.envs.recovery`'s to decide.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import wait
from typing import Any

from cadence.envs.channel import OK, STEP, Channel
from cadence.envs.doorbell import ParentDoorbell
from cadence.envs.main_module import main_module_hidden

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 5.0
Reply = tuple[str, Any]  # ("ok", payload) or ("error", what the worker sent)
_OK: Reply = ("ok", None)


class WorkerPool:
    """``num_workers`` worker processes, each reached through its own pipe.

    Args:
        context: a ``multiprocessing`` context (its start method starts the workers).
        num_workers: the number of worker slots.
        timeout_s: the longest wait for a worker's answer to a request (`request`,
            `step_all`); a worker silent for longer is killed and reported as dead
            (see `hung_for`). ``None``: wait for ever.
    """

    def __init__(self, context: Any, num_workers: int, timeout_s: float | None = None):
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s}")
        self._context = context
        self.timeout_s = timeout_s
        self._hung: dict[int, float] = {}  # worker -> the wait it outlasted (until replaced)
        self._killed: dict[int, str] = {}  # worker -> why it was killed (until replaced)
        self.processes: list[Any] = [None] * num_workers
        self._channels: list[Channel | None] = [None] * num_workers
        # Every worker's pipe and sentinel, registered once: `select.poll` is one system
        # call, where `multiprocessing.connection.wait` builds a selector per call.
        self._poller = select.poll() if hasattr(select, "poll") else None
        self._owners: dict[int, tuple[int, bool]] = {}  # fd -> (worker, is its sentinel)
        self._doorbell: ParentDoorbell | None = None
        self._rung = [False] * num_workers  # which workers are reached through the doorbell
        self._sentinels = [-1] * num_workers

    def use_doorbell(self, memory: Any, spin_s: float) -> None:
        """Places the doorbell's control block in ``memory`` (workers attach to it one by one)."""
        self._doorbell = ParentDoorbell(memory, len(self.processes), spin_s)

    def ring_doorbell(self, worker: int) -> None:
        """Reaches ``worker`` through the doorbell from now on (it has attached to the block)."""
        self._rung[worker] = True

    def spawn(self, worker: int, target: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Starts ``target(conn, *args)`` as worker ``worker``, replacing a dead one there.

        Raises:
            RuntimeError: this process is daemonic, and so may not start any.
        """
        _refuse_daemonic_parent()
        if self._channels[worker] is not None:
            self._retire(worker)
        self._hung.pop(worker, None)
        self._killed.pop(worker, None)
        self._rung[worker] = False
        if self._doorbell is not None:
            self._doorbell.reset_row(worker)  # the new worker starts counting from 0
        parent_conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=target,
            args=(child_conn, *args),
            name=f"cadence-env-worker-{worker}",
            daemon=True,  # multiprocessing terminates daemons when the parent exits
        )
        with main_module_hidden():
            process.start()
        child_conn.close()  # so that a dead worker reads as EOF on our end
        self.processes[worker] = process
        self._sentinels[worker] = process.sentinel
        self._channels[worker] = Channel(parent_conn)
        self._watch(worker)

    def request(
        self, messages: dict[int, Any], while_waiting: Callable[[], None] | None = None
    ) -> tuple[dict[int, Reply], set[int]]:
        """Sends each worker its message (`STEP` or an object); waits for all of them.

        ``while_waiting`` (if any) runs once the messages are out, before the wait.

        Returns:
            The replies by worker, and the workers that died (or hung past ``timeout_s``
            and were killed) instead of replying.
        """
        if all(self._rung[w] for w in messages):
            return self._request_by_doorbell(messages, while_waiting)
        self.send(messages)
        return self.gather(messages, self.timeout_s)

    def send(self, messages: dict[int, Any]) -> None:
        """Sends each worker its message (`STEP` or an object) through its pipe, without
        waiting: `gather` (or `ready`) then tells when the answers are in."""
        for worker, message in messages.items():
            channel = self._channels[worker]
            try:
                if message is STEP:
                    channel.send_op(STEP)
                else:
                    channel.send(message)
            except OSError:
                pass  # a dead worker's pipe: `gather` sees its EOF and reports the death

    def ready(self, workers: Iterable[int], timeout_s: float | None = 0.0) -> set[int]:
        """Those of ``workers`` whose answer (or death) can be read now.

        Args:
            workers: the workers to look at.
            timeout_s: how long to wait for the first of them (blocking, not spinning);
                ``0``: not at all; ``None``: for ever. An empty set means it ran out.
        """
        channels = {self._channels[w].conn: w for w in workers}
        sentinels = {self.processes[w].sentinel: w for w in channels.values()}
        ready = wait([*channels, *sentinels], timeout_s)
        return {channels[r] if r in channels else sentinels[r] for r in ready}

    def step_all(
        self, while_waiting: Callable[[], None] | None = None
    ) -> tuple[dict[int, Reply], set[int]] | None:
        """`request` of `STEP` from every worker: the hot path of stepping.

        Returns:
            ``None`` when every worker answered its step plainly; else the replies and
            the dead workers, as `request` returns them.
        """
        if not all(self._rung):
            return self.request(dict.fromkeys(range(len(self.processes)), STEP), while_waiting)
        outcome = self._doorbell.step_all(
            self._channels, self._sentinels, while_waiting, self.timeout_s
        )
        if outcome is None:
            return None
        return self._replies(*outcome)

    def ring_steps(self, workers: Iterable[int], messages: dict[int, Any] | None = None) -> None:
        """Rings each of ``workers`` (all reached through the doorbell) for a step, or for
        its message in ``messages``, without waiting: `wait_any` waits for the answers."""
        messages = messages or {}
        for worker in workers:
            self._doorbell.ring(worker, self._channels[worker], messages.get(worker))

    def wait_any(
        self, deadlines: dict[int, float | None], count: int, spin: bool = True
    ) -> tuple[list[int], dict[int, Reply] | None, set[int]]:
        """Waits until ``count`` of the rung workers (the keys of ``deadlines``, each with
        the `time.perf_counter` time it must answer by) answered or died; ``spin``: poll
        the doorbell before sleeping (see `cadence.envs.doorbell.ParentDoorbell.wait_any`).

        Returns:
            The workers that answered, in the order found; their replies, or ``None`` when
            each answered its step plainly and none died (the hot path: no dict); and the
            workers that died or passed their deadline (those are killed, as `request`
            kills them).
        """
        answered, answers, dead, late = self._doorbell.wait_any(
            deadlines, count, self._channels, self._sentinels, spin
        )
        if answers is None and not dead and not late:
            return answered, None, dead
        replies, dead = self._replies(answers or dict.fromkeys(answered), dead, late)
        return answered, replies, dead

    def _request_by_doorbell(
        self, messages: dict[int, Any], while_waiting: Callable[[], None] | None
    ) -> tuple[dict[int, Reply], set[int]]:
        doorbell, channels = self._doorbell, self._channels
        for worker, message in messages.items():
            doorbell.ring(worker, channels[worker], None if message is STEP else message)
        if while_waiting is not None:
            while_waiting()
        outcome = doorbell.wait(list(messages), channels, self._sentinels, self.timeout_s)
        return self._replies(*outcome)

    def gather(
        self, workers: Iterable[int], timeout_s: float | None = None
    ) -> tuple[dict[int, Reply], set[int]]:
        """Waits (blocking, not spinning) for a reply or the death of each of ``workers``.

        Args:
            workers: the workers to wait for.
            timeout_s: the longest wait; the workers still silent then are killed and
                counted dead (see `hung_for`). ``None``: wait for ever.
        """
        waiting = set(workers)
        replies: dict[int, Reply] = {}
        dead: set[int] = set()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while waiting:
            ready = self._ready(waiting, deadline)
            if ready is None:
                self._kill_hung(waiting, timeout_s)
                dead |= waiting
                break
            for worker, by_sentinel in ready:
                if worker not in waiting:
                    continue  # both its pipe and its sentinel were ready
                waiting.discard(worker)
                reply = self._receive(worker, by_sentinel)
                if reply is None:
                    dead.add(worker)
                else:
                    replies[worker] = reply
        return replies, dead

    def reap(self, worker: int) -> str:
        """Waits for dead ``worker`` to be gone; returns how it ended, as a predicate:
        ``"died (killed by signal SIGKILL)"``, ``"hung (no answer within 60 s; killed
        with SIGKILL)"``."""
        process = self.processes[worker]
        process.join(timeout=1.0)
        if worker in self._killed:
            return self._killed[worker]
        waited_s = self._hung.get(worker)
        if waited_s is not None:
            return f"hung (no answer within {waited_s:g} s; killed with SIGKILL)"
        return f"died ({describe_exit(process.exitcode)})"

    def kill(self, worker: int, how: str) -> None:
        """Kills live ``worker`` (e.g. one whose env raised, to replace it); `reap` then
        returns ``how``."""
        self._killed[worker] = how
        process = self.processes[worker]
        if process.exitcode is None:
            process.kill()
        process.join(timeout=_CLOSE_TIMEOUT_S)

    def hung_for(self, worker: int) -> float | None:
        """The wait that dead ``worker`` outlasted before it was killed (``None``: it died)."""
        return self._hung.get(worker)

    def stop(self) -> None:
        """Asks every worker to exit (``("close", None)``); kills the ones that do not."""
        for worker, channel in enumerate(self._channels):
            try:
                if channel is not None and self._rung[worker]:
                    self._doorbell.ring(worker, channel, ("close", None))
                elif channel is not None:
                    channel.send(("close", None))
            except (OSError, ValueError):  # the worker is gone already
                pass
        for process in self.processes:
            if process is None:
                continue
            process.join(timeout=_CLOSE_TIMEOUT_S)
            if process.exitcode is None:
                logger.warning("env worker %s did not exit; killing it", process.name)
                process.kill()
                process.join()
        for channel in self._channels:
            if channel is not None:
                channel.close()
        self._doorbell = None  # drops its view of the shared block, which can then close

    def _ready(self, waiting: set[int], deadline: float | None) -> list[tuple[int, bool]] | None:
        """Blocks until some of ``waiting`` can be read: ``(worker, by its sentinel)`` pairs.

        Returns:
            The pairs, or ``None`` once ``deadline`` (a `time.monotonic` time) has passed.
        """
        timeout_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._poller is not None:
            timeout_ms = None if timeout_s is None else math.ceil(timeout_s * 1000)
            ready = [self._owners[fd] for fd, _ in self._poller.poll(timeout_ms)]
            if any(worker in waiting for worker, _ in ready):
                return ready
            if not ready:
                return None if timeout_s is not None and time.monotonic() >= deadline else []
            # Only workers outside this request are ready (one died since it answered):
            # wait on the others alone rather than spin.
            timeout_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        channels = {self._channels[w].conn: w for w in waiting}
        sentinels = {self.processes[w].sentinel: w for w in waiting}
        ready_objects = wait([*channels, *sentinels], timeout_s)
        if not ready_objects and deadline is not None and time.monotonic() >= deadline:
            return None
        return [
            (channels[r], False) if r in channels else (sentinels[r], True) for r in ready_objects
        ]

    def _replies(
        self, answers: dict[int, Any], dead: set[int], late: set[int]
    ) -> tuple[dict[int, Reply], set[int]]:
        """A doorbell's outcome as replies (a plain "done" is ``("ok", None)``) and the dead,
        the ``late`` workers killed and counted with the dead."""
        if late:
            self._kill_hung(late, self.timeout_s)
        replies = {w: _OK if a is None else a for w, a in answers.items()}
        return replies, dead | late

    def _kill_hung(self, workers: Iterable[int], waited_s: float | None) -> None:
        """Kills ``workers``, which did not answer within ``waited_s``; `reap` says so
        (of those still running: one that exited meanwhile died)."""
        for worker in workers:
            process = self.processes[worker]
            if process.exitcode is None:
                self._hung[worker] = waited_s
                process.kill()

    def _receive(self, worker: int, by_sentinel: bool) -> Reply | None:
        """``worker``'s reply, or ``None`` if it died."""
        channel = self._channels[worker]
        try:
            # A worker may have answered just before it exited; else it died mid-request.
            if not by_sentinel or channel.poll():
                op, message = channel.receive()
                return ("ok", None) if op == OK else message
        except (EOFError, OSError):
            pass
        return None

    def _watch(self, worker: int) -> None:
        """Registers ``worker``'s pipe and sentinel with the poller."""
        if self._poller is None:
            return
        pipe, sentinel = self._channels[worker].fd, self.processes[worker].sentinel
        for fd, is_sentinel in ((pipe, False), (sentinel, True)):
            self._owners[fd] = (worker, is_sentinel)
            self._poller.register(fd, select.POLLIN)

    def _retire(self, worker: int) -> None:
        """Forgets dead ``worker``'s pipe and sentinel (before their fds can be reused)."""
        if self._poller is not None:
            for fd in (self._channels[worker].fd, self.processes[worker].sentinel):
                self._poller.unregister(fd)
                del self._owners[fd]
        self._channels[worker].close()
        self._channels[worker] = None


def available_cores() -> int:
    """The number of cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, from its ``exitcode``."""
    if exitcode is None:
        return "still running but its pipe broke"
    if exitcode < 0:
        return f"killed by signal {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _refuse_daemonic_parent() -> None:
    """Says what to do where multiprocessing would only assert "daemonic processes are
    not allowed to have children" (a `multiprocessing.Pool` worker is daemonic)."""
    if multiprocessing.current_process().daemon:
        raise RuntimeError(
            f"cannot start worker processes: this process "
            f"({multiprocessing.current_process().name}) is daemonic, e.g. a "
            "multiprocessing.Pool worker, and daemonic processes may not have children. "
            "Call it from a concurrent.futures.ProcessPoolExecutor worker or a "
            "multiprocessing.Process instead, or use env.backend=serial (or thread), "
            "which starts no processes"
        )
