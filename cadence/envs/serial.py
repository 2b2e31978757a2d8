"""`SerialEnvironment`: a batch of `PyEnvironment` s stepped in the calling process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import TimeStep
from cadence.envs.buffer import TimeStepBuffer, action_row, action_to_numpy
from cadence.envs.environment import Environment, PyEnvironment
from cadence.envs.errors import EnvStateMismatchError


class SerialEnvironment(Environment):
    """Steps its environments one after another: for debugging and cheap envs.

    Args:
        env_fns: one constructor per environment; ``env_fns[i]`` builds env ``i``.
        device: where the time steps are delivered.
    """

    uniform_time_steps = True  # each one read out of a `TimeStepBuffer`

    def __init__(self, env_fns: Sequence[Callable[[], PyEnvironment]], device: Any = "cpu"):
        if not env_fns:
            raise ValueError("SerialEnvironment needs at least one environment")
        self._envs = [fn() for fn in env_fns]
        self._device = torch.device(device)
        first = self._envs[0]
        self._buffer = TimeStepBuffer(
            first.observation_spec, first.action_spec, first.env_info_spec, len(self._envs)
        )
        self._closed = False

    @property
    def batch_size(self) -> int:
        return len(self._envs)

    @property
    def observation_spec(self) -> Spec:
        return self._envs[0].observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._envs[0].action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._envs[0].env_info_spec

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def envs(self) -> list[PyEnvironment]:
        return self._envs

    def reset(self) -> TimeStep:
        self._buffer.write_rows(0, [env.reset() for env in self._envs])
        return self._buffer.read(self._device)

    def step(self, action: Nest) -> TimeStep:
        action = action_to_numpy(action)
        if isinstance(action, np.ndarray):
            # Iterating an array yields its rows (numpy scalars for scalar actions).
            time_steps = [env.step(a) for env, a in zip(self._envs, action, strict=True)]
        else:
            time_steps = [env.step(action_row(action, row)) for row, env in enumerate(self._envs)]
        self._buffer.write_rows(0, time_steps)
        return self._buffer.read(self._device)

    def render(self, env_index: int = 0) -> np.ndarray | None:
        return self._envs[env_index].render()

    def get_state(self) -> Any:
        return [env.get_state() for env in self._envs]

    def set_state(self, state: Any) -> None:
        """Restores a `get_state`: one state per env, in batch order.

        Raises:
            EnvStateMismatchError: ``state`` was saved by another kind of back end (or
                for another number of envs).
        """
        check_batch_state(state, len(self._envs))
        for env, env_state in zip(self._envs, state, strict=True):
            env.set_state(env_state)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for env in self._envs:
            env.close()


def check_batch_state(state: Any, num_envs: int) -> None:
    """Raises `EnvStateMismatchError` unless ``state`` is a list of ``num_envs`` env states (the
    format of the serial, thread and parallel back ends)."""
    if not isinstance(state, list | tuple):
        raise EnvStateMismatchError(
            f"the env state is a {type(state).__name__}, not a list of per-env states (it was "
            "saved by a tensor-native env, not by a Gymnasium back end)"
        )
    if len(state) != num_envs:
        raise EnvStateMismatchError(
            f"the env state holds {len(state)} envs, this batch has {num_envs}"
        )
