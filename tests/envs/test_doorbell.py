"""`cadence.envs.doorbell`: requests and answers through a control block, asleep or spinning.

A thread plays the worker (the protocol only needs shared memory and a pipe);
`ParallelEnvironment`'s tests cover real worker processes, deaths included.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import threading
import time

import pytest

from cadence.envs import doorbell
from cadence.envs.channel import OK, Channel
from cadence.envs.doorbell import (
    ParentDoorbell,
    SpinPolicy,
    WorkerDoorbell,
    control_block_nbytes,
)


def test_spin_policy_spins_while_waits_are_short_and_sleeps_once_they_are_long():
    policy = SpinPolicy(spin_s=1e-3)
    assert policy.budget() == 1e-3
    for _ in range(30):
        policy.record(0.5)  # e.g. the parent trains between unrolls
    assert policy.budget() == 0.0
    for _ in range(30):
        policy.record(20e-6)
    assert policy.budget() == 1e-3


def test_one_long_wait_does_not_stop_spinning():
    policy = SpinPolicy(spin_s=1e-3)
    for _ in range(10):
        policy.record(20e-6)
    policy.record(60.0)  # clipped: counts as 2 ms
    assert policy.budget() == 1e-3


def test_spin_policy_rejects_a_negative_spin():
    with pytest.raises(ValueError, match="spin_s"):
        SpinPolicy(-1.0)


class _Link:
    """A parent doorbell and a worker doorbell over one pipe and one control block."""

    def __init__(self, spin_s: float):
        self.memory = bytearray(control_block_nbytes(1))
        parent_conn, worker_conn = mp.Pipe()
        self.parent_channel, self.worker_channel = Channel(parent_conn), Channel(worker_conn)
        self.parent = ParentDoorbell(self.memory, 1, spin_s)
        self.worker = WorkerDoorbell(self.memory, 1, 0, self.worker_channel, spin_s)
        self.death_r, self.death_w = os.pipe()  # stands in for the worker's process sentinel

    def request(self, message=None):
        self.parent.ring(0, self.parent_channel, message)
        return self.parent.wait([0], [self.parent_channel], [self.death_r])

    def serve(self, handle) -> threading.Thread:
        """Runs ``handle(message) -> reply`` for each request until "close"."""

        def loop():
            while True:
                message = self.worker.wait()
                if message == ("close", None):
                    return
                self.worker.answer(handle(message))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    def close(self, thread: threading.Thread) -> None:
        self.parent.ring(0, self.parent_channel, ("close", None))
        thread.join(timeout=10)
        assert not thread.is_alive()
        for fd in (self.death_r, self.death_w):
            os.close(fd)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_s", [0.0, 1e-3], ids=["sleeping", "spinning"])
def test_steps_and_messages_round_trip_in_order(spin_s):
    link = _Link(spin_s)
    seen = []

    def handle(message):
        seen.append(message)
        return None if message is None else ("ok", ("echo", message[1]))

    thread = link.serve(handle)
    try:
        for i in range(200):
            if i % 10 == 3:
                assert link.request(("ping", i)) == ({0: ("ok", ("echo", i))}, set(), set())
            else:
                assert link.request() == ({0: None}, set(), set())
    finally:
        link.close(thread)
    assert len(seen) == 200
    assert [m[1] for m in seen if m is not None] == list(range(3, 200, 10))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_s", [0.0, 1e-3], ids=["sleeping", "spinning"])
def test_step_all_is_none_for_plain_answers_and_the_replies_otherwise(spin_s):
    link = _Link(spin_s)
    answers = iter([None, None, ("error", (0, "ValueError: bad", "tb")), None])
    steps_seen = []

    def handle(message):
        steps_seen.append(message)
        return next(answers)

    ran_while_waiting = []
    thread = link.serve(handle)
    try:
        channels, sentinels = [link.parent_channel], [link.death_r]
        assert (
            link.parent.step_all(channels, sentinels, lambda: ran_while_waiting.append(1)) is None
        )
        assert link.parent.step_all(channels, sentinels) is None
        # A worker that answers with a message (an env's error) is not a plain step.
        assert link.parent.step_all(channels, sentinels) == (
            {0: ("error", (0, "ValueError: bad", "tb"))},
            set(),
            set(),
        )
        assert link.parent.step_all(channels, sentinels) is None
    finally:
        link.close(thread)
    assert steps_seen == [None] * 4 and ran_while_waiting == [1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_s", [0.0, 1e-3], ids=["sleeping", "spinning"])
def test_step_all_reports_a_worker_that_dies_instead_of_answering(spin_s):
    link = _Link(spin_s)
    threading.Timer(0.05, os.write, (link.death_w, b"x")).start()
    assert link.parent.step_all([link.parent_channel], [link.death_r]) == ({}, {0}, set())


class _VirtualTime:
    """The doorbell's clock and ``select`` without the waiting: each poll is real but
    instant, and moves the clock on by the timeout it was given (each clock read by 1 us,
    so that a spin ends). It records the sleeps the parent asked for."""

    POLLIN = select.POLLIN

    def __init__(self):
        self.now = 0.0
        self.sleeps_ms: list[int] = []

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now

    def poll(self) -> _VirtualTime._Poller:
        return self._Poller(self)

    class _Poller:
        def __init__(self, clock: _VirtualTime):
            self.clock, self.poller = clock, select.poll()

        def register(self, fd: int, events: int) -> None:
            self.poller.register(fd, events)

        def poll(self, timeout_ms: int) -> list[tuple[int, int]]:
            self.clock.sleeps_ms.append(timeout_ms)
            self.clock.now += timeout_ms / 1000
            return self.poller.poll(0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_s", [0.0, 1e-3], ids=["sleeping", "spinning"])
def test_a_worker_silent_past_the_deadline_is_reported_late_at_the_deadline(spin_s, monkeypatch):
    link = _Link(spin_s)
    clock = _VirtualTime()
    monkeypatch.setattr(doorbell, "time", clock)
    monkeypatch.setattr(doorbell, "select", clock)
    outcome = link.parent.step_all([link.parent_channel], [link.death_r], timeout_s=0.3)
    assert outcome == ({}, set(), {0})
    # The sleeps grow 1, 10, 100 ms; the next (1 s) is cut to what is left of the 300 ms.
    assert clock.sleeps_ms[:3] == [1, 10, 100]
    assert len(clock.sleeps_ms) == 4 and 185 <= clock.sleeps_ms[3] <= 190
    assert 0.3 <= clock.now < 0.301  # reported once the deadline passed, not a sleep later
    link.parent.ring(0, link.parent_channel)
    start = clock.now
    assert link.parent.wait([0], [link.parent_channel], [link.death_r], 0.05) == ({}, set(), {0})
    assert 0.05 <= clock.now - start < 0.051


@pytest.mark.timeout(60)
def test_a_deadline_leaves_a_worker_that_answers_in_time_alone():
    link = _Link(spin_s=0.0)
    thread = link.serve(lambda message: time.sleep(0.05))
    try:
        channels, sentinels = [link.parent_channel], [link.death_r]
        assert link.parent.step_all(channels, sentinels, timeout_s=5.0) is None
    finally:
        link.close(thread)


@pytest.mark.timeout(60)
def test_a_reply_larger_than_the_pipe_buffer_does_not_deadlock():
    link = _Link(spin_s=0.0)
    frame = bytes(4 << 20)  # the worker answers before writing it: the parent reads as it comes
    thread = link.serve(lambda message: ("ok", frame))
    try:
        replies, dead, _ = link.request(("render", 0))
    finally:
        link.close(thread)
    assert replies[0] == ("ok", frame) and not dead


@pytest.mark.timeout(60)
def test_stale_wake_up_bytes_are_dropped():
    link = _Link(spin_s=0.0)
    link.worker_channel.send_op(OK)  # e.g. written for an answer the parent saw while spinning
    link.worker_channel.send_op(OK)
    thread = link.serve(lambda message: None if message is None else ("ok", message[1]))
    try:
        assert link.request() == ({0: None}, set(), set())
        assert link.request(("value", 7)) == ({0: ("ok", 7)}, set(), set())
    finally:
        link.close(thread)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_s", [0.0, 1e-3], ids=["sleeping", "spinning"])
def test_a_worker_that_dies_instead_of_answering_is_reported_not_waited_for(spin_s):
    link = _Link(spin_s)
    link.parent.ring(0, link.parent_channel)
    # Nobody answers; the worker's "process" ends.
    threading.Timer(0.05, os.write, (link.death_w, b"x")).start()
    replies, dead, late = link.parent.wait([0], [link.parent_channel], [link.death_r])
    assert replies == {} and dead == {0} and not late


@pytest.mark.timeout(60)
def test_a_worker_whose_parent_is_gone_stops_waiting():
    link = _Link(spin_s=0.0)
    link.parent_channel.close()
    with pytest.raises(EOFError):
        link.worker.wait()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin", [False, True], ids=["sleeping", "spinning"])
def test_wait_any_returns_the_answers_and_reads_the_wake_up_byte_it_slept_on(spin):
    link = _Link(spin_s=1e-3)
    thread = link.serve(lambda message: None if message is None else ("ok", message[1]))
    channels, sentinels = [link.parent_channel], [link.death_r]
    bytes_left = 0
    try:
        for i in range(50):
            message = ("value", i) if i % 10 == 3 else None
            link.parent.ring(0, link.parent_channel, message)
            answered, replies, dead, late = link.parent.wait_any(
                {0: None}, 1, channels, sentinels, spin
            )
            assert answered == [0] and not dead and not late
            assert replies == (None if message is None else {0: ("ok", i)})  # None: all plain
            if select.select([link.parent_channel.fd], [], [], 0)[0]:
                bytes_left += 1
                assert link.parent_channel.drain_signal()
    finally:
        link.close(thread)
    # Asleep, the parent is woken by the worker's byte and reads it; one is left only
    # where the answer came as a bounded sleep ran out, just before the byte.
    assert bytes_left <= 10
