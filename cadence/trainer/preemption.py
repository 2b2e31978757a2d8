"""Pre-emption: SIGUSR1, SIGTERM or a first Ctrl-C asks the trainer to checkpoint and exit cleanly."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class PreemptionGuard:
    """Context manager that records pre-emption signals instead of dying on them.

    The trainer polls `requested` after each iteration. A first Ctrl-C (SIGINT) asks
    for the same clean stop; the previous SIGINT handler is back at once, so a second
    Ctrl-C interrupts as usual (losing the work since the last checkpoint). A SIGINT
    handler other than Python's default (a notebook's, the user's) is left alone.
    Outside the main thread (where handlers cannot be installed) it does nothing.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle_interrupt)
        return self

    def __exit__(
        self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        logger.warning(
            "received %s: checkpointing after this iteration", signal.Signals(signum).name
        )
        self.requested = True

    def _handle_interrupt(self, signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, self._previous.pop(signal.SIGINT))
        logger.warning(
            "Ctrl-C: checkpointing after this iteration, then stopping (the same command "
            "resumes); Ctrl-C again stops at once, losing the work since the last checkpoint"
        )
        self.requested = True
