"""`Doorbell`: per-step signalling between `ParallelEnvironment` and its workers in shared memory.

A step's round trip through pipes costs four system calls and two wake-ups of a
sleeping process; on a small virtual machine each wake-up is an inter-processor
interrupt, and the whole exchange cost more than stepping four MuJoCo envs. So
once a worker is attached, a request is a sequence number the parent stores in
the worker's row of a control block in shared memory, and the answer is the
same number the worker stores back. A waiter checks its number in a loop that
yields the core on every turn (``sched_yield``: a process with work to do runs
first, so waiting steals no time from it) for at most ``spin_s`` seconds, then
goes to sleep on the pipe after saying so in the control block; whoever rings
a sleeper also writes one byte to its pipe. The pipes still carry everything
that is not a plain step (pickled commands and replies, in `Channel` framing):
the control block then says that a message follows in the pipe.

How long to spin adapts to the waits seen (`SpinPolicy`): a waiter whose waits
have recently been longer than ``spin_s`` (a worker while its parent trains, a
parent whose envs step slowly) sleeps at once and costs nothing.

The parent's waits take a deadline (``timeout_s``): a worker that has not
answered by then is reported as late (its process is the caller's to kill). It is
only checked when the parent wakes from a sleep, so a step answered while the
parent spins costs no more than without it.

A sleeper announces itself with a store and then re-reads its number; the ringer
stores the number and then reads the announcement. Without a memory fence
either may read a stale value, so sleeps are bounded (1 ms first, growing to
1 s): on waking a sleeper reads its number again, which is visible by then.

Control block, one 64-byte row of int64 slots per worker and one for the parent:
``COMMAND`` (parent's latest sequence number), ``COMMAND_IS_MESSAGE``, ``DONE``
(the worker's latest answered number), ``REPLY_IS_MESSAGE``, ``WORKER_SLEEPS``;
the parent row holds ``PARENT_SLEEPS``.
"""

from __future__ import annotations

import math
import os
import select
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from cadence.envs.channel import OK, STEP, Channel

COMMAND, COMMAND_IS_MESSAGE, DONE, REPLY_IS_MESSAGE, WORKER_SLEEPS = range(5)
PARENT_SLEEPS = 0
_SLOTS = 8  # int64 slots per row: one 64-byte cache line
# Sleeps are bounded and grow (ms): a wake-up lost to store/load reordering costs at most
# the first one, and a sleeper that waits long wakes once a second to look again.
_SLEEP_MS = (1, 10, 100, 1000)
_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))


def _sleep_timeouts_ms() -> Iterator[int]:
    """1, 10, 100, then 1000 ms for ever: the bounds of a sleeper's successive sleeps."""
    yield from _SLEEP_MS
    while True:
        yield _SLEEP_MS[-1]


def control_block_nbytes(num_workers: int) -> int:
    """Bytes of the control block for ``num_workers`` workers."""
    return (num_workers + 1) * _SLOTS * 8


class SpinPolicy:
    """How long a waiter spins before it sleeps: ``spin_s``, unless recent waits were longer.

    Args:
        spin_s: the longest spin (0: always sleep at once).
    """

    def __init__(self, spin_s: float):
        if spin_s < 0:
            raise ValueError(f"spin_s must be >= 0, got {spin_s}")
        self.spin_s = spin_s
        self._typical_wait = 0.0  # moving average of waits, each clipped to 2 * spin_s

    def budget(self) -> float:
        """Seconds to spin on the next wait."""
        return self.spin_s if self._typical_wait < self.spin_s else 0.0

    def record(self, waited_s: float) -> None:
        """Notes how long a wait took (clipped, so one long pause does not stop spinning for long)."""
        self._typical_wait += 0.1 * (min(waited_s, 2 * self.spin_s) - self._typical_wait)


def _rows(memory: Any, num_workers: int) -> memoryview:
    """The control block as int64 slots (a memoryview indexes faster than numpy scalars)."""
    return memoryview(memory)[: control_block_nbytes(num_workers)].cast("q")


class ParentDoorbell:
    """The parent's side: ring workers, wait for their answers.

    Args:
        memory: the control block (``control_block_nbytes(num_workers)`` bytes of shared memory).
        num_workers: worker rows in the block.
        spin_s: the longest spin while waiting for workers (see `SpinPolicy`).
    """

    def __init__(self, memory: Any, num_workers: int, spin_s: float):
        self._slots = _rows(memory, num_workers)
        self._parent = num_workers * _SLOTS + PARENT_SLEEPS
        self._bases = list(range(0, self._parent, _SLOTS))  # every worker's row
        self._policy = SpinPolicy(spin_s)

    def reset_row(self, worker: int) -> None:
        """Clears ``worker``'s row (before a new worker process attaches to it)."""
        base = worker * _SLOTS
        for slot in range(_SLOTS):
            self._slots[base + slot] = 0

    def ring(self, worker: int, channel: Channel, message: Any = None) -> None:
        """Sends ``worker`` a step request, or ``message`` (pickled through ``channel``).

        A dead worker's closed pipe is not an error here: `wait` sees its sentinel and
        reports the death.
        """
        base = worker * _SLOTS
        self._slots[base + COMMAND_IS_MESSAGE] = message is not None
        self._slots[base + COMMAND] += 1
        try:
            if message is not None:
                channel.send(message)  # wakes a sleeping worker too
            elif self._slots[base + WORKER_SLEEPS]:
                channel.send_op(STEP)
        except OSError:
            pass

    def step_all(
        self,
        channels: Sequence[Channel],
        sentinels: Sequence[int],
        while_waiting: Callable[[], None] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[dict[int, Any], set[int], set[int]] | None:
        """Rings every worker for a step, runs ``while_waiting``, then waits for all of them.

        `ring` and `wait` in one call, without a reply dict unless something other than a
        plain answer came: each plain `ParallelEnvironment.step` comes here, and with fast
        envs the parent's calls and dicts per step cost as much as the workers' stepping.

        Returns:
            ``None`` when every worker answered its step plainly; otherwise what `wait`
            returns (an env's error comes as a message, a dead or late worker in its set).
        """
        slots, bases = self._slots, self._bases
        for worker, channel in enumerate(channels):
            self.ring(worker, channel)
        if while_waiting is not None:
            while_waiting()
        start = time.perf_counter()
        pending = self._spin(bases, start)
        if not pending and not any(slots[base + REPLY_IS_MESSAGE] for base in bases):
            self._policy.record(time.perf_counter() - start)
            return None
        answers, dead, late = self._collect(
            range(len(bases)), pending, channels, sentinels, start, timeout_s
        )
        if dead or late or any(answer is not None for answer in answers.values()):
            return answers, dead, late
        return None  # plain answers that came while this side slept

    def wait(
        self,
        workers: Sequence[int],
        channels: Sequence[Channel],
        sentinels: Sequence[int],
        timeout_s: float | None = None,
    ) -> tuple[dict[int, Any], set[int], set[int]]:
        """Waits until each of ``workers`` answered its latest request, died, or is late.

        Args:
            workers: the workers rung.
            channels, sentinels: every worker's channel and process sentinel, by worker index.
            timeout_s: the longest wait (``None``: for ever).

        Returns:
            The messages among the answers by worker (``None`` for a plain "done"),
            the workers that died instead of answering, and those that had not
            answered within ``timeout_s`` (late).
        """
        start = time.perf_counter()
        pending = self._spin([w * _SLOTS for w in workers], start)
        return self._collect(workers, pending, channels, sentinels, start, timeout_s)

    def wait_any(
        self,
        deadlines: dict[int, float | None],
        count: int,
        channels: Sequence[Channel],
        sentinels: Sequence[int],
        spin: bool = True,
    ) -> tuple[list[int], dict[int, Any] | None, set[int], set[int]]:
        """Waits until ``count`` of the workers rung (the keys of ``deadlines``) answered or
        died, or one of them passed its deadline (the asynchronous mode's wait).

        Args:
            deadlines: each worker waited for, with the `time.perf_counter` time by which it
                must answer (``None``: none).
            count: how many answers (or deaths) end the wait.
            channels, sentinels: every worker's channel and process sentinel, by worker index.
            spin: whether to poll before sleeping (see `SpinPolicy`); ``False`` looks once,
                then sleeps until an answer wakes this side.

        Returns:
            The workers that answered (those found in one look in worker order), their
            messages (``None`` for a plain "done"; the whole dict ``None`` where every
            answer is plain), those that died, and those late.
        """
        start = time.perf_counter()
        answered = self._spin_any(deadlines, count, start if spin else -math.inf)
        dead: set[int] = set()
        late: set[int] = set()
        if len(answered) < count:
            answered, dead, late = self._sleep_until_some(deadlines, count, channels, sentinels)
        self._policy.record(time.perf_counter() - start)
        slots = self._slots
        if not any(slots[worker * _SLOTS + REPLY_IS_MESSAGE] for worker in answered):
            return answered, None, dead, late  # plain answers: no reply dict to build
        replies: dict[int, Any] = {}
        for worker in answered:
            if slots[worker * _SLOTS + REPLY_IS_MESSAGE]:
                try:
                    replies[worker] = channels[worker].receive_message()
                except (EOFError, OSError):
                    dead.add(worker)
            else:
                replies[worker] = None
        return [w for w in answered if w not in dead], replies, dead, late

    def _spin_any(self, workers: Iterable[int], count: int, start: float) -> list[int]:
        """Polls the rows of ``workers`` (yielding the core) until ``count`` of them answered
        or the spin budget from ``start`` is spent (at once for a ``start`` of ``-inf``);
        returns those that answered."""
        slots = self._slots
        bases = [w * _SLOTS for w in workers]
        # Compared inline, not through `_answered`: this loop is every async step's wait.
        done = [base for base in bases if slots[base + DONE] == slots[base + COMMAND]]
        if len(done) < count:
            deadline = start + self._policy.budget()
            while len(done) < count and time.perf_counter() < deadline:
                _yield()
                done = [base for base in bases if slots[base + DONE] == slots[base + COMMAND]]
        return [base // _SLOTS for base in done]

    def _sleep_until_some(
        self,
        deadlines: dict[int, float | None],
        count: int,
        channels: Sequence[Channel],
        sentinels: Sequence[int],
    ) -> tuple[list[int], set[int], set[int]]:
        """`wait_any`'s sleep, as `_sleep_until_answered` sleeps: until ``count`` of the
        workers answered or died, or one passed its deadline (those are late).

        A wake-up byte from a worker that answered is read at once (left in the pipe, it
        would end the next sleep early for nothing), and the bound of a sleep only grows
        after one that timed out, so a wake-up lost to reordering costs the shortest.
        """
        self._slots[self._parent] = 1
        dead: set[int] = set()
        try:
            timeouts = _sleep_timeouts_ms()
            timeout_ms = next(timeouts)
            while True:
                answered = [w for w in deadlines if w not in dead and self._answered(w)]
                if len(answered) + len(dead) >= count:
                    return answered, dead, set()
                waiting = [w for w in deadlines if w not in dead and not self._answered(w)]
                now = time.perf_counter()
                late = {w for w in waiting if deadlines[w] is not None and deadlines[w] <= now}
                if late:
                    return answered, dead, late
                due = [deadlines[w] for w in waiting if deadlines[w] is not None]
                bound_ms = timeout_ms
                if due:
                    bound_ms = max(1, min(timeout_ms, math.ceil((min(due) - now) * 1000)))
                owners = {channels[w].fd: (w, False) for w in waiting}
                owners.update({sentinels[w]: (w, True) for w in waiting})
                woken = _poll(owners, bound_ms)
                if not woken:
                    timeout_ms = next(timeouts)
                for worker, by_sentinel in woken:
                    if worker in dead:
                        continue
                    if self._answered(worker):
                        # Its wake-up byte; a message it answered with is `wait_any`'s to read.
                        if not by_sentinel and not self._slots[worker * _SLOTS + REPLY_IS_MESSAGE]:
                            channels[worker].drain_signal()
                        continue
                    if by_sentinel or not channels[worker].drain_signal():
                        dead.add(worker)  # exited, or its pipe is closed
        finally:
            self._slots[self._parent] = 0

    def _spin(self, bases: Sequence[int], start: float) -> list[int]:
        """Polls the rows at ``bases`` (yielding the core) until all answered or the spin
        budget from ``start`` is spent; returns the rows still pending."""
        slots = self._slots
        # Compared inline, not through `_answered`: this loop is every step's wait.
        pending = [base for base in bases if slots[base + DONE] != slots[base + COMMAND]]
        deadline = start + self._policy.budget()
        while pending and time.perf_counter() < deadline:
            _yield()
            pending = [base for base in pending if slots[base + DONE] != slots[base + COMMAND]]
        return pending

    def _collect(
        self,
        workers: Iterable[int],
        pending: list[int],
        channels: Sequence[Channel],
        sentinels: Sequence[int],
        start: float,
        timeout_s: float | None,
    ) -> tuple[dict[int, Any], set[int], set[int]]:
        """Sleeps until the ``pending`` rows answered (or their workers died, or
        ``timeout_s`` from ``start`` passed), then reads the messages among the answers
        of ``workers`` (see `wait`)."""
        dead: set[int] = set()
        late: set[int] = set()
        if pending:
            waiting = [base // _SLOTS for base in pending]
            deadline = None if timeout_s is None else start + timeout_s
            dead, late = self._sleep_until_answered(waiting, channels, sentinels, deadline)
        self._policy.record(time.perf_counter() - start)
        replies: dict[int, Any] = {}
        for worker in workers:
            if worker in dead or worker in late:
                continue
            if self._slots[worker * _SLOTS + REPLY_IS_MESSAGE]:
                try:
                    replies[worker] = channels[worker].receive_message()
                except (EOFError, OSError):
                    dead.add(worker)  # it died after answering, before its message was out
            else:
                replies[worker] = None
        return replies, dead, late

    def _answered(self, worker: int) -> bool:
        base = worker * _SLOTS
        return self._slots[base + DONE] == self._slots[base + COMMAND]

    def _sleep_until_answered(
        self,
        pending: list[int],
        channels: Sequence[Channel],
        sentinels: Sequence[int],
        deadline: float | None,
    ) -> tuple[set[int], set[int]]:
        """Sleeps on the pending workers' pipes and sentinels until they answered, died
        or ``deadline`` (a `time.perf_counter` time, ``None``: none) passed.

        A pipe that is readable before its worker answered holds a stale wake-up byte
        (a message is only written after its answer) or its end: the byte is dropped.

        Returns:
            The workers that died, and those still silent at ``deadline``.
        """
        self._slots[self._parent] = 1
        dead: set[int] = set()
        try:
            waiting = [w for w in pending if not self._answered(w)]
            timeouts = _sleep_timeouts_ms()
            while waiting:
                timeout_ms = next(timeouts)
                if deadline is not None:
                    left_ms = math.ceil((deadline - time.perf_counter()) * 1000)
                    if left_ms <= 0:
                        return dead, set(waiting)
                    timeout_ms = min(timeout_ms, left_ms)
                owners = {channels[w].fd: (w, False) for w in waiting}
                owners.update({sentinels[w]: (w, True) for w in waiting})
                for worker, by_sentinel in _poll(owners, timeout_ms):
                    if worker in dead or self._answered(worker):
                        continue
                    if by_sentinel or not channels[worker].drain_signal():
                        dead.add(worker)  # exited, or its pipe is closed
                waiting = [w for w in waiting if w not in dead and not self._answered(w)]
        finally:
            self._slots[self._parent] = 0
        return dead, set()


class WorkerDoorbell:
    """A worker's side: wait for the parent's requests, answer them.

    Args:
        memory: the control block (see `ParentDoorbell`).
        num_workers: worker rows in the block.
        worker: this worker's row.
        channel: this worker's end of its pipe.
        spin_s: the longest spin while waiting for the parent (see `SpinPolicy`).
    """

    def __init__(self, memory: Any, num_workers: int, worker: int, channel: Channel, spin_s: float):
        self._slots = _rows(memory, num_workers)
        self._base = worker * _SLOTS
        self._parent = num_workers * _SLOTS + PARENT_SLEEPS
        self._channel = channel
        self._policy = SpinPolicy(spin_s)
        self._poller = select.poll()
        self._poller.register(channel.fd, select.POLLIN)
        self._last = self._slots[self._base + COMMAND]

    def wait(self) -> Any:
        """Blocks for the parent's next request: ``None`` for a step, else the message.

        Raises:
            EOFError: the parent is gone.
        """
        slots, command = self._slots, self._base + COMMAND
        start = time.perf_counter()
        deadline = start + self._policy.budget()
        while slots[command] == self._last and time.perf_counter() < deadline:
            _yield()
        if slots[command] == self._last:
            self._sleep()
        self._policy.record(time.perf_counter() - start)
        self._last = slots[command]
        if slots[self._base + COMMAND_IS_MESSAGE]:
            return self._channel.receive_message()
        return None

    def answer(self, message: Any = None) -> None:
        """Reports the request done; ``message`` (if any) follows through the pipe.

        The answer is stored before the message is written: a large message fills the
        pipe, and the parent only reads it once it sees the answer.
        """
        self._slots[self._base + REPLY_IS_MESSAGE] = message is not None
        self._slots[self._base + DONE] = self._last
        if message is not None:
            self._channel.send(message)
        elif self._slots[self._parent]:
            self._channel.send_op(OK)

    def _sleep(self) -> None:
        slots, command = self._slots, self._base + COMMAND
        slots[self._base + WORKER_SLEEPS] = 1
        timeouts = _sleep_timeouts_ms()
        try:
            while slots[command] == self._last:
                if self._poller.poll(next(timeouts)) and slots[command] == self._last:
                    if not self._channel.drain_signal():  # a stale wake-up byte, or the end
                        raise EOFError("the parent closed the env worker pipe")
        finally:
            slots[self._base + WORKER_SLEEPS] = 0


def _poll(owners: dict[int, tuple[int, bool]], timeout_ms: int) -> list[tuple[int, bool]]:
    poller = select.poll()
    for fd in owners:
        poller.register(fd, select.POLLIN)
    return [owners[fd] for fd, _ in poller.poll(timeout_ms)]
