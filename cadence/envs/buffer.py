"""`TimeStepBuffer`: a batch of time steps pre-stacked in one contiguous block of memory.

Batching back ends write each environment's numpy `TimeStep` into its row, then
hand out a torch `TimeStep` made by copying the whole block once. The block can
live in shared memory (`ParallelEnvironment` workers write their rows in place)
because its layout is a pure function of the specs and the batch size.

The copies go to consecutive slots of a slab, whose tensors are made once for all its
slots: a step then builds no tensor, where making its own (a ``from_numpy`` per field)
cost 6 us of a step of 8 CartPoles and slowed the policy's next call by as much again.
Every slot is written once, so a time step never shares memory with a later one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest, flatten_with_paths, map_structure, pack_sequence_as
from cadence.data.specs import CompositeSpec, Spec
from cadence.data.time_step import TimeStep

_ALIGN = 64
_CPU = torch.device("cpu")

SLAB_BYTES = 1 << 18
"""A slab's size: as many slots as fit (at most `MAX_SLAB_SLOTS`, at least one). A time
step held keeps its slab alive, so this bounds what one held step costs."""

MAX_SLAB_SLOTS = 64


class ArrayLayout:
    """Named arrays placed at aligned offsets of one byte block."""

    def __init__(self, fields: list[tuple[str, tuple[int, ...], np.dtype]]):
        self.fields = fields
        self.offsets: list[int] = []
        offset = 0
        for _, shape, dtype in fields:
            self.offsets.append(offset)
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            offset += -(-size // _ALIGN) * _ALIGN
        self.nbytes = max(offset, _ALIGN)
        self._placements = [
            (tuple(shape), np.dtype(dtype), offset)
            for (_, shape, dtype), offset in zip(fields, self.offsets, strict=True)
        ]
        # The whole block as one numpy record: a fresh block and its field arrays cost one
        # allocation and a field lookup each, where `view_list` builds an array per field.
        self._record_names = [f"f{i}" for i in range(len(fields))]
        self.record_dtype = np.dtype(
            {
                "names": self._record_names,
                "formats": [(dtype, shape) for shape, dtype, _ in self._placements],
                "offsets": self.offsets,
                "itemsize": self.nbytes,
            },
            align=True,
        )

    def views(self, memory: Any) -> dict[str, np.ndarray]:
        """Arrays over ``memory`` (anything supporting the buffer protocol), by name."""
        return {
            name: a for (name, _, _), a in zip(self.fields, self.view_list(memory), strict=True)
        }

    def new_slab(self, slots: int) -> tuple[list[np.ndarray], list[tuple[torch.Tensor, ...]]]:
        """``slots`` fresh (uninitialised) blocks in one allocation: each block as bytes,
        and per field the tensors of every block (``fields[f][k]``: field f of block k)."""
        record = np.empty((slots,), self.record_dtype)
        blocks = list(np.frombuffer(record, np.uint8).reshape(slots, self.nbytes))
        fields = [torch.from_numpy(record[name]).unbind(0) for name in self._record_names]
        return blocks, fields

    def view_list(self, memory: Any) -> list[np.ndarray]:
        """Arrays over ``memory`` in field order."""
        # One constructor call per field: `read` makes these on every step.
        return [
            np.ndarray(shape, dtype, buffer=memory, offset=offset)
            for shape, dtype, offset in self._placements
        ]


def spec_fields(
    prefix: str, spec: Spec, batch_size: int
) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """Layout fields for every leaf of ``spec``, named ``prefix/<path>``."""
    return [
        (f"{prefix}/{path}" if path else prefix, (batch_size, *leaf.shape), leaf.numpy_dtype)
        for path, leaf in flatten_with_paths(_as_nest(spec))
    ]


def _as_nest(spec: Spec) -> Nest:
    if isinstance(spec, CompositeSpec):
        return {k: _as_nest(v) for k, v in spec.items()}
    return spec


class TimeStepBuffer:
    """Rows of a batch of time steps, each written by one environment.

    Args:
        observation_spec, action_spec, env_info_spec: the specs of one environment.
        batch_size: the number of rows.
        memory: a writable buffer of at least `nbytes` bytes to place the block
            in (e.g. ``SharedMemory.buf``); ``None`` allocates a private one.
    """

    def __init__(
        self,
        observation_spec: Spec,
        action_spec: Spec,
        env_info_spec: CompositeSpec,
        batch_size: int,
        memory: Any = None,
    ):
        self.batch_size = batch_size
        self.specs = (observation_spec, action_spec, env_info_spec)
        self._obs_structure = _as_nest(observation_spec)
        self._action_structure = _as_nest(action_spec)
        self._info_keys = list(env_info_spec)
        self.layout = self.make_layout(observation_spec, action_spec, env_info_spec, batch_size)
        self.memory = bytearray(self.layout.nbytes) if memory is None else memory
        self.arrays = self.layout.views(self.memory)
        self.arrays["env_id"][:] = np.arange(batch_size)
        self._obs_leaves = [a for n, a in self.arrays.items() if n.startswith("observation")]
        self._action_leaves = [a for n, a in self.arrays.items() if n.startswith("prev_action")]
        self._flat_obs = not isinstance(observation_spec, CompositeSpec)
        self._flat_action = not isinstance(action_spec, CompositeSpec)
        self._step_type = self.arrays["step_type"]
        self._reward = self.arrays["reward"]
        self._discount = self.arrays["discount"]
        self._info = [(k, self.arrays[f"env_info/{k}"]) for k in self._info_keys]
        self._bytes = np.frombuffer(self.memory, dtype=np.uint8, count=self.layout.nbytes)
        # Fields are laid out as: 4 scalars, observation leaves, action leaves, env_info.
        num_obs, num_actions = len(self._obs_leaves), len(self._action_leaves)
        self._obs_slice = slice(4, 4 + num_obs)
        self._action_slice = slice(4 + num_obs, 4 + num_obs + num_actions)
        self._slab_slots = max(1, min(MAX_SLAB_SLOTS, SLAB_BYTES // self.layout.nbytes))
        self._slab: tuple[list[np.ndarray], list[tuple[torch.Tensor, ...]]] = ([], [])
        self._next_slot = 0

    @staticmethod
    def make_layout(
        observation_spec: Spec, action_spec: Spec, env_info_spec: CompositeSpec, batch_size: int
    ) -> ArrayLayout:
        fields = [
            ("step_type", (batch_size,), np.dtype(np.int64)),
            ("reward", (batch_size,), np.dtype(np.float32)),
            ("discount", (batch_size,), np.dtype(np.float32)),
            ("env_id", (batch_size,), np.dtype(np.int64)),
        ]
        fields += spec_fields("observation", observation_spec, batch_size)
        fields += spec_fields("prev_action", action_spec, batch_size)
        for key in env_info_spec:
            fields.append((f"env_info/{key}", (batch_size,), np.dtype(np.float32)))
        return ArrayLayout(fields)

    def write(self, row: int, time_step: TimeStep) -> None:
        """Writes one environment's unbatched numpy time step into ``row``."""
        self.write_rows(row, (time_step,))

    def write_rows(self, start: int, time_steps: Sequence[TimeStep]) -> None:
        """Writes consecutive environments' unbatched numpy time steps from row ``start`` on.

        Scalars go in one slice assignment per field, which costs far less than one
        numpy item assignment per row and field (this is the per-env-step hot path).
        """
        rows = slice(start, start + len(time_steps))
        self._step_type[rows] = [t.step_type for t in time_steps]
        self._reward[rows] = [t.reward for t in time_steps]
        self._discount[rows] = [t.discount for t in time_steps]
        _write_leaves(
            self._obs_leaves,
            self._flat_obs,
            start,
            [t.observation for t in time_steps],
            self._obs_structure,
        )
        _write_leaves(
            self._action_leaves,
            self._flat_action,
            start,
            [t.prev_action for t in time_steps],
            self._action_structure,
        )
        for key, array in self._info:
            array[rows] = [t.env_info[key] for t in time_steps]

    def write_batch(
        self,
        step_type: np.ndarray,
        reward: np.ndarray,
        discount: np.ndarray,
        observation: Nest,
        prev_action: Nest | None,
        env_info: dict[str, np.ndarray],
    ) -> None:
        """Writes every row at once from batched numpy arrays (a vector env's), each field
        converted to its dtype by the assignment; ``prev_action`` None writes zeros."""
        self._step_type[:] = step_type
        self._reward[:] = reward
        self._discount[:] = discount
        _write_columns(self._obs_leaves, self._flat_obs, observation, self._obs_structure)
        if prev_action is None:
            self.zero_actions(slice(None))
        else:
            _write_columns(
                self._action_leaves, self._flat_action, prev_action, self._action_structure
            )
        for key, array in self._info:
            array[:] = env_info[key]

    def zero_actions(self, rows: Any) -> None:
        """Zeroes ``prev_action`` in ``rows`` (FIRST steps')."""
        for array in self._action_leaves:
            array[rows] = 0

    def read(self, device: torch.device | str = "cpu") -> TimeStep:
        """A torch `TimeStep` of all rows, copied out of the block (one memcpy)."""
        return self.read_prepared(self.prepare(), device)

    def prepare(self) -> tuple[np.ndarray, TimeStep]:
        """A fresh block (the slab's next slot) and a torch `TimeStep` over it, for
        `read_prepared` to fill.

        Building the `TimeStep` costs most of a `read`; a caller that waits for the rows
        (`ParallelEnvironment`, while its workers step) builds it meanwhile.
        """
        blocks, fields = self._slab
        if self._next_slot == len(blocks):
            blocks, fields = self._slab = self.layout.new_slab(self._slab_slots)
            self._next_slot = 0
        slot = self._next_slot
        self._next_slot += 1
        return blocks[slot], self._assemble([field[slot] for field in fields])

    def read_prepared(
        self, prepared: tuple[np.ndarray, TimeStep], device: torch.device | str = "cpu"
    ) -> TimeStep:
        """Like `read`, into a block from `prepare` (one memcpy); each one is used once."""
        block, time_step = prepared
        np.copyto(block, self._bytes)
        if device != _CPU and torch.device(device).type != "cpu":
            time_step = time_step.to(device)
        return time_step

    def resized(self, batch_size: int) -> TimeStepBuffer:
        """A private buffer of the same specs with ``batch_size`` rows."""
        return TimeStepBuffer(*self.specs, batch_size)

    def _assemble(self, arrays: list[torch.Tensor]) -> TimeStep:
        obs = arrays[self._obs_slice]
        actions = arrays[self._action_slice]
        return TimeStep(
            step_type=arrays[0],
            reward=arrays[1],
            discount=arrays[2],
            observation=obs[0] if self._flat_obs else pack_sequence_as(self._obs_structure, obs),
            prev_action=actions[0]
            if self._flat_action
            else pack_sequence_as(self._action_structure, actions),
            env_id=arrays[3],
            env_info=dict(zip(self._info_keys, arrays[self._action_slice.stop :], strict=True)),
        )


class RowGather:
    """Reads chosen rows of a `TimeStepBuffer` into fresh time steps of those rows alone.

    The asynchronous mode of `ParallelEnvironment` returns a few envs' rows of its shared
    buffer per step. Reading them copies only their bytes, straight into a block of a
    `TimeStepBuffer` of ``len(rows)`` rows (``target``), whose torch `TimeStep` is made
    beforehand (its `TimeStepBuffer.prepare`, while the workers step): no copy of the
    whole batch, no tensor indexing. A small block (`GATHER_INDEX_BYTES`) is one
    ``np.take`` of bytes through an index made here once; a larger one is one ``np.take``
    per field.

    Args:
        source: the buffer whose rows are read.
        rows: which rows, in the order the time steps list them.
        target: a buffer of ``len(rows)`` rows and ``source``'s specs, whose blocks the
            rows are read into (several gathers of as many rows may share one).
    """

    def __init__(self, source: TimeStepBuffer, rows: Sequence[int], target: TimeStepBuffer):
        self.rows = np.asarray(rows, dtype=np.intp)
        self.row_list: list[int] = self.rows.tolist()
        consecutive = len(self.rows) and np.array_equal(
            self.rows, np.arange(self.rows[0], self.rows[0] + len(self.rows))
        )
        # The rows as an index of a [B, ...] array: a slice where they are consecutive.
        self.index = slice(int(self.rows[0]), int(self.rows[-1]) + 1) if consecutive else self.rows
        if target.batch_size != len(self.rows):
            raise ValueError(f"target has {target.batch_size} rows, expected {len(self.rows)}")
        self._source = source
        self._target = target
        self._byte_index = None
        if target.layout.nbytes <= GATHER_INDEX_BYTES:
            self._byte_index = _byte_index(source.layout, target.layout, self.rows)

    def read(self, prepared: tuple[np.ndarray, TimeStep] | None = None) -> TimeStep:
        """The rows as they are now in the source, into a block ``prepared`` by the
        target's `TimeStepBuffer.prepare` (``None``: the next one)."""
        block, time_step = self._target.prepare() if prepared is None else prepared
        # "clip": the indices are in range by construction, and numpy buffers `out` otherwise.
        if self._byte_index is not None:
            np.take(self._source._bytes, self._byte_index, out=block, mode="clip")
        else:
            targets = self._target.layout.view_list(block)
            for source, target in zip(self._source.arrays.values(), targets, strict=True):
                np.take(source, self.rows, axis=0, out=target, mode="clip")
        return time_step


GATHER_INDEX_BYTES = 1 << 13
"""The largest block `RowGather` reads through a byte index (8 bytes of index a byte)."""


def _byte_index(source: ArrayLayout, target: ArrayLayout, rows: np.ndarray) -> np.ndarray:
    """For each byte of a ``target`` block, the byte of a ``source`` block it copies (rows
    ``rows`` of every field; padding copies byte 0)."""
    index = np.zeros(target.nbytes, dtype=np.intp)
    for (_, shape, dtype), start, at in zip(
        source.fields, source.offsets, target.offsets, strict=True
    ):
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        spans = start + rows[:, None] * row_bytes + np.arange(row_bytes)
        index[at : at + spans.size] = spans.ravel()
    return index


def _write_leaves(
    arrays: list[np.ndarray], flat: bool, start: int, values: list[Nest], structure: Nest = None
) -> None:
    """Writes rows ``start, start + 1, ...`` of ``arrays`` (the leaves of one nest field)."""
    if flat:
        array = arrays[0]
        try:
            # One assignment converts the whole list: far cheaper than one per row.
            array[start : start + len(values)] = values
            return
        except ValueError:  # rows that only broadcast to the row shape (e.g. a bare scalar)
            pass
        for row, value in enumerate(values, start):
            array[row] = value
        return
    for row, value in enumerate(values, start):
        for array, leaf in zip(arrays, _leaves(value, structure), strict=True):
            array[row] = leaf


def _write_columns(arrays: list[np.ndarray], flat: bool, value: Nest, structure: Nest) -> None:
    """Writes every row of ``arrays`` (the leaves of one nest field) from the batched
    ``value``."""
    if flat:
        arrays[0][:] = value
        return
    for array, leaf in zip(arrays, _leaves(value, structure), strict=True):
        array[:] = leaf


def _leaves(nest: Nest, structure: Nest = None) -> list[Any]:
    if structure is not None:
        # In the spec's key order: an env's dicts may list their keys in any order (Gymnasium
        # sorts a Dict space's keys, not the observations an env returns).
        nest = map_structure(lambda _, leaf: leaf, structure, nest)
    return [leaf for _, leaf in flatten_with_paths(nest)]


def action_to_numpy(action: Nest) -> Nest:
    """A batched torch action nest as numpy arrays on the CPU (no copy when possible)."""
    if isinstance(action, torch.Tensor):
        if action.requires_grad or not action.is_cpu:
            action = action.detach().cpu()
        return action.numpy()
    if isinstance(action, dict):
        return {k: action_to_numpy(v) for k, v in action.items()}
    return np.asarray(action)


def action_row(action: Nest, row: int) -> Nest:
    """Row ``row`` of a batched numpy action nest."""
    if isinstance(action, dict):
        return {k: action_row(v, row) for k, v in action.items()}
    return action[row]
