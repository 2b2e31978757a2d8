"""`ParallelEnvironment`: worker processes stepping envs into one shared-memory batch.

Each worker hosts a contiguous slice of the batch. Per step the parent writes the
actions into shared memory, writes one byte to every worker's pipe (see
`cadence.envs.channel`), and blocks in ``poll`` on the pipes and the process
sentinels until all of them answer with one byte; the workers write their rows of
the time step straight into a pre-stacked `TimeStepBuffer` in shared memory, so
the parent only copies one block out (nothing is pickled on the hot path).
Waiting on the sentinels turns a worker that dies into an error naming its env
ids instead of a hang.

Workers start with ``"forkserver"`` by default: the server imports torch and
cadence once, and every worker is forked from it in milliseconds, without
inheriting the parent's threads (forking a process that has run torch is unsafe)
and without importing anything per worker.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import select
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Literal

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import TimeStep
from cadence.envs.buffer import (
    ArrayLayout,
    TimeStepBuffer,
    action_row,
    action_to_numpy,
    spec_fields,
)
from cadence.envs.channel import OK, STEP, Channel
from cadence.envs.environment import Environment, PyEnvironment

logger = logging.getLogger(__name__)

StartMethod = Literal["forkserver", "spawn", "fork"]
_ALIGN = 64
_CLOSE_TIMEOUT_S = 5.0


class EnvironmentWorkerError(RuntimeError):
    """An environment raised in a worker process, or a worker process died.

    Attributes:
        worker: the worker's index.
        env_ids: the batch indices of the environments concerned.
        worker_traceback: the formatted traceback from the worker ('' if it died).
        died: whether the worker process died (the environment is then unusable).
    """

    def __init__(
        self,
        message: str,
        worker: int,
        env_ids: list[int],
        worker_traceback: str = "",
        died: bool = False,
    ):
        super().__init__(message)
        self.worker = worker
        self.env_ids = env_ids
        self.worker_traceback = worker_traceback
        self.died = died


class ParallelEnvironment(Environment):
    """A batch of environments stepped by worker processes through shared memory.

    Args:
        env_fns: picklable constructors, one per environment (e.g. `GymEnvFactory`);
            ``env_fns[i]`` builds env ``i`` inside its worker.
        num_workers: worker processes; default one per available core. Never more
            than ``len(env_fns)``; the envs are split into contiguous, even slices.
        device: where the time steps are delivered.
        start_method: how workers start (see the module docstring).

    Raises:
        EnvironmentWorkerError: an env raised in a worker (with the worker's
            traceback and the env id), or a worker died (with its env ids).

    >>> with ParallelEnvironment([GymEnvFactory("CartPole-v1", i, 0) for i in range(4)]) as env:  # doctest: +SKIP
    ...     time_step = env.step(env.action_spec.sample((4,)))
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], PyEnvironment]],
        num_workers: int | None = None,
        device: Any = "cpu",
        *,
        start_method: StartMethod = "forkserver",
    ):
        if not env_fns:
            raise ValueError("ParallelEnvironment needs at least one environment")
        self._closed = False
        self._broken: str | None = None
        self._device = torch.device(device)
        self._num_envs = len(env_fns)
        self._slices = split_evenly(self._num_envs, num_workers or available_cores())
        self._processes: list[Any] = []
        self._channels: list[Channel] = []
        # Every worker's pipe and sentinel, registered once: `select.poll` is one system
        # call, where `multiprocessing.connection.wait` builds a selector per call.
        self._poller = select.poll() if hasattr(select, "poll") else None
        self._owners: dict[int, tuple[int, bool]] = {}  # fd -> (worker, is its sentinel)
        self._shm: SharedMemory | None = None
        try:
            self._start_workers(env_fns, start_method)
            specs = self._gather(range(len(self._slices)))[0]
            self._observation_spec, self._action_spec, self._env_info_spec = specs
            self._attach_shared_memory()
        except BaseException:
            self.close()
            raise

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def observation_spec(self) -> Spec:
        return self._observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._env_info_spec

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def num_workers(self) -> int:
        return len(self._slices)

    @property
    def processes(self) -> list[Any]:
        """The worker processes, in order (worker ``w`` hosts ``env_ids(w)``)."""
        return list(self._processes)

    def env_ids(self, worker: int) -> list[int]:
        """The batch indices of the envs hosted by ``worker``."""
        return list(range(*self._slices[worker]))

    def reset(self) -> TimeStep:
        self._broadcast(("reset", None))
        return self._buffer.read(self._device)

    def step(self, action: Nest) -> TimeStep:
        self._write_actions(action_to_numpy(action))
        self._broadcast(STEP)
        return self._buffer.read(self._device)

    def render(self, env_index: int = 0) -> np.ndarray | None:
        worker, local = self._locate(env_index)
        return self._request({worker: ("render", local)})[0]

    def get_state(self) -> list[Any]:
        """Every env's ``get_state()``, in batch order (the format of `SerialEnvironment`)."""
        per_worker = self._request({w: ("get_state", None) for w in range(self.num_workers)})
        return [state for states in per_worker for state in states]

    def set_state(self, state: Sequence[Any]) -> None:
        if len(state) != self._num_envs:
            raise ValueError(f"state holds {len(state)} envs, this batch has {self._num_envs}")
        self._request(
            {
                w: ("set_state", list(state[start:stop]))
                for w, (start, stop) in enumerate(self._slices)
            }
        )

    def close(self) -> None:
        """Stops the workers (killing any that do not exit) and frees the shared memory; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        _stop_workers(self._processes, self._channels)
        self._release_shared_memory()

    # -- start-up ---------------------------------------------------------------------------

    def _start_workers(
        self, env_fns: Sequence[Callable[[], PyEnvironment]], start_method: StartMethod
    ) -> None:
        context = mp.get_context(start_method)
        if start_method == "forkserver":
            # The server imports these once; workers forked from it import nothing more.
            context.set_forkserver_preload(["__main__", __name__])
        for worker, (start, stop) in enumerate(self._slices):
            parent_conn, child_conn = context.Pipe()
            process = context.Process(
                target=_worker_main,
                args=(child_conn, worker, start, list(env_fns[start:stop])),
                name=f"cadence-env-worker-{worker}",
                daemon=True,  # multiprocessing terminates daemons when the parent exits
            )
            process.start()
            child_conn.close()  # so that a dead worker reads as EOF on our end
            self._processes.append(process)
            self._channels.append(Channel(parent_conn))
            self._watch(worker)
        logger.debug(
            "started %d %s env workers for %d envs", len(self._slices), start_method, self._num_envs
        )

    def _attach_shared_memory(self) -> None:
        buffer_layout = TimeStepBuffer.make_layout(
            self._observation_spec, self._action_spec, self._env_info_spec, self._num_envs
        )
        action_layout = action_layout_for(self._action_spec, self._num_envs)
        buffer_bytes = _aligned(buffer_layout.nbytes)
        self._shm = SharedMemory(create=True, size=buffer_bytes + action_layout.nbytes)
        self._buffer, self._actions = _shared_views(
            self._shm,
            self._observation_spec,
            self._action_spec,
            self._env_info_spec,
            self._num_envs,
        )
        self._request(
            {w: ("attach", (self._shm.name, self._num_envs)) for w in range(self.num_workers)}
        )

    def _release_shared_memory(self) -> None:
        # Views over the block must go before it can close; unlink frees it system-wide.
        self.__dict__.pop("_buffer", None)
        self.__dict__.pop("_actions", None)
        if self._shm is None:
            return
        try:
            self._shm.close()
        except BufferError:  # a time step view still held elsewhere; the mapping goes with it
            pass
        self._shm.unlink()
        self._shm = None

    # -- messaging ---------------------------------------------------------------------------

    def _write_actions(self, action: Nest) -> None:
        for name, array in self._actions.items():
            value = action if name == "" else _leaf(action, name)
            if np.shape(value) != array.shape:
                raise ValueError(
                    f"action{'/' + name if name else ''} has shape {np.shape(value)}, expected {array.shape}"
                )
            np.copyto(array, value, casting="unsafe")

    def _broadcast(self, message: Any) -> None:
        """Sends ``message`` to every worker and waits for all of them."""
        self._request(dict.fromkeys(range(self.num_workers), message))

    def _request(self, messages: dict[int, Any]) -> list[Any]:
        """Sends each worker its message (`STEP` or an object); returns the replies in order."""
        self._check_usable()
        for worker, message in messages.items():
            channel = self._channels[worker]
            try:
                if message is STEP:
                    channel.send_op(STEP)
                else:
                    channel.send(message)
            except OSError:
                pass  # a dead worker's pipe: `_gather` sees its EOF and reports the death
        return self._gather(messages)

    def _gather(self, workers: Any) -> list[Any]:
        """Waits (blocking, not spinning) for a reply from each of ``workers``.

        Every reply is collected before an error is raised, so the workers that
        succeeded stay in step with the parent.
        """
        waiting = set(workers)
        replies: dict[int, Any] = {}
        errors: list[EnvironmentWorkerError] = []
        while waiting:
            for worker, by_sentinel in self._ready(waiting):
                if worker not in waiting:
                    continue  # both its pipe and its sentinel were ready
                waiting.discard(worker)
                status, replies[worker] = self._receive(worker, by_sentinel)
                if status == "error":
                    errors.append(replies[worker])
        if errors:
            if any(e.died for e in errors):
                self._broken = str(next(e for e in errors if e.died))
            raise errors[0]
        return [replies[w] for w in sorted(replies)]

    def _ready(self, waiting: set[int]) -> list[tuple[int, bool]]:
        """Blocks until some of ``waiting`` can be read: ``(worker, by its sentinel)`` pairs."""
        if self._poller is not None:
            ready = [self._owners[fd] for fd, _ in self._poller.poll()]
            if any(worker in waiting for worker, _ in ready):
                return ready
            # Only workers outside this request are ready (one died since it answered):
            # wait on the others alone rather than spin.
        channels = {self._channels[w].conn: w for w in waiting}
        sentinels = {self._processes[w].sentinel: w for w in waiting}
        return [
            (channels[r], False) if r in channels else (sentinels[r], True)
            for r in wait([*channels, *sentinels])
        ]

    def _receive(self, worker: int, by_sentinel: bool = False) -> tuple[str, Any]:
        channel = self._channels[worker]
        try:
            # A worker may have answered just before it exited; else it died mid-request.
            if not by_sentinel or channel.poll():
                op, message = channel.receive()
                if op == OK:
                    return "ok", None
                status, payload = message
                if status == "error":
                    return status, self._worker_error(worker, *payload)
                return status, payload
        except (EOFError, OSError):
            pass
        return "error", self._death_error(worker)

    def _watch(self, worker: int) -> None:
        """Registers ``worker``'s pipe and sentinel with the poller."""
        if self._poller is None:
            return
        pipe, sentinel = self._channels[worker].fd, self._processes[worker].sentinel
        for fd, is_sentinel in ((pipe, False), (sentinel, True)):
            self._owners[fd] = (worker, is_sentinel)
            self._poller.register(fd, select.POLLIN)

    def _worker_error(
        self, worker: int, env_index: int | None, text: str, tb: str
    ) -> EnvironmentWorkerError:
        start, stop = self._slices[worker]
        env_ids = list(range(start, stop)) if env_index is None else [start + env_index]
        message = f"environment {_ids(env_ids)} in worker {worker} raised {text}\n\nWorker traceback:\n{tb}"
        return EnvironmentWorkerError(message, worker, env_ids, tb)

    def _death_error(self, worker: int) -> EnvironmentWorkerError:
        process = self._processes[worker]
        process.join(timeout=1.0)
        env_ids = self.env_ids(worker)
        message = (
            f"env worker {worker} (pid {process.pid}, hosting environment {_ids(env_ids)}) died "
            f"unexpectedly ({_describe_exit(process.exitcode)}); this ParallelEnvironment is "
            "unusable: close it and build a new one"
        )
        return EnvironmentWorkerError(message, worker, env_ids, died=True)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("ParallelEnvironment is closed")
        if self._broken is not None:
            raise RuntimeError(
                f"ParallelEnvironment is unusable since a worker died: {self._broken}"
            )

    def _locate(self, env_index: int) -> tuple[int, int]:
        if not 0 <= env_index < self._num_envs:
            raise IndexError(f"env_index {env_index} is out of range for {self._num_envs} envs")
        for worker, (start, stop) in enumerate(self._slices):
            if start <= env_index < stop:
                return worker, env_index - start
        raise AssertionError("the slices cover the batch")


def available_cores() -> int:
    """The number of cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def split_evenly(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` slices of ``num_envs`` for ``min(num_workers, num_envs)`` workers.

    >>> split_evenly(5, 2)
    [(0, 3), (3, 5)]
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    num_workers = min(num_workers, num_envs)
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (worker < extra)
        slices.append((start, stop))
        start = stop
    return slices


def action_layout_for(action_spec: Spec, batch_size: int) -> ArrayLayout:
    """The shared-memory layout of a batch of actions; fields are named by leaf path."""
    fields = spec_fields("action", action_spec, batch_size)
    return ArrayLayout(
        [
            (name.removeprefix("action").removeprefix("/"), shape, dtype)
            for name, shape, dtype in fields
        ]
    )


def _shared_views(
    shm: SharedMemory,
    observation_spec: Spec,
    action_spec: Spec,
    env_info_spec: CompositeSpec,
    batch_size: int,
) -> tuple[TimeStepBuffer, dict[str, np.ndarray]]:
    """The time step buffer and the action arrays over ``shm``: the same in parent and workers."""
    buffer = TimeStepBuffer(
        observation_spec, action_spec, env_info_spec, batch_size, memory=shm.buf
    )
    actions = action_layout_for(action_spec, batch_size).views(
        shm.buf[_aligned(buffer.layout.nbytes) :]
    )
    return buffer, actions


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def _leaf(nest: Nest, path: str) -> Any:
    for key in path.split("/"):
        nest = nest[key]
    return nest


def _ids(env_ids: list[int]) -> str:
    if len(env_ids) == 1:
        return f"id {env_ids[0]}"
    return f"ids {env_ids[0]}..{env_ids[-1]}"


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running but its pipe broke"
    if exitcode < 0:
        return f"killed by signal {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _stop_workers(processes: list[Any], channels: list[Channel]) -> None:
    """Asks every worker to close its envs and exit; kills the ones that do not."""
    for channel in channels:
        try:
            channel.send(("close", None))
        except (OSError, ValueError):  # the worker is gone already
            pass
    for process in processes:
        process.join(timeout=_CLOSE_TIMEOUT_S)
        if process.exitcode is None:
            logger.warning("env worker %s did not exit; killing it", process.name)
            process.kill()
            process.join()
    for channel in channels:
        channel.close()


# -- the worker process ---------------------------------------------------------------------


class _EnvFailed(Exception):
    """Raised in a worker when env ``index`` (of the worker's slice) raised; the cause is its error."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


def _worker_main(
    conn: Connection, worker: int, start: int, env_fns: list[Callable[[], PyEnvironment]]
) -> None:
    """A worker's life: build the envs, report their specs, then serve requests until "close"."""
    # Ctrl-C goes to the whole process group; the parent alone decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    envs: list[PyEnvironment] = []
    channel = Channel(conn)
    try:
        reply, envs = _attempt(lambda: _build(env_fns))
        if envs is None:
            channel.send(reply)
            return
        first = envs[0]
        channel.send(("ok", (first.observation_spec, first.action_spec, first.env_info_spec)))
        _serve(channel, envs, start)
    except (EOFError, OSError):
        pass  # the parent went away: nobody is left to report to
    finally:
        for env in envs or ():
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort on the way out
                logger.exception("closing an env in worker %d failed", worker)


def _serve(channel: Channel, envs: list[PyEnvironment], start: int) -> None:
    """Answers the parent's requests until "close"."""
    shared: dict[str, Any] = {}
    try:
        while True:
            op, message = channel.receive()
            command, arg = ("step", None) if op == STEP else message
            if command == "close":
                return
            offset = arg if command == "render" else 0
            reply, _ = _attempt(
                functools.partial(_handle, command, arg, envs, start, shared), offset
            )
            # `is None`: comparing the tuples would compare a reply's array (a frame) elementwise.
            if reply[0] == "ok" and reply[1] is None:
                channel.send_op(OK)
            else:
                channel.send(reply)
    finally:
        _detach(shared)


def _detach(shared: dict[str, Any]) -> None:
    """Drops the views of the shared block, then unmaps it.

    Left to the interpreter's exit, the mapping would be closed while views still
    exist and print a ``BufferError`` from every worker.
    """
    shm = shared.pop("shm", None)
    shared.clear()
    if shm is not None:
        try:
            shm.close()
        except BufferError:  # a view is still referenced somewhere; exit unmaps it anyway
            pass


def _handle(
    command: str, arg: Any, envs: list[PyEnvironment], start: int, shared: dict[str, Any]
) -> Any:
    """Runs one request; "step" and "reset" write this worker's rows of the shared buffer."""
    if command == "step":
        actions = _action_rows(shared["actions"], slice(start, start + len(envs)))
        return shared["buffer"].write_rows(start, _each(envs, _step, actions))
    if command == "reset":
        return shared["buffer"].write_rows(start, _each(envs, _reset, [None] * len(envs)))
    if command == "attach":
        return shared.update(_attach(envs[0], *arg))
    if command == "render":
        return _each([envs[arg]], _render, [None])[0]
    if command == "get_state":
        return _each(envs, _get_state, [None] * len(envs))
    if command == "set_state":
        return _each(envs, _set_state, arg)
    raise ValueError(f"unknown worker command {command!r}")


def _attach(env: PyEnvironment, shm_name: str, batch_size: int) -> dict[str, Any]:
    # Keep `shm` referenced: the views are only valid while its mapping is open.
    shm = SharedMemory(name=shm_name)
    buffer, actions = _shared_views(
        shm, env.observation_spec, env.action_spec, env.env_info_spec, batch_size
    )
    return {"shm": shm, "buffer": buffer, "actions": actions}


def _attempt(fn: Callable[[], Any], offset: int = 0) -> tuple[tuple[str, Any], Any]:
    """Runs ``fn``; returns the reply for the parent and the result (``None`` on failure).

    A failure's reply is ``("error", (env index or None, "Type: message", traceback))``.
    """
    try:
        result = fn()
    except _EnvFailed as failed:
        return ("error", _describe_error(failed.__cause__, failed.index + offset)), None
    except Exception as exc:  # noqa: BLE001 - every failure is the parent's to raise
        return ("error", _describe_error(exc, None)), None
    return ("ok", result), result


def _describe_error(
    exc: BaseException | None, env_index: int | None
) -> tuple[int | None, str, str]:
    text = f"{type(exc).__name__}: {exc}"
    return env_index, text, "".join(traceback.format_exception(exc))


def _build(env_fns: list[Callable[[], PyEnvironment]]) -> list[PyEnvironment]:
    envs: list[PyEnvironment] = []
    try:
        for fn in env_fns:
            envs.append(fn())
    except Exception as exc:
        for env in envs:
            env.close()
        raise _EnvFailed(len(envs)) from exc
    return envs


def _each(
    envs: list[PyEnvironment], fn: Callable[[PyEnvironment, Any], Any], args: Sequence[Any]
) -> list[Any]:
    """``[fn(env, arg) ...]``, raising `_EnvFailed` with the index of the env that raised."""
    results: list[Any] = []
    try:
        for env, arg in zip(envs, args, strict=True):
            results.append(fn(env, arg))
    except Exception as exc:
        raise _EnvFailed(len(results)) from exc
    return results


def _action_rows(actions: dict[str, np.ndarray], rows: slice) -> list[Nest]:
    """This worker's actions, copied out of shared memory (envs may keep what they are given)."""
    if list(actions) == [""]:
        return list(actions[""][rows].copy())
    nested: dict[str, Any] = {}
    for path, array in actions.items():
        *parents, key = path.split("/")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = array[rows].copy()
    return [action_row(nested, row) for row in range(rows.stop - rows.start)]


def _step(env: PyEnvironment, action: Nest) -> TimeStep:
    return env.step(action)


def _reset(env: PyEnvironment, _: Any) -> TimeStep:
    return env.reset()


def _render(env: PyEnvironment, _: Any) -> np.ndarray | None:
    return env.render()


def _get_state(env: PyEnvironment, _: Any) -> Any:
    return env.get_state()


def _set_state(env: PyEnvironment, state: Any) -> None:
    env.set_state(state)
