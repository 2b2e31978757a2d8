"""`ThreadEnvironment`: a batch of environments living in one dedicated thread.

Some simulators (OpenGL renderers, many game engines, GUI toolkits) must be
created, stepped and closed on one thread. A `ThreadEnvironment` builds a
`SerialEnvironment` on its own thread and forwards every call there, so the
caller may use it from any thread (evaluation, ``play``) while the envs never
see another thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import TimeStep
from cadence.envs.environment import Environment, PyEnvironment
from cadence.envs.serial import SerialEnvironment

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_STOP = None  # the request that ends the thread's loop


class ThreadEnvironment(Environment):
    """Environments created, stepped, rendered and closed on one dedicated thread.

    An exception raised on the thread is re-raised in the caller; its traceback
    keeps the env's own frames.

    Args:
        env_fns: one constructor per environment; ``env_fns[i]`` builds env ``i``
            (called on the environment thread).
        device: where the time steps are delivered.

    >>> env = ThreadEnvironment([GymEnvFactory("CartPole-v1", 0, seed=0)])  # doctest: +SKIP
    >>> env.reset().observation.shape  # doctest: +SKIP
    torch.Size([1, 4])
    >>> env.close()  # doctest: +SKIP
    """

    uniform_time_steps = True  # its `SerialEnvironment`'s

    def __init__(self, env_fns: Sequence[Callable[[], PyEnvironment]], device: Any = "cpu"):
        if not env_fns:
            raise ValueError("ThreadEnvironment needs at least one environment")
        self._closed = True  # until the thread runs: `close` then has nothing to do
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_serve, args=(self._requests,), name="cadence-env", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self._serial = self._call(SerialEnvironment, list(env_fns), device)
        except BaseException:
            self._stop_thread()
            raise
        # Specs are plain values fixed at construction: cache them rather than ask the thread.
        self._specs = (
            self._serial.observation_spec,
            self._serial.action_spec,
            self._serial.env_info_spec,
        )

    @property
    def batch_size(self) -> int:
        return self._serial.batch_size

    @property
    def observation_spec(self) -> Spec:
        return self._specs[0]

    @property
    def action_spec(self) -> Spec:
        return self._specs[1]

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._specs[2]

    @property
    def device(self) -> torch.device:
        return self._serial.device

    @property
    def thread(self) -> threading.Thread:
        """The thread the environments live on."""
        return self._thread

    def reset(self) -> TimeStep:
        return self._call(self._serial.reset)

    def step(self, action: Nest) -> TimeStep:
        return self._call(self._serial.step, action)

    def render(self, env_index: int = 0) -> np.ndarray | None:
        return self._call(self._serial.render, env_index)

    def get_state(self) -> Any:
        return self._call(self._serial.get_state)

    def set_state(self, state: Any) -> None:
        self._call(self._serial.set_state, state)

    def close(self) -> None:
        """Closes the envs on their thread, then ends and joins the thread; idempotent."""
        if getattr(self, "_closed", True):
            return
        try:
            if hasattr(self, "_serial"):
                self._call(self._serial.close)
        finally:
            self._stop_thread()

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Runs ``fn(*args)`` on the environment thread and returns its result.

        Raises:
            RuntimeError: the environment is closed.
            Exception: whatever ``fn`` raised, with its traceback from the thread.
        """
        if self._closed:
            raise RuntimeError("ThreadEnvironment is closed")
        if threading.current_thread() is self._thread:
            return fn(*args)  # a call from the env thread itself (e.g. a callback) would deadlock
        future: Future = Future()
        self._requests.put((future, fn, args))
        return future.result()

    def _stop_thread(self) -> None:
        self._closed = True
        self._requests.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()


def _serve(requests: queue.SimpleQueue) -> None:
    """The environment thread's loop: runs requests until `_STOP`."""
    while (request := requests.get()) is not _STOP:
        future, fn, args = request
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure belongs to the caller
            future.set_exception(exc)
        del future, fn, args, request  # drop references (e.g. time steps) while idle
    logger.debug("environment thread %s stopped", threading.current_thread().name)
