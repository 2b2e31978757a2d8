"""`DictTensor`: named tensors that share a batch dimension (rlstructures, on TensorDict).

Follows the ``DictTensor`` of rlstructures (Denoyer et al., 2021,
https://arxiv.org/abs/2102.01010), stored in a `tensordict.TensorDict`. Keys are
paths joined by ``/``: ``"agent_state/h"`` and ``{"agent_state": {"h": ...}}`` name
the same tensor, both when building and when reading by key.

The module also holds the key and shape helpers that `TemporalDictTensor` shares;
they work on a TensorDict with any number of batch dimensions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import torch
from tensordict import TensorDict, TensorDictBase

from cadence.data.devices import same_device
from cadence.data.nest import flatten_with_paths

Values: TypeAlias = Mapping[str, Any] | TensorDictBase
"""A (possibly nested) dict of tensors, `DictTensor`s or TensorDicts; keys may hold ``/``."""

RowIndex: TypeAlias = int | slice | torch.Tensor | Sequence[int] | Sequence[bool]
"""Rows of the batch dimension: an int (kept as one row), a slice, indices or a bool mask
(a ``[B]`` tensor or list of bools, as torch reads a list of bools)."""

Device: TypeAlias = torch.device | str


class DictTensor:
    """Tensors that share a first (batch) dimension ``[B, ...]`` and one device.

    Indexing by a str returns the tensor under that key (or, for a key that
    groups others, the `DictTensor` under it: a view, so a `set` on it shows in
    ``self``); indexing by an int, slice, index
    tensor or ``[B]`` bool mask returns those rows. An int keeps its row as a
    batch of one, so every `DictTensor` has a batch dimension.

    Args:
        values: tensors ``[B, ...]`` by key, flat (``"a/b"``), nested or both.
        batch_size: ``B``; needed only when ``values`` is empty (else it is
            checked). An empty `DictTensor` without one has ``B = 0`` and takes
            the batch size of the first tensor `set` into it.
        device: the device; needed only when ``values`` is empty (else checked).

    Raises:
        ValueError: a key whose batch size or device differs from the others
            (the message names it), or keys that clash (``"a"`` and ``"a/b"``).
        TypeError: a value that is not a tensor.

    >>> dt = DictTensor({"agent_state/h": torch.zeros(3, 4), "action": {"a": torch.ones(3)}})
    >>> dt.n_elems(), sorted(dt.keys())
    (3, ['action/a', 'agent_state/h'])
    >>> dt["agent_state"]["h"].shape
    torch.Size([3, 4])
    >>> dt[1:].n_elems(), dt[0]["action/a"].shape
    (2, torch.Size([1]))
    """

    def __init__(
        self,
        values: Values | None = None,
        batch_size: int | None = None,
        device: Device | None = None,
    ) -> None:
        shape = None if batch_size is None else (batch_size,)
        self._td = tensordict_from_values({} if values is None else values, 1, shape, device)

    @classmethod
    def from_tensordict(cls, td: TensorDictBase) -> DictTensor:
        """Wraps ``td`` (batch size ``[B]``, one device) without copying its tensors."""
        if td.batch_dims != 1:
            raise ValueError(
                f"a DictTensor needs batch size [B], this TensorDict has {td.batch_size}"
            )
        return cls(td, td.batch_size[0], td.device)

    @classmethod
    def _wrap(cls, td: TensorDictBase) -> DictTensor:
        """Wraps an already valid TensorDict (internal: skips the checks)."""
        dict_tensor = cls.__new__(cls)
        dict_tensor._td = td
        return dict_tensor

    @property
    def td(self) -> TensorDictBase:
        """The underlying TensorDict (nested keys); shares storage with ``self``."""
        return self._td

    def device(self) -> torch.device:
        """The device of every tensor (a method, as in rlstructures: ``d.device()``)."""
        return self._td.device

    def n_elems(self) -> int:
        """``B``, the size of the batch dimension."""
        return self._td.batch_size[0]

    def __len__(self) -> int:
        return self.n_elems()

    def keys(self) -> list[str]:
        """The ``/``-joined keys of every tensor."""
        return list(flat_items(self._td))

    def empty(self) -> bool:
        """Whether there are no tensors (the batch size may still be non-zero)."""
        return self._td.is_empty()

    def to_dict(self) -> dict[str, torch.Tensor]:
        """The tensors by ``/``-joined key (the same tensors, not copies)."""
        return flat_items(self._td)

    def __contains__(self, key: str) -> bool:
        return get_key(self._td, key, None) is not None

    def get(self, keys: Sequence[str], clone: bool = False) -> DictTensor:
        """The tensors under ``keys`` (the same tensors, or copies with ``clone``)."""
        picked = DictTensor._wrap(select_keys(self._td, keys))
        return picked.clone() if clone else picked

    def specs(self) -> dict[str, dict[str, Any]]:
        """``{key: {"size": shape of one row, "dtype": dtype}}``, as rlstructures gives it."""
        return {k: {"size": v.shape[1:], "dtype": v.dtype} for k, v in self.to_dict().items()}

    def slice(self, index_from: int, index_to: int | None = None) -> DictTensor:
        """Rows ``index_from:index_to``.

        Raises:
            TypeError: no ``index_to``: rlstructures' ``slice(i)`` drops the batch
                dimension, which a `DictTensor` always keeps; ``d[i]`` is row ``i``.
        """
        if index_to is None:
            raise TypeError(
                f"slice({index_from}) without index_to would drop the batch dimension, "
                f"which a DictTensor keeps: use d[{index_from}] (a batch of one)"
            )
        return self[index_from:index_to]

    def index(self, index: int) -> DictTensor:
        """Raises: rlstructures' ``index(i)`` drops the batch dimension; ``d[i]`` keeps it."""
        raise TypeError(
            f"DictTensor.index({index}) would drop the batch dimension, which a DictTensor "
            f"keeps: use d[{index}] (row {index} as a batch of one)"
        )

    def __add__(self, other: DictTensor) -> DictTensor:
        """The tensors of both (same batch size and device).

        Raises:
            ValueError: a key in both, or other batch sizes or devices.
        """
        if self.empty():
            return other.clone()
        if other.empty():
            return self.clone()
        both = sorted(set(self.keys()) & set(other.keys()))
        if both:
            raise ValueError(f"both DictTensors hold the keys {both}: a sum keeps one of each")
        return DictTensor({**self.to_dict(), **other.to_dict()})

    def copy_(
        self, source: DictTensor, source_indexes: torch.Tensor, destination_indexes: torch.Tensor
    ) -> None:
        """Copies rows ``source_indexes`` of ``source`` into rows ``destination_indexes``, in place."""
        copy_rows(self._td, source.td, source_indexes, destination_indexes)

    def __getitem__(self, index: str | RowIndex) -> torch.Tensor | DictTensor:
        if isinstance(index, str):
            value = get_key(self._td, index)
            return DictTensor._wrap(value) if isinstance(value, TensorDictBase) else value
        return DictTensor._wrap(self._td[row_index(index, self.n_elems())])

    def set(self, key: str, value: torch.Tensor) -> None:
        """Stores ``value`` ``[B, ...]`` under ``key`` in place (replacing any tensor there).

        Raises:
            ValueError: ``value`` has another batch size or device, or ``key`` clashes.
        """
        if self.empty() and self.n_elems() == 0:
            self._td = tensordict_from_values({key: value}, 1)
            return
        set_key(self._td, key, value)

    def truncate_key(self, prefix: str) -> DictTensor:
        """The tensors whose key starts with ``prefix``, with ``prefix`` removed.

        ``truncate_key("agent_state/")`` is the sub-dict under ``agent_state``;
        as in rlstructures the prefix is a plain string prefix, so
        ``truncate_key("_")`` turns ``"_observation/x"`` into ``"observation/x"``.
        """
        return DictTensor._wrap(truncate_keys(self._td, prefix))

    def prepend_key(self, prefix: str) -> DictTensor:
        """The same tensors with ``prefix`` put before every key (``"observation/"``, ``"_"``)."""
        return DictTensor._wrap(prepend_keys(self._td, prefix))

    def to(self, device: Device) -> DictTensor:
        """On ``device`` (``self``'s storage when it is already there, as `torch.Tensor.to`)."""
        return DictTensor._wrap(self._td.to(device))

    def clone(self) -> DictTensor:
        return DictTensor._wrap(self._td.clone())

    def detach(self) -> DictTensor:
        return DictTensor._wrap(self._td.detach())

    def unfold(self) -> list[DictTensor]:
        """One `DictTensor` per row, each with ``n_elems() == 1`` (views, not copies)."""
        if self.n_elems() == 0:
            return []
        return [DictTensor._wrap(row) for row in self._td.split(1, 0)]

    def __iter__(self) -> Iterator[DictTensor]:
        """Iterates over rows (see `unfold`); use `keys` for the keys."""
        return iter(self.unfold())

    @staticmethod
    def cat(dict_tensors: Sequence[DictTensor]) -> DictTensor:
        """Concatenates along the batch dimension; all must have the same keys and device.

        An empty sequence gives an empty `DictTensor` (no keys, no rows), as in rlstructures.

        Raises:
            ValueError: different keys or different devices.
        """
        if len(dict_tensors) == 0:
            return DictTensor({})
        return DictTensor._wrap(cat_tensordicts([d.td for d in dict_tensors], "DictTensor"))

    def __repr__(self) -> str:
        return f"DictTensor(n_elems={self.n_elems()}, device={self.device()}, {describe(self._td)})"


def masked_tensor(tensor0: torch.Tensor, tensor1: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row ``b`` of ``tensor1`` where ``mask[b]``, else of ``tensor0`` (rlstructures' name).

    Args:
        tensor0: ``[B, ...]``, the rows where ``mask`` is unset.
        tensor1: ``[B, ...]`` of the same shape, the rows where it is set.
        mask: ``[B]``, bool or 0/1 floats.
    """
    where = mask.bool().reshape(-1, *([1] * (tensor0.dim() - 1)))
    return torch.where(where, tensor1, tensor0)


def masked_dicttensor(
    dicttensor0: DictTensor, dicttensor1: DictTensor, mask: torch.Tensor
) -> DictTensor:
    """`masked_tensor` key by key over the keys of ``dicttensor0`` (see also `reset_where`)."""
    values = {k: masked_tensor(v, dicttensor1[k], mask) for k, v in dicttensor0.to_dict().items()}
    return DictTensor(values, batch_size=dicttensor0.n_elems(), device=dicttensor0.device())


def tensordict_from_values(
    values: Values,
    batch_ndim: int,
    batch_shape: Sequence[int] | None = None,
    device: Device | None = None,
) -> TensorDict:
    """A nested TensorDict of ``values`` whose first ``batch_ndim`` dims are the batch.

    Args:
        values: tensors by key (flat ``"a/b"``, nested, or both).
        batch_ndim: how many leading dims every tensor shares (1 for ``[B]``, 2 for ``[B, T]``).
        batch_shape: the expected batch shape; the default takes the first tensor's,
            or zeros when there are no tensors.
        device: the expected device; the default takes the first tensor's, or cpu.

    Raises:
        ValueError: a key whose batch shape or device differs (naming it), clashing keys.
        TypeError: ``values`` is not a mapping, or one of its leaves is not a tensor.
    """
    items = _flatten_values(values)
    batch_shape = _common_batch_shape(items, batch_ndim, batch_shape)
    device = _common_device(items, device)
    return _build(items, batch_shape, device)


def flat_items(td: TensorDictBase) -> dict[str, torch.Tensor]:
    """The leaves of ``td`` by ``/``-joined key."""
    items = td.items(include_nested=True, leaves_only=True)
    return {_join(key): value for key, value in items}


def get_key(td: TensorDictBase, key: str, *default: Any) -> Any:
    """The tensor or sub-TensorDict of ``td`` under the ``/``-joined ``key``.

    Raises:
        KeyError: no such key and no ``default``; the message lists the keys there are.
    """
    try:
        value = td.get(_split(key), None)
    except ValueError:  # a path through a tensor, such as "reward/x"
        value = None
    if value is not None:
        return value
    if default:
        return default[0]
    raise KeyError(f"no key {key!r}; the keys are {sorted(flat_items(td))}")


def set_key(td: TensorDictBase, key: str, value: torch.Tensor) -> None:
    """Stores ``value`` in ``td`` under ``key`` in place, checking batch shape and device."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"the value for key {key!r} is a {type(value).__name__}, not a tensor")
    batch_shape = tuple(td.batch_size)
    _common_batch_shape({key: value}, len(batch_shape), batch_shape)
    _common_device({key: value}, td.device)
    items = flat_items(td)
    items[key] = value
    _nest(items)  # refuses clashes such as "a" next to "a/b" before anything changes
    td.set(_split(key), value)


def select_keys(td: TensorDictBase, keys: Sequence[str]) -> TensorDict:
    """The leaves under ``keys`` (``/``-joined; a key that groups others takes them all)."""
    if isinstance(keys, str):
        raise TypeError(f"get takes a list of keys, not the str {keys!r}: use get([{keys!r}])")
    items: dict[str, torch.Tensor] = {}
    for key in keys:
        value = get_key(td, key)
        if isinstance(value, TensorDictBase):
            items.update({f"{key}/{k}": v for k, v in flat_items(value).items()})
        else:
            items[key] = value
    return _build(items, td.batch_size, td.device)


def copy_rows(
    destination: TensorDictBase,
    source: TensorDictBase,
    source_indexes: torch.Tensor,
    destination_indexes: torch.Tensor,
) -> None:
    """``destination[destination_indexes] = source[source_indexes]`` for every key, in place.

    Raises:
        ValueError: index tensors of different sizes, or keys that differ.
    """
    if source_indexes.shape != destination_indexes.shape:
        raise ValueError(
            f"copy_ needs as many source as destination rows, got {list(source_indexes.shape)} "
            f"and {list(destination_indexes.shape)}"
        )
    keys, other = set(flat_items(destination)), set(flat_items(source))
    if keys != other:
        raise ValueError(f"copy_: the source has keys {sorted(other)}, not {sorted(keys)}")
    destination[destination_indexes] = source[source_indexes]


def truncate_keys(td: TensorDictBase, prefix: str) -> TensorDict:
    """The leaves whose key starts with ``prefix``, with ``prefix`` removed (same batch, device)."""
    items = {k[len(prefix) :]: v for k, v in flat_items(td).items() if k.startswith(prefix)}
    broken = [k for k in items if k == "" or k.startswith("/")]
    if broken:
        raise ValueError(
            f"truncate_key({prefix!r}) would leave the key {broken[0]!r}; to take the "
            f"tensors under {prefix!r} end the prefix with '/': {prefix.rstrip('/') + '/'!r}"
        )
    return _build(items, td.batch_size, td.device)


def prepend_keys(td: TensorDictBase, prefix: str) -> TensorDict:
    """``td``'s leaves with ``prefix`` before every key (same batch, device)."""
    items = {prefix + key: value for key, value in flat_items(td).items()}
    return _build(items, td.batch_size, td.device)


def cat_tensordicts(tds: Sequence[TensorDictBase], what: str) -> TensorDictBase:
    """``torch.cat`` along dim 0, after checking that keys and devices agree.

    Args:
        tds: the TensorDicts (same batch shape after dim 0).
        what: the container's name, for error messages.
    """
    if len(tds) == 0:
        raise ValueError(f"{what}.cat needs at least one {what}")
    keys = set(flat_items(tds[0]))
    for i, td in enumerate(tds[1:], start=1):
        other = set(flat_items(td))
        if other != keys:
            raise ValueError(
                f"{what}.cat: item {i} has different keys from item 0 "
                f"(only in item 0: {sorted(keys - other)}, only in item {i}: {sorted(other - keys)})"
            )
        if td.device != tds[0].device:
            raise ValueError(f"{what}.cat: item {i} is on {td.device}, item 0 on {tds[0].device}")
    return torch.cat(list(tds), 0)


def row_index(index: RowIndex, n_rows: int) -> slice | torch.Tensor:
    """``index`` as rows of a batch of ``n_rows``: an int becomes a one-row slice.

    Raises:
        IndexError: an int out of range.
        ValueError: a bool mask whose shape is not ``[n_rows]``.
        TypeError: a tuple or other index that does not select rows, a Python bool, or a
            list that mixes bools with indices.
    """
    integral = isinstance(index, torch.Tensor) and not index.dtype.is_floating_point
    if integral and index.dim() == 0 and index.dtype != torch.bool:
        index = int(index)
    if isinstance(index, bool):  # an int to Python, but no row: torch would add a dimension
        raise TypeError(f"cannot index rows with {index}: a row mask is a list of {n_rows} bools")
    if isinstance(index, int):
        if not -n_rows <= index < n_rows:
            raise IndexError(f"row {index} is out of range for a batch of {n_rows}")
        index %= n_rows
        return slice(index, index + 1)
    if isinstance(index, slice):
        return index
    if isinstance(index, (list, range)):
        index = _list_index(list(index))
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"cannot index rows with a {type(index).__name__}")
    if index.dtype == torch.bool and tuple(index.shape) != (n_rows,):
        raise ValueError(f"a row mask must have shape [{n_rows}], this one has {list(index.shape)}")
    return index


def _list_index(index: list[Any]) -> torch.Tensor:
    """A list of bools as a mask (as torch reads it), else as row indices."""
    bools = [isinstance(i, bool) for i in index]
    if index and all(bools):
        return torch.tensor(index, dtype=torch.bool)
    if any(bools):
        raise TypeError(
            f"a row index mixes bools and ints ({index[:8]}): give a mask of bools or indices"
        )
    return torch.as_tensor(index, dtype=torch.int64)


def describe(td: TensorDictBase) -> str:
    """``{key: dtype[shape], ...}`` for `__repr__`."""
    fields = ", ".join(
        f"{key}: {str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        for key, value in flat_items(td).items()
    )
    return "{" + fields + "}"


def _flatten_values(values: Values) -> dict[str, torch.Tensor]:
    if isinstance(values, DictTensor):
        values = values.td
    if isinstance(values, TensorDictBase):
        return flat_items(values)
    if not isinstance(values, Mapping):
        raise TypeError(f"expected a dict of tensors, got a {type(values).__name__}")
    items: dict[str, torch.Tensor] = {}
    for key, leaf in flatten_with_paths(dict(values)):
        leaf_items = (
            _flatten_values(leaf) if isinstance(leaf, (DictTensor, TensorDictBase)) else {"": leaf}
        )
        for sub_key, value in leaf_items.items():
            _add_item(items, f"{key}/{sub_key}" if sub_key else key, value)
    return items


def _add_item(items: dict[str, torch.Tensor], key: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"the value for key {key!r} is a {type(value).__name__}, not a tensor")
    if key in items:
        raise ValueError(f"key {key!r} is given twice (flat and nested)")
    items[key] = value


def _common_batch_shape(
    items: Mapping[str, torch.Tensor], ndim: int, expected: Sequence[int] | None
) -> tuple[int, ...]:
    source = "the batch size"
    expected = None if expected is None else tuple(expected)
    for key, value in items.items():
        if value.dim() == 0:
            raise ValueError(
                f"key {key!r} is a 0-d tensor (shape []), but every tensor here has "
                f"{ndim} batch dims: keep scalars such as a loss in a plain dict "
                f"{{{key!r}: value}}, or give value.reshape(1) for a batch of one"
            )
        if value.dim() < ndim:
            raise ValueError(
                f"key {key!r} has shape {list(value.shape)}: fewer than {ndim} batch dims"
            )
        shape = tuple(value.shape[:ndim])
        if expected is None:
            expected, source = shape, f"key {key!r}"
        elif shape != expected:
            raise ValueError(
                f"key {key!r} has batch shape {list(shape)} but {source} is {list(expected)}"
            )
    return expected if expected is not None else (0,) * ndim


def _common_device(items: Mapping[str, torch.Tensor], device: Device | None) -> torch.device:
    source = "the container"
    expected = None if device is None else torch.device(device)
    for key, value in items.items():
        if expected is None:
            expected, source = value.device, f"key {key!r}"
        elif not same_device(value.device, expected):
            raise ValueError(
                f"key {key!r} is on {value.device} but {source} is on {expected}; "
                "all tensors must be on one device"
            )
    return expected if expected is not None else torch.device("cpu")


def _build(
    items: Mapping[str, torch.Tensor], batch_shape: Sequence[int], device: torch.device
) -> TensorDict:
    return TensorDict(_nest(items), batch_size=list(batch_shape), device=device)


def _nest(items: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """A nested dict from ``/``-joined keys, refusing empty parts and clashing keys."""
    root: dict[str, Any] = {}
    for key, value in items.items():
        *parents, leaf = _split(key)
        node = root
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                prefix = "/".join(parents[: depth + 1])
                raise ValueError(f"key {prefix!r} is a tensor, so it cannot also hold {key!r}")
        if isinstance(node.get(leaf), dict):
            raise ValueError(f"key {key!r} holds other keys, so it cannot also be a tensor")
        node[leaf] = value
    return root


def _split(key: str) -> tuple[str, ...]:
    parts = tuple(key.split("/"))
    if not all(parts):
        raise ValueError(f"key {key!r} has an empty part (keys are non-empty names joined by '/')")
    return parts


def _join(key: str | tuple[str, ...]) -> str:
    return key if isinstance(key, str) else "/".join(key)
