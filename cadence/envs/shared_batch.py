"""`SharedBatch`: the one shared-memory block of a `ParallelEnvironment` and its workers.

The block holds, each aligned: the pre-stacked time steps the workers write their rows
into (a `TimeStepBuffer`), the actions the parent writes for them, and the doorbell's
control block (`cadence.envs.doorbell`). Its field-by-field `layout` is what every
worker, a restarted one too, must agree on.
"""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from cadence.data.nest import Nest, map_structure
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.buffer import TimeStepBuffer, action_to_numpy
from cadence.envs.doorbell import control_block_nbytes
from cadence.envs.parallel_worker import (
    action_layout_for,
    action_rows,
    aligned,
    shared_views,
    unlink_shared_memory,
)

_LAST = int(StepType.LAST)


class SharedBatch:
    """A new shared-memory block for ``num_envs`` envs stepped by ``num_workers`` workers.

    Attributes:
        buffer: the time steps (`TimeStepBuffer`).
        actions: the action arrays by leaf path (``""`` for a single array).
        layout: the block's fields, as `layout_fields` gives them.
    """

    def __init__(
        self,
        observation_spec: Spec,
        action_spec: Spec,
        env_info_spec: CompositeSpec,
        num_envs: int,
        num_workers: int,
    ):
        specs = (observation_spec, action_spec, env_info_spec)
        self.layout = layout_fields(*specs, num_envs)
        buffer_layout = TimeStepBuffer.make_layout(*specs, num_envs)
        action_layout = action_layout_for(action_spec, num_envs)
        size = (
            aligned(buffer_layout.nbytes)
            + aligned(action_layout.nbytes)
            + control_block_nbytes(num_workers)
        )
        self._env_info_spec = env_info_spec
        self._shm: SharedMemory | None = SharedMemory(create=True, size=size)
        self.buffer, self.actions, self._control = shared_views(self._shm, *specs, num_envs)

    @property
    def name(self) -> str:
        """The block's name, by which the workers attach to it."""
        return self._shm.name

    def take_control(self) -> memoryview:
        """The doorbell's control block, handed over once (a view kept here would keep the
        block from closing)."""
        control, self._control = self._control, None
        return control

    def write_actions(self, action: Nest) -> None:
        """Writes a batch of actions (a nest matching the action spec) for the workers.

        Raises:
            ValueError: a leaf's shape is not the batch's.
        """
        action = action_to_numpy(action)
        for name, array in self.actions.items():
            value = action if name == "" else leaf(action, name)
            if np.shape(value) != array.shape:
                raise ValueError(
                    f"action{'/' + name if name else ''} has shape {np.shape(value)}, expected {array.shape}"
                )
            np.copyto(array, value, casting="unsafe")

    def write_action_rows(self, action: Nest, rows: Sequence[int] | np.ndarray | slice) -> None:
        """Writes actions for the envs ``rows`` alone (row ``i`` of ``action`` to env
        ``rows[i]``; the asynchronous mode's partial batches). A slice of consecutive rows
        is written faster than their indices.

        Raises:
            ValueError: a leaf's shape is not ``len(rows)`` rows of the action's.
        """
        action = action_to_numpy(action)
        count = len(range(self.buffer.batch_size)[rows]) if isinstance(rows, slice) else len(rows)
        for name, array in self.actions.items():
            value = action if name == "" else leaf(action, name)
            expected = (count, *array.shape[1:])
            if np.shape(value) != expected:
                raise ValueError(
                    f"action{'/' + name if name else ''} has shape {np.shape(value)}, "
                    f"expected {expected} (one row per env the last step returned)"
                )
            array[rows] = value

    def end_episodes(
        self, rows: list[int], last: TimeStep, last_rows: list[int] | None = None
    ) -> None:
        """Writes LAST rows (discount 1, reward 0, zero ``env_info``) for the envs ``rows``,
        repeating their observation in ``last``, the time step delivered before (at its
        rows ``last_rows``: by default ``rows``, for a whole batch)."""
        observation = map_structure(lambda x: x.cpu().numpy(), last.observation)
        zero_info = dict.fromkeys(self._env_info_spec, 0.0)
        for row, source in zip(rows, rows if last_rows is None else last_rows, strict=True):
            self.buffer.write(
                row,
                TimeStep(
                    step_type=_LAST,
                    reward=0.0,
                    discount=1.0,
                    observation=map_structure(lambda x, r=source: x[r], observation),
                    prev_action=action_rows(self.actions, slice(row, row + 1))[0],
                    env_id=row,
                    env_info=zero_info,
                ),
            )

    def release(self) -> None:
        """Closes and unlinks the block; idempotent."""
        # Views over the block must go before it can close; unlink frees it system-wide.
        self.__dict__.pop("buffer", None)
        self.__dict__.pop("actions", None)
        self._control = None
        if self._shm is None:
            return
        try:
            self._shm.close()
        except BufferError:  # a time step view still held elsewhere; the mapping goes with it
            pass
        unlink_shared_memory(self._shm)
        self._shm = None


def layout_fields(
    observation_spec: Spec, action_spec: Spec, env_info_spec: CompositeSpec, batch_size: int
) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """What the shared block holds, field by field: workers must agree on it."""
    buffer = TimeStepBuffer.make_layout(observation_spec, action_spec, env_info_spec, batch_size)
    return buffer.fields + action_layout_for(action_spec, batch_size).fields


def leaf(nest: Nest, path: str) -> Any:
    """The leaf of ``nest`` at ``/``-joined ``path``."""
    for key in path.split("/"):
        nest = nest[key]
    return nest
