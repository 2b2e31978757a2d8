"""`EnvironmentWorkerError`: what went wrong in a `ParallelEnvironment`'s worker, by env id.

An env that raised in a worker, or a worker that died or hung, is reported with the
batch indices of the envs concerned and, where the worker could still send it, its
traceback; `env_error` words the message of an env's own exception.
"""

from __future__ import annotations


class EnvironmentWorkerError(RuntimeError):
    """An environment raised in a worker process, or a worker process died.

    Attributes:
        worker: the worker's index.
        env_ids: the batch indices of the environments concerned.
        worker_traceback: the formatted traceback from the worker ('' if it died).
        died: whether the worker process died (or hung and was killed).
        hung: whether it was killed for not answering in time (``step_timeout_s``, or
            ``build_timeout_s`` while the environment was built).
        restarted: whether a replacement took over (the environment stays usable);
            ``False`` with ``died`` means the environment is unusable.
    """

    def __init__(
        self,
        message: str,
        worker: int,
        env_ids: list[int],
        worker_traceback: str = "",
        died: bool = False,
        restarted: bool = False,
        hung: bool = False,
    ):
        super().__init__(message)
        self.worker = worker
        self.env_ids = env_ids
        self.worker_traceback = worker_traceback
        self.died = died
        self.restarted = restarted
        self.hung = hung


def env_error(
    worker: int,
    hosted: tuple[int, int],
    env_index: int | None,
    text: str,
    tb: str,
    why: str = "",
) -> EnvironmentWorkerError:
    """The error for an exception an env raised in ``worker``.

    Args:
        worker: the worker.
        hosted: the ``(start, stop)`` batch indices of its envs.
        env_index: the raising env's index within the worker (``None``: all of them).
        text: the exception, one line (``"ValueError: ..."``).
        tb: the worker's formatted traceback.
        why: what the message adds, such as why the worker was not restarted.
    """
    start, stop = hosted
    env_ids = list(range(start, stop)) if env_index is None else [start + env_index]
    why = f" ({why})" if why else ""
    message = (
        f"environment {describe_ids(env_ids)} in worker {worker} raised {text}{why}"
        f"\n\nWorker traceback:\n{tb}"
    )
    return EnvironmentWorkerError(message, worker, env_ids, tb)


def describe_ids(env_ids: list[int]) -> str:
    """``"id 3"`` or ``"ids 0..3"``."""
    if len(env_ids) == 1:
        return f"id {env_ids[0]}"
    return f"ids {env_ids[0]}..{env_ids[-1]}"
