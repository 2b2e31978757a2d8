"""The `Batcher`'s shared-memory blocks: the trajectories its workers write, the weights they read.

Both are laid out by `cadence.envs.buffer.ArrayLayout` (named arrays at aligned
offsets), as a pure function of what they hold, so the parent and each worker
build the same views from a name and a list of fields:

- the trajectory block holds, for every slot of the whole batch, ``[N, T, ...]``
  per ``observation/*``, ``action/*`` and ``_observation/*`` key, ``[N, ...]`` per
  ``agent_state/*`` key (the state at the slot's start), and ``progress`` ``[N]``,
  the steps a slot has written in the current acquisition (its length, and where
  a dead worker's slots stop);
- the weights block holds two copies of the learner's weights, each stamped with
  its version. The parent writes a new version into the copy that no acquisition
  in flight reads, so an `update` never tears the weights a worker is loading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import torch

from cadence.data.specs import numpy_dtype
from cadence.envs.buffer import ArrayLayout
from cadence.envs.parallel_worker import aligned, attach_shared_memory, unlink_shared_memory

Field = tuple[str, tuple[int, ...], np.dtype]
"""A named array of the block: ``(name, shape, dtype)``."""

Specs = dict[str, list[Field]]
"""Per group (``"observation"``, ``"action"``, ``"agent_state"``), the per-slot fields."""


def row_fields(values: Mapping[str, torch.Tensor]) -> list[Field]:
    """``(key, shape of one row, numpy dtype)`` of each ``[B, ...]`` tensor.

    Raises:
        TypeError: a dtype numpy cannot hold (bfloat16).
    """
    fields = []
    for key, value in values.items():
        try:
            dtype = numpy_dtype(value.dtype)
        except TypeError as error:
            raise TypeError(f"{key!r} is {value.dtype}, which shared memory cannot hold") from error
        fields.append((key, tuple(value.shape[1:]), dtype))
    return fields


def trajectory_fields(specs: Specs, n_slots: int, n_timesteps: int) -> list[Field]:
    """The fields of the trajectory block for ``n_slots`` slots of ``n_timesteps`` steps."""
    fields: list[Field] = [("progress", (n_slots,), np.dtype(np.int64))]
    for prefix, group in (
        ("observation/", "observation"),
        ("action/", "action"),
        ("_observation/", "observation"),
    ):
        for key, shape, dtype in specs[group]:
            fields.append((prefix + key, (n_slots, n_timesteps, *shape), dtype))
    for key, shape, dtype in specs["agent_state"]:
        fields.append(("agent_state/" + key, (n_slots, *shape), dtype))
    return fields


class TrajectoryBlock:
    """The trajectory block over shared memory (created by the parent, attached by workers).

    Args:
        fields: from `trajectory_fields`.
        name: the block to attach to; ``None`` creates one.
        shared: ``False``: a private block in this process's own memory (the Ray back
            end's, whose workers may sit on other machines and send their rows instead).
    """

    def __init__(self, fields: list[Field], name: str | None = None, shared: bool = True):
        self.fields = fields
        layout = ArrayLayout(fields)
        self._shm = None
        if shared:
            self._shm = _open(name, layout.nbytes)
            memory = self._shm.buf
        else:
            memory = bytearray(layout.nbytes)
        self.arrays: dict[str, np.ndarray] = layout.views(memory)

    @property
    def name(self) -> str | None:
        """The shared memory's name (``None`` for a private block)."""
        return None if self._shm is None else self._shm.name

    def close(self, unlink: bool = False) -> None:
        """Drops the views and unmaps the block (``unlink``: frees it, the creator's job)."""
        self.arrays = {}
        if self._shm is None:
            return
        try:
            self._shm.close()
        except BufferError:  # a view still referenced elsewhere; the mapping goes at exit
            pass
        if unlink:
            unlink_shared_memory(self._shm)


class WeightsBlock:
    """Two stamped copies of a fixed set of named tensors, in shared memory.

    Args:
        fields: ``(name, shape, dtype)`` of each tensor.
        name: the block to attach to; ``None`` creates one.
    """

    _HEADER = 64  # the two int64 stamps, then padding to the alignment

    def __init__(self, fields: list[Field], name: str | None = None):
        self.fields = fields
        self._layout = ArrayLayout(fields)
        self._copy_nbytes = aligned(self._layout.nbytes)
        size = self._HEADER + 2 * self._copy_nbytes
        self._shm = _open(name, size)
        self._stamps = np.ndarray((2,), np.int64, buffer=self._shm.buf)
        if name is None:
            self._stamps[:] = -1

    @classmethod
    def for_weights(cls, weights: Mapping[str, torch.Tensor]) -> WeightsBlock:
        """A new block laid out for ``weights`` (a ``state_dict``)."""
        return cls(row_fields({k: v.unsqueeze(0) for k, v in weights.items()}))

    @property
    def name(self) -> str:
        return self._shm.name

    def stamp(self, copy: int) -> int:
        """The version held by ``copy`` (-1: none yet)."""
        return int(self._stamps[copy])

    def write(self, copy: int, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Writes ``weights`` into ``copy`` and stamps it ``version``.

        Raises:
            ValueError: ``weights`` differ from the block's names, shapes or dtypes.
        """
        expected = [(n, s, d) for n, s, d in self.fields]
        given = row_fields({k: v.unsqueeze(0) for k, v in weights.items()})
        if given != expected:
            raise ValueError(
                "Batcher.update takes tensors of the same names, shapes and dtypes every time; "
                f"first {_describe(expected)}, now {_describe(given)}"
            )
        self._stamps[copy] = -1  # torn while written (no reader is on it: see the module)
        arrays = self._layout.view_list(self._copy_memory(copy))
        for array, value in zip(arrays, weights.values(), strict=True):
            np.copyto(array, value.detach().cpu().numpy())
        self._stamps[copy] = version

    def read(self, copy: int, version: int) -> dict[str, torch.Tensor]:
        """A private copy of ``copy``'s tensors, which must hold ``version``.

        Raises:
            RuntimeError: ``copy`` holds another version (the protocol is broken).
        """
        if self.stamp(copy) != version:
            raise RuntimeError(
                f"the weights copy {copy} holds version {self.stamp(copy)}, not {version}"
            )
        private = bytearray(self._copy_memory(copy))
        arrays = self._layout.view_list(private)
        return {
            name: torch.from_numpy(array)
            for (name, _, _), array in zip(self.fields, arrays, strict=True)
        }

    def close(self, unlink: bool = False) -> None:
        self._stamps = None
        try:
            self._shm.close()
        except BufferError:
            pass
        if unlink:
            unlink_shared_memory(self._shm)

    def _copy_memory(self, copy: int) -> memoryview:
        start = self._HEADER + copy * self._copy_nbytes
        return self._shm.buf[start : start + self._layout.nbytes]


def _open(name: str | None, size: int) -> SharedMemory:
    """A new block of ``size`` bytes (``name`` None), or the parent's block ``name``."""
    if name is None:
        return SharedMemory(create=True, size=size)
    return attach_shared_memory(name)


def _describe(fields: Sequence[Field]) -> str:
    return ", ".join(f"{n}: {d}{list(s)}" for n, s, d in fields[:8]) + (
        ", ..." if len(fields) > 8 else ""
    )
