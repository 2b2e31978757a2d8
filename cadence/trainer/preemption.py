"""Pre-emption: SIGUSR1, SIGTERM or a first Ctrl-C asks the trainer to checkpoint and exit
cleanly; a second Ctrl-C stops at once, and `interrupted_note` says what the run keeps."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType

from cadence.trainer.checkpoint import CheckpointManager

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class PreemptionGuard:
    """Context manager that records pre-emption signals instead of dying on them.

    The trainer polls `requested` after each iteration. A first Ctrl-C (SIGINT) asks
    for the same clean stop; the previous SIGINT handler is back at once, so a second
    Ctrl-C interrupts as usual (a ``KeyboardInterrupt``, losing the work since the last
    checkpoint; ``cadence train`` then prints `interrupted_note` and exits 130). A SIGINT
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


def interrupted_note(run_dir: str | Path) -> str:
    """What a run stopped by a second Ctrl-C (or one before training began) keeps, in one
    line: no final checkpoint, and the checkpoint the same command resumes from."""
    checkpoints = CheckpointManager(Path(run_dir) / "checkpoints")
    latest = checkpoints.latest()
    iterations = checkpoints.iterations()
    if latest is not None:
        where = f"{latest} (iteration {int(latest.name)})"
    elif iterations:
        where = f"its newest checkpoint (iteration {max(iterations)})"
    else:
        return (
            f"interrupted: {run_dir} stopped before its first checkpoint; "
            "the same command starts it anew"
        )
    return (
        f"interrupted: {run_dir} stopped without a final checkpoint; "
        f"the same command resumes it from {where}"
    )
