"""The worker side of `ParallelEnvironment`: one process hosting a contiguous slice of the batch.

A worker builds its envs from their picklable factories, reports their specs,
attaches to the shared-memory block the parent created, then serves requests
until "close". Until it is attached, requests come through its pipe (see
`cadence.envs.channel`); from then on through the doorbell in the same block
(see `cadence.envs.doorbell`): a step request is a number in shared memory, the
actions are read from shared memory and the time steps written there, each
worker into its own rows, and the answer is a number again. An exception in an
env is sent to the parent with the env's index and the worker's traceback; the
worker then goes on serving. An env whose state cannot be saved
(`UnsavableEnvStateError`) is expected, not a failure: its message alone is sent,
as ``("unsavable", message)``.

A worker that replaces one that died starts with every env *fresh*: the next
step resets it instead of stepping it. A ``("step", skip)`` request leaves the
envs listed in ``skip`` alone (fresh, their rows unwritten): the parent ends
their cut episodes with LAST rows of its own first.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import TimeStep
from cadence.envs.buffer import ArrayLayout, TimeStepBuffer, action_row, spec_fields
from cadence.envs.channel import OK, STEP, Channel
from cadence.envs.doorbell import WorkerDoorbell
from cadence.envs.env_state import UnsavableEnvStateError
from cadence.envs.environment import PyEnvironment
from cadence.envs.main_module import MainFree

logger = logging.getLogger(__name__)

_ALIGN = 64


def worker_main(
    conn: Connection,
    worker: int,
    start: int,
    env_fns: list[Callable[[], PyEnvironment]] | MainFree,
    fresh: bool = False,
    core: int | None = None,
) -> None:
    """A worker's life: build the envs, report their specs, then serve requests until "close".

    Args:
        conn: the worker's end of its pipe.
        worker: the worker's index (for log messages).
        start: the batch index of its first env.
        env_fns: the factories of its envs, in batch order (packed in a `MainFree` when
            they use what the user's main script defines).
        fresh: whether it replaces a worker that died (its envs reset on their next step).
        core: the core to run on (``None``: wherever the scheduler puts it).
    """
    # Ctrl-C goes to the whole process group; the parent alone decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if core is not None:
        try:
            os.sched_setaffinity(0, {core})
        except OSError as error:  # e.g. the core left this process's cpuset meanwhile
            logger.warning("env worker %d could not be pinned to core %d: %s", worker, core, error)
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
        _serve(channel, envs, worker, start, set(range(len(envs))) if fresh else set())
    except (EOFError, OSError):
        pass  # the parent went away: nobody is left to report to
    finally:
        for env in envs or ():
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort on the way out
                logger.exception("closing an env in worker %d failed", worker)


def _serve(
    channel: Channel, envs: list[PyEnvironment], worker: int, start: int, fresh: set[int]
) -> None:
    """Answers the parent's requests until "close": through the pipe until attached, then the doorbell."""
    shared: dict[str, Any] = {"fresh": fresh}
    doorbell: WorkerDoorbell | None = None
    step_all: Callable[[], tuple[str, Any] | None] | None = None
    try:
        while "doorbell" not in shared:
            op, message = channel.receive()
            command, arg = ("step", None) if op == STEP else message
            if command == "close":
                return
            if command == "attach":
                arg = (*arg, worker, channel)
            reply = _run(command, arg, envs, start, shared)
            if reply is None:
                channel.send_op(OK)
            else:
                channel.send(reply)
        doorbell = shared["doorbell"]
        step_all = _all_envs_stepper(envs, start, shared)
        while True:
            message = doorbell.wait()
            if message is None and not shared["fresh"]:
                doorbell.answer(step_all())
                continue
            command, arg = ("step", None) if message is None else message
            if command == "close":
                return
            doorbell.answer(_run(command, arg, envs, start, shared))
    finally:
        doorbell = step_all = None  # their views of the block must go before it can close
        _detach(shared)


def _all_envs_stepper(
    envs: list[PyEnvironment], start: int, shared: dict[str, Any]
) -> Callable[[], tuple[str, Any] | None]:
    """The hot path, a plain step of every env, without the layers of `_run`.

    It saves what `_run` does for any request (the reply wrapping, `_handle`'s
    dispatch, a call per env through `_each`): with fast envs that cost a worker as
    much as an env step, and the parent waits for the slowest worker.

    Returns:
        A function that steps the envs and returns ``None``, or the error reply.
    """
    actions, buffer = shared["actions"], shared["buffer"]
    rows = slice(start, start + len(envs))
    steps = [env.step for env in envs]

    def step_all() -> tuple[str, Any] | None:
        time_steps: list[TimeStep] = []
        try:
            for step, action in zip(steps, action_rows(actions, rows), strict=True):
                time_steps.append(step(action))
        except Exception as exc:  # noqa: BLE001 - an env's failure is the parent's to raise
            return "error", _describe_error(exc, len(time_steps))
        try:
            buffer.write_rows(start, time_steps)
        except Exception as exc:  # noqa: BLE001 - e.g. an observation that fits no row
            return "error", _describe_error(exc, None)
        return None

    return step_all


def _run(
    command: str, arg: Any, envs: list[PyEnvironment], start: int, shared: dict[str, Any]
) -> tuple[str, Any] | None:
    """Runs one request: ``None`` when it went well and returned nothing, else the reply."""
    offset = arg if command == "render" else 0
    reply, _ = _attempt(functools.partial(_handle, command, arg, envs, start, shared), offset)
    # `is None`: comparing the tuples would compare a reply's array (a frame) elementwise.
    if reply[0] == "ok" and reply[1] is None:
        return None
    return reply


def _detach(shared: dict[str, Any]) -> None:
    """Drops the views of the shared block (and the doorbell's), then unmaps it.

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
    if command == "step":  # with fresh envs or some to skip (else `_all_envs_stepper`)
        return _step_some(envs, start, shared, skip=set(arg or ()))
    if command == "reset":
        shared["fresh"].clear()
        return shared["buffer"].write_rows(start, _each(envs, _reset, [None] * len(envs)))
    if command == "attach":
        return shared.update(_attach(envs[0], *arg))
    if command == "render":
        return _each([envs[arg]], _render, [None])[0]
    if command == "get_state":
        return _each(envs, _get_state, [None] * len(envs))
    if command == "set_state":
        shared["fresh"].clear()  # the restored states say themselves which envs reset next
        return _each(envs, _set_state, arg)
    raise ValueError(f"unknown worker command {command!r}")


def _step_some(
    envs: list[PyEnvironment], start: int, shared: dict[str, Any], skip: set[int]
) -> None:
    """Steps the envs not in ``skip``, resetting the fresh ones; writes only their rows."""
    fresh: set[int] = shared["fresh"]
    actions = action_rows(shared["actions"], slice(start, start + len(envs)))
    for index, (env, action) in enumerate(zip(envs, actions, strict=True)):
        if index in skip:
            continue
        try:
            time_step = env.reset() if index in fresh else env.step(action)
        except Exception as exc:
            raise _EnvFailed(index) from exc
        fresh.discard(index)
        shared["buffer"].write(start + index, time_step)


def _attach(
    env: PyEnvironment,
    shm_name: str,
    batch_size: int,
    num_workers: int,
    spin_s: float,
    worker: int,
    channel: Channel,
) -> dict[str, Any]:
    # Keep `shm` referenced: the views are only valid while its mapping is open.
    shm = attach_shared_memory(shm_name)
    buffer, actions, control = shared_views(
        shm, env.observation_spec, env.action_spec, env.env_info_spec, batch_size
    )
    doorbell = WorkerDoorbell(control, num_workers, worker, channel, spin_s)
    return {"shm": shm, "buffer": buffer, "actions": actions, "doorbell": doorbell}


# -- the shared-memory block (the same in the parent and the workers) ----------------------


def shared_views(
    shm: SharedMemory,
    observation_spec: Spec,
    action_spec: Spec,
    env_info_spec: CompositeSpec,
    batch_size: int,
) -> tuple[TimeStepBuffer, dict[str, np.ndarray], memoryview]:
    """The time step buffer, the action arrays and the doorbell's control block over ``shm``.

    The block is laid out as: time steps, actions, control block (each aligned).
    """
    buffer = TimeStepBuffer(
        observation_spec, action_spec, env_info_spec, batch_size, memory=shm.buf
    )
    actions_at = aligned(buffer.layout.nbytes)
    action_layout = action_layout_for(action_spec, batch_size)
    actions = action_layout.views(shm.buf[actions_at:])
    return buffer, actions, shm.buf[actions_at + aligned(action_layout.nbytes) :]


def action_layout_for(action_spec: Spec, batch_size: int) -> ArrayLayout:
    """The shared-memory layout of a batch of actions; fields are named by leaf path."""
    fields = spec_fields("action", action_spec, batch_size)
    return ArrayLayout(
        [
            (name.removeprefix("action").removeprefix("/"), shape, dtype)
            for name, shape, dtype in fields
        ]
    )


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the block's alignment."""
    return -(-nbytes // _ALIGN) * _ALIGN


def start_resource_tracker() -> None:
    """Starts this process's multiprocessing resource tracker, before any worker starts.

    Workers started after it share it (fork inherits it; spawn and forkserver are
    handed it). A worker forked before it runs starts a tracker of its own when it
    attaches to a block, which unlinks the block when that worker exits: one dead
    worker would free the whole pool's shared memory under the others.
    """
    resource_tracker.ensure_running()


def attach_shared_memory(name: str) -> SharedMemory:
    """The block ``name``, which another process created and will unlink."""
    if sys.version_info >= (3, 13):  # before 3.13 every attach registers with the tracker
        return SharedMemory(name=name, track=False)
    return SharedMemory(name=name)


def unlink_shared_memory(shm: SharedMemory) -> None:
    """Frees ``shm`` system-wide; a block already gone is only forgotten by the tracker,
    which would otherwise warn at exit of a leak it then fails to clean up."""
    try:
        shm.unlink()
    except FileNotFoundError:
        resource_tracker.unregister(shm._name, "shared_memory")  # the name unlink() registered


def action_rows(actions: dict[str, np.ndarray], rows: slice) -> list[Nest]:
    """Rows of the shared actions, copied out (envs may keep what they are given)."""
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


# -- running env code and reporting its failures --------------------------------------------


class _EnvFailed(Exception):
    """Raised in a worker when env ``index`` (of the worker's slice) raised; the cause is its error."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


def _attempt(fn: Callable[[], Any], offset: int = 0) -> tuple[tuple[str, Any], Any]:
    """Runs ``fn``; returns the reply for the parent and the result (``None`` on failure).

    A failure's reply is ``("error", (env index or None, "Type: message", traceback))``,
    or ``("unsavable", message)`` for an env whose state cannot be saved.
    """
    try:
        result = fn()
    except _EnvFailed as failed:
        if isinstance(failed.__cause__, UnsavableEnvStateError):
            return ("unsavable", str(failed.__cause__)), None
        return ("error", _describe_error(failed.__cause__, failed.index + offset)), None
    except Exception as exc:  # noqa: BLE001 - every failure is the parent's to raise
        return ("error", _describe_error(exc, None)), None
    return ("ok", result), result


def _describe_error(
    exc: BaseException | None, env_index: int | None
) -> tuple[int | None, str, str]:
    text = f"{type(exc).__name__}: {exc}"
    return env_index, text, "".join(traceback.format_exception(exc))


def _build(env_fns: list[Callable[[], PyEnvironment]] | MainFree) -> list[PyEnvironment]:
    if isinstance(env_fns, MainFree):
        env_fns = env_fns.unpack()
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


def _reset(env: PyEnvironment, _: Any) -> TimeStep:
    return env.reset()


def _render(env: PyEnvironment, _: Any) -> np.ndarray | None:
    return env.render()


def _get_state(env: PyEnvironment, _: Any) -> Any:
    return env.get_state()


def _set_state(env: PyEnvironment, state: Any) -> None:
    env.set_state(state)
