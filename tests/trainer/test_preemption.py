"""`PreemptionGuard`: pre-emption signals and a first Ctrl-C become a request to stop cleanly."""

from __future__ import annotations

import os
import signal

import pytest

from cadence.trainer.preemption import PreemptionGuard


@pytest.fixture(autouse=True)
def python_default_sigint():
    """These tests rely on Python's own SIGINT handler, which a test run started as a
    shell's background job does not have (SIGINT arrives ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_preemption_signal_is_recorded(sig):
    with PreemptionGuard() as guard:
        os.kill(os.getpid(), sig)
        assert guard.requested


def test_a_first_ctrl_c_is_recorded_and_a_second_interrupts():
    with PreemptionGuard() as guard:
        os.kill(os.getpid(), signal.SIGINT)
        assert guard.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_previous_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    with PreemptionGuard():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_sigint_handler_of_someone_elses_stays():
    def handler(signum, frame):
        handler.calls += 1

    handler.calls = 0
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with PreemptionGuard() as guard:
            os.kill(os.getpid(), signal.SIGINT)
        assert handler.calls == 1 and not guard.requested
    finally:
        signal.signal(signal.SIGINT, previous)
