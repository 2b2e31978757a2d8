"""`RingStorage`: pre-allocated ``[num_envs, capacity]`` rings of step rows.

A *step row* is a nest of tensors describing one step of one environment (its
time step fields, the action taken there, rollout info). Every field is kept in
one tensor ``[num_envs, capacity, *field_shape]``; environment ``e`` writes only
ring ``e``, so the steps of a ring are consecutive steps of one environment and
a window of consecutive ring positions is a piece of trajectory.

Positions and times: the ``t``-th step ever added to env ``e`` (its *time*
``t``, counted from 0 since the last `clear`) lives at position ``t % capacity``
until it is overwritten, ``capacity`` steps later. Times let the episode index,
samplers and persistence reason about wrap-around without modular puzzles.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest, flatten_with_paths, map_structure, pack_sequence_as
from cadence.data.specs import TensorSpec, numpy_dtype


class RingStorage:
    """``num_envs`` rings of ``capacity`` step rows each, on one device.

    Fields, shapes and dtypes are fixed by ``spec`` or by the first add.

    Args:
        num_envs: number of rings (one per environment of the batch).
        capacity: steps kept per environment; older ones are overwritten.
        device: where the rings are allocated.
        spec: optional nest of `TensorSpec` describing one step row (no batch
            dims); without it the fields are taken from the first add.

    >>> storage = RingStorage(num_envs=2, capacity=3)
    >>> _ = storage.add({"x": torch.tensor([1.0, 2.0])})
    >>> _ = storage.add({"x": torch.tensor([5.0])}, env_ids=torch.tensor([1]))
    >>> storage.sizes.tolist(), storage.gather(torch.tensor([1]), torch.tensor([[0, 1]]))["x"]
    ([1, 2], tensor([[2., 5.]]))
    """

    def __init__(
        self,
        num_envs: int,
        capacity: int,
        device: torch.device | str = "cpu",
        spec: Nest | None = None,
    ) -> None:
        if num_envs < 1 or capacity < 1:
            raise ValueError(f"num_envs and capacity must be >= 1, got {num_envs}, {capacity}")
        self.num_envs = num_envs
        self.capacity = capacity
        self.device = torch.device(device)
        self._all_envs = torch.arange(num_envs, device=self.device)
        self._num_added = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._fields: dict[str, torch.Tensor] = {}
        self._structure: Nest | None = None
        self._selections: dict[tuple[str, ...], tuple[list[str], Nest]] = {}
        if spec is not None:
            self._allocate(spec_fields(spec), pack_sequence_as(spec, _paths(spec)))

    # ----------------------------------------------------------------- queries

    @property
    def initialized(self) -> bool:
        """Whether the fields are known (from ``spec`` or a first add)."""
        return self._structure is not None

    @property
    def fields(self) -> Mapping[str, torch.Tensor]:
        """The rings ``[num_envs, capacity, *shape]`` by ``/``-joined key (live, not copies)."""
        return self._fields

    @property
    def structure(self) -> Nest:
        """The row nest with each leaf replaced by its ``/``-joined key."""
        if self._structure is None:
            raise RuntimeError("the storage has no fields yet: add a step or give a spec")
        return self._structure

    @property
    def num_added(self) -> torch.Tensor:
        """``[num_envs]`` int64: steps ever added per env since the last `clear`."""
        return self._num_added

    @property
    def sizes(self) -> torch.Tensor:
        """``[num_envs]`` int64: steps currently stored per env."""
        return self._num_added.clamp(max=self.capacity)

    @property
    def num_steps(self) -> int:
        """Steps currently stored, all envs together."""
        return int(self.sizes.sum())

    @property
    def write_positions(self) -> torch.Tensor:
        """``[num_envs]``: where each env's next step goes (its write head)."""
        return self._num_added % self.capacity

    @property
    def oldest_positions(self) -> torch.Tensor:
        """``[num_envs]``: position of each env's oldest stored step (0 while not full)."""
        return torch.where(self._num_added >= self.capacity, self.write_positions, 0)

    def positions(self, env_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Ring positions of the ``offsets``-th oldest stored steps of ``env_ids``.

        Args:
            env_ids: ``[N]`` env indices.
            offsets: ``[N, ...]`` offsets from the oldest stored step (0 = oldest).

        Returns:
            ``[N, ...]`` ring positions.
        """
        oldest = self.oldest_positions[env_ids].view(-1, *([1] * (offsets.dim() - 1)))
        return (oldest + offsets) % self.capacity

    def times(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The times (see module doc) of the steps stored at ``positions``.

        Args:
            env_ids: ``[N]`` env indices.
            positions: ``[N, ...]`` ring positions holding stored steps.

        Returns:
            ``[N, ...]`` int64: the latest time ``t < num_added`` with ``t % capacity == position``.
        """
        newest = self._num_added[env_ids].view(-1, *([1] * (positions.dim() - 1))) - 1
        return newest - (newest - positions) % self.capacity

    def gather(
        self,
        env_ids: torch.Tensor,
        positions: torch.Tensor,
        fields: Collection[str] | None = None,
    ) -> Nest:
        """The rows at ``positions`` of ``env_ids``, all fields or only ``fields``.

        One flat slot index is computed for all fields, and each field is read with one
        ``index_select`` of its ``[num_envs * capacity, *shape]`` view.

        Args:
            env_ids: ``[N]`` env indices.
            positions: ``[N, L]`` ring positions (e.g. a window of consecutive steps).
            fields: the row keys to read (``/``-joined paths such as
                ``"time_step/observation"``; a key names a leaf or everything under it);
                None reads every field. Reading only what the consumer uses saves a copy
                of every other field.

        Returns:
            the row nest with leaves ``[N, L, *shape]`` (copies); with ``fields``, the nest
            keeps only the dict entries that hold a selected leaf.

        Raises:
            KeyError: a key of ``fields`` names no stored field.
        """
        keys, structure = self._selection(fields)
        rows = env_ids.view(-1, *([1] * (positions.dim() - 1)))
        slots = (rows * self.capacity + positions).reshape(-1)
        flat = {}
        for key in keys:
            ring = self._fields[key]
            values = ring.flatten(0, 1).index_select(0, slots)
            flat[key] = values.view(*positions.shape, *ring.shape[2:])
        return map_structure(flat.__getitem__, structure)

    def _selection(self, fields: Collection[str] | None) -> tuple[list[str], Nest]:
        """The storage keys and the pruned row structure of ``fields`` (cached per selection)."""
        if fields is None:
            return list(self._fields), self.structure
        selection = tuple(fields)
        cached = self._selections.get(selection)
        if cached is None:
            cached = self._selections[selection] = select_fields(self.structure, selection)
        return cached

    # ----------------------------------------------------------------- writing

    def add(self, rows: Nest, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Adds one step to each env of ``env_ids``.

        Args:
            rows: row nest with leaves ``[B, *shape]``; row ``i`` goes to ring ``env_ids[i]``.
            env_ids: ``[B]`` distinct env indices; default all envs (``B == num_envs``).

        Returns:
            ``[B]`` int64, the envs written.

        Raises:
            ValueError: the fields, shapes or dtypes differ from the stored ones
                (the message names the key), or ``env_ids`` repeats an env.
        """
        return self.add_sequence(map_structure(lambda x: x.unsqueeze(0), rows), env_ids)

    def add_sequence(self, rows: Nest, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Adds ``T`` consecutive steps to each env of ``env_ids`` (an unroll).

        Args:
            rows: row nest with leaves ``[T, B, *shape]``, time-major as `Experience`.
            env_ids: ``[B]`` distinct env indices; default all envs.

        Returns:
            ``[B]`` int64, the envs written.

        Raises:
            ValueError: as `add`.
        """
        values = dict(flatten_with_paths(rows))
        if self._structure is None:
            self._allocate(_fields_of(values), pack_sequence_as(rows, list(values)))
        env_ids = self._checked_env_ids(env_ids, values)
        num_steps = self._check_values(values, len(env_ids))
        kept = min(num_steps, self.capacity)  # older steps of a long sequence would be overwritten
        times = self._num_added[env_ids] + (num_steps - kept)
        positions = (times + torch.arange(kept, device=self.device).unsqueeze(1)) % self.capacity
        for key, ring in self._fields.items():
            ring[env_ids.unsqueeze(0), positions] = values[key][num_steps - kept :].to(self.device)
        self._num_added[env_ids] += num_steps
        return env_ids

    def clear(self) -> None:
        """Forgets every stored step (fields and allocation are kept)."""
        self._num_added.zero_()

    # ------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Contents, counts and the row structure (tensors are copies, on the storage's device)."""
        return {
            "num_envs": self.num_envs,
            "capacity": self.capacity,
            "num_added": self._num_added.clone(),
            "structure": self._structure,
            "fields": {key: ring.clone() for key, ring in self._fields.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any], copy: bool = True) -> None:
        """Restores a `state_dict` taken from a storage of the same size.

        Args:
            state: what `state_dict` returned.
            copy: copy the rings (False adopts contiguous tensors already on the storage's
                device as they are: for a caller that built them for this storage alone).

        Raises:
            ValueError: ``num_envs`` or ``capacity`` differ.
        """
        size = (state["num_envs"], state["capacity"])
        if size != (self.num_envs, self.capacity):
            raise ValueError(
                f"the state is for {size[0]} envs x {size[1]} steps, this storage holds "
                f"{self.num_envs} x {self.capacity}"
            )
        self._structure = state["structure"]
        self._selections = {}
        self._fields = {key: self._ring(ring, copy) for key, ring in state["fields"].items()}
        self._num_added = state["num_added"].to(self.device).clone()

    # ---------------------------------------------------------------- internal

    def _ring(self, ring: torch.Tensor, copy: bool) -> torch.Tensor:
        ring = ring.to(self.device)
        if copy or not ring.is_contiguous():
            ring = ring.clone(memory_format=torch.contiguous_format)
        return ring

    def _allocate(self, fields: Mapping[str, tuple[tuple[int, ...], torch.dtype]], structure: Nest):
        outer = (self.num_envs, self.capacity)
        self._fields = {
            key: lazy_zeros(outer + shape, dtype, self.device)
            for key, (shape, dtype) in fields.items()
        }
        self._structure = structure
        self._selections = {}

    def _checked_env_ids(
        self, env_ids: torch.Tensor | None, values: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        if env_ids is None:
            return self._all_envs
        env_ids = torch.as_tensor(env_ids, dtype=torch.int64, device=self.device).reshape(-1)
        if len(torch.unique(env_ids)) != len(env_ids):
            raise ValueError(f"env_ids must be distinct (one step per env), got {env_ids.tolist()}")
        return env_ids

    def _check_values(self, values: Mapping[str, torch.Tensor], batch_size: int) -> int:
        """Checks keys, shapes and dtypes; returns ``T``."""
        if set(values) != set(self._fields):
            raise ValueError(
                f"the row has keys {sorted(values)} but the storage holds {sorted(self._fields)}"
            )
        num_steps = next(iter(values.values())).shape[0] if values else 0
        for key, ring in self._fields.items():
            value = values[key]
            expected = (num_steps, batch_size, *ring.shape[2:])
            if tuple(value.shape) != expected or value.dtype != ring.dtype:
                raise ValueError(
                    f"field {key!r}: got {value.dtype} {list(value.shape)}, expected "
                    f"{ring.dtype} {list(expected)} ([T, B, *shape])"
                )
        return num_steps


def spec_fields(spec: Nest) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """``{key: (shape, dtype)}`` of a nest of `TensorSpec`."""
    fields = {}
    for key, leaf in flatten_with_paths(spec):
        if not isinstance(leaf, TensorSpec):
            raise TypeError(f"spec leaf {key!r} is a {type(leaf).__name__}, not a TensorSpec")
        fields[key] = (tuple(leaf.shape), leaf.dtype)
    return fields


def select_fields(structure: Nest, fields: Sequence[str]) -> tuple[list[str], Nest]:
    """The storage keys under ``fields`` and ``structure`` pruned to them.

    Args:
        structure: a row structure (leaves are their ``/``-joined keys).
        fields: keys of leaves or of subtrees (``"time_step"`` selects every leaf under it).

    Returns:
        the selected keys in storage order, and the structure keeping only the dict entries
        that hold a selected leaf (a tuple or list is kept whole when any leaf of it is).

    Raises:
        KeyError: a key of ``fields`` names no stored leaf or subtree.
    """
    keys = [key for key, _ in flatten_with_paths(structure)]
    for field in fields:
        if not any(_is_under(key, field) for key in keys):
            raise KeyError(f"no stored field {field!r}; the rows hold {keys}")

    def prune(node: Nest) -> Nest:
        if isinstance(node, dict):
            kept = {name: prune(child) for name, child in node.items()}
            kept = {name: child for name, child in kept.items() if child is not _NOTHING}
            return kept if kept else _NOTHING
        leaves = [leaf for _, leaf in flatten_with_paths(node)]
        return node if any(_is_under(leaf, f) for leaf in leaves for f in fields) else _NOTHING

    pruned = prune(structure)
    if pruned is _NOTHING:  # no fields asked for
        return [], {}
    selected = {leaf for _, leaf in flatten_with_paths(pruned)}
    return [key for key in keys if key in selected], pruned


def _is_under(key: str, field: str) -> bool:
    return key == field or key.startswith(field + "/")


_NOTHING = object()


def _fields_of(values: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """``{key: (shape, dtype)}`` of ``[T, B, *shape]`` tensors."""
    fields = {}
    for key, value in values.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"row field {key!r} is a {type(value).__name__}, not a tensor")
        if value.dim() < 2:
            raise ValueError(f"row field {key!r} has shape {list(value.shape)}, not [T, B, ...]")
        fields[key] = (tuple(value.shape[2:]), value.dtype)
    return fields


def _paths(nest: Nest) -> list[str]:
    return [key for key, _ in flatten_with_paths(nest)]


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype, device=device)``; on the CPU, memory the OS commits
    as it is written.

    ``torch.zeros`` writes every byte: a pixel replay buffer of 1M steps of 64 x 64 x 3 took
    10.8 s and 12 GB of memory before the first step was stored, most of it for steps a short
    run never reaches. NumPy's zeros come from ``calloc``, whose large blocks are pages the
    OS hands out zeroed when first touched: the same zeros, committed step by step.
    """
    if torch.device(device).type == "cpu":
        try:
            return torch.from_numpy(np.zeros(shape, numpy_dtype(dtype)))
        except TypeError:  # no NumPy counterpart (bfloat16)
            pass
    return torch.zeros(shape, dtype=dtype, device=device)
