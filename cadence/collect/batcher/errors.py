"""`BatcherWorkerError`: what the `Batcher` raises when a worker's code fails or is lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class BatcherWorkerError(RuntimeError):
    """Env or agent code raised in a `Batcher` worker, or a worker died past its restarts.

    Attributes:
        worker: the worker's index.
        env_ids: the slots (indices in the whole batch) it hosts.
        worker_traceback: the traceback from the worker ('' if it died).
        died: whether the worker died (or hung and was killed).
    """

    def __init__(
        self, message: str, worker: int, env_ids: list[int], worker_traceback: str = "", died=False
    ):
        super().__init__(message)
        self.worker = worker
        self.env_ids = env_ids
        self.worker_traceback = worker_traceback
        self.died = died


def first_error(
    replies: dict[int, Any], env_ids: Callable[[int], list[int]], while_building: bool
) -> BatcherWorkerError | None:
    """The error of the first worker whose reply is one (``("error", (text, traceback))``)."""
    for worker, (status, payload) in sorted(replies.items()):
        if status != "error":
            continue
        text, tb = payload
        where = "while it was being built" if while_building else ""
        message = (
            f"batcher worker {worker} (hosting slots {slot_range(env_ids(worker))}) raised "
            f"{text} {where}\n\nWorker traceback:\n{tb}"
        )
        if not while_building:
            message += "\ncall reset() to start every slot again"
        return BatcherWorkerError(message, worker, env_ids(worker), tb)
    return None


def slot_range(ids: list[int]) -> str:
    """``"4..7"`` for slots 4 to 7, ``"4"`` for one."""
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
