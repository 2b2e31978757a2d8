"""`TemporalDictTensor`: a batch of padded sequences ``[B, T, ...]`` with their lengths.

Follows the ``TemporalDictTensor`` of rlstructures (Denoyer et al., 2021,
https://arxiv.org/abs/2102.01010), stored in a `tensordict.TensorDict` of batch
size ``[B, T]``. Row ``b`` holds ``lengths[b]`` valid steps; the steps after them
are padding (zeros when made by `pad_steps` or `cat`). Every name rlstructures gives
its ``TemporalDictTensor`` means the same here, or raises saying what to use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, pad

from cadence.data.dict_tensor import (
    Device,
    DictTensor,
    RowIndex,
    Values,
    cat_tensordicts,
    copy_rows,
    describe,
    flat_items,
    get_key,
    prepend_keys,
    row_index,
    select_keys,
    set_key,
    tensordict_from_values,
    truncate_keys,
)


class TemporalDictTensor:
    """Tensors ``[B, T, ...]`` sharing batch and time dims, plus ``lengths`` ``[B]``.

    Indexing by a str returns the tensor ``[B, T, ...]`` under that key (or the
    `TemporalDictTensor` of the keys it groups); by an int, slice, index tensor
    or ``[B]`` bool mask it returns those rows (an int keeps a batch of one).

    Args:
        values: tensors ``[B, T, ...]`` by key, flat (``"a/b"``), nested or both;
            at least one (it fixes ``T``).
        lengths: ``[B]`` integers in ``[0, T]``, on the tensors' device;
            ``None`` means every row is ``T`` steps long.

    Raises:
        ValueError: no tensors; a key whose ``[B, T]`` or device differs (the
            message names it); ``lengths`` of the wrong shape, device or range.
        TypeError: ``lengths`` that are not integers.

    >>> tdt = TemporalDictTensor({"observation/x": torch.zeros(2, 3, 4)}, torch.tensor([3, 1]))
    >>> tdt.n_elems(), tdt.n_steps()
    (2, 3)
    >>> tdt.mask()
    tensor([[1., 1., 1.],
            [1., 0., 0.]])
    >>> tdt.masked_select()["observation/x"].shape
    torch.Size([4, 4])
    """

    def __init__(self, values: Values, lengths: torch.Tensor | Sequence[int] | None = None) -> None:
        td = tensordict_from_values(values, 2)
        if td.is_empty():
            raise ValueError("a TemporalDictTensor needs at least one tensor [B, T, ...]")
        self._td = td
        self._lengths = _checked_lengths(lengths, td)

    @classmethod
    def _wrap(cls, td: TensorDictBase, lengths: torch.Tensor) -> TemporalDictTensor:
        """Wraps an already valid TensorDict ``[B, T]`` and lengths (internal: skips the checks)."""
        tdt = cls.__new__(cls)
        tdt._td, tdt._lengths = td, lengths
        return tdt

    @property
    def td(self) -> TensorDictBase:
        """The underlying TensorDict of batch size ``[B, T]``; shares storage with ``self``."""
        return self._td

    @property
    def lengths(self) -> torch.Tensor:
        """``[B]`` int64, the number of valid steps of each row."""
        return self._lengths

    def device(self) -> torch.device:
        """The device of every tensor and of ``lengths`` (a method, as in rlstructures)."""
        return self._td.device

    def n_elems(self) -> int:
        """``B``, the size of the batch dimension."""
        return self._td.batch_size[0]

    def n_steps(self) -> int:
        """``T``, the size of the time dimension (valid steps and padding)."""
        return self._td.batch_size[1]

    def __len__(self) -> int:
        return self.n_elems()

    def keys(self) -> list[str]:
        """The ``/``-joined keys of every tensor."""
        return list(flat_items(self._td))

    def to_dict(self) -> dict[str, torch.Tensor]:
        """The tensors ``[B, T, ...]`` by ``/``-joined key (the same tensors, not copies)."""
        return flat_items(self._td)

    def __contains__(self, key: str) -> bool:
        return get_key(self._td, key, None) is not None

    def get(self, keys: Sequence[str]) -> TemporalDictTensor:
        """The tensors under ``keys``, with the same lengths."""
        return TemporalDictTensor._wrap(select_keys(self._td, keys), self._lengths)

    def specs(self) -> dict[str, dict[str, Any]]:
        """``{key: {"size": shape of one step, "dtype": dtype}}``."""
        return {k: {"size": v.shape[2:], "dtype": v.dtype} for k, v in self.to_dict().items()}

    def unfold(self) -> list[TemporalDictTensor]:
        """One `TemporalDictTensor` per row (``n_elems() == 1``; views, not copies)."""
        return [self[b] for b in range(self.n_elems())]

    def slice(self, index_from: int, index_to: int | None = None) -> TemporalDictTensor:
        """Rows ``index_from:index_to``; without ``index_to``, row ``index_from`` (a batch of one)."""
        return self[index_from] if index_to is None else self[index_from:index_to]

    def index(self, index: int) -> TemporalDictTensor:
        """Raises: rlstructures' ``index(i)`` drops the batch dimension; ``tdt[i]`` keeps it."""
        raise TypeError(
            f"TemporalDictTensor.index({index}) would drop the batch dimension, which is "
            f"always kept here: use tdt[{index}] (row {index} as a batch of one)"
        )

    def __getitem__(self, index: str | RowIndex) -> torch.Tensor | TemporalDictTensor:
        if isinstance(index, str):
            value = get_key(self._td, index)
            if isinstance(value, TensorDictBase):
                return TemporalDictTensor._wrap(value, self._lengths)
            return value
        rows = row_index(index, self.n_elems())
        return TemporalDictTensor._wrap(self._td[rows], self._lengths[rows])

    def set(self, key: str, value: torch.Tensor) -> None:
        """Stores ``value`` ``[B, T, ...]`` under ``key`` in place.

        Raises:
            ValueError: ``value`` has another ``[B, T]`` or device, or ``key`` clashes.
        """
        set_key(self._td, key, value)

    def mask(self) -> torch.Tensor:
        """``[B, T]`` float32, 1.0 where ``t < lengths[b]`` (the valid steps), else 0.0.

        Floats, as in rlstructures, so ``loss * mask`` and ``1.0 - mask`` work; index with
        ``mask().bool()``.
        """
        return self._valid().float()

    def _valid(self) -> torch.Tensor:
        steps = torch.arange(self.n_steps(), device=self._lengths.device)
        return steps.unsqueeze(0) < self._lengths.unsqueeze(1)

    def full(self) -> bool:
        """Whether every row is ``T`` steps long (there is no padding)."""
        return bool((self._lengths == self.n_steps()).all())

    def temporal_index(self, t: int | torch.Tensor) -> DictTensor:
        """The step ``t`` of every row, as a `DictTensor` ``[B, ...]``.

        Args:
            t: one step for all rows, or ``[B]`` int64, a step per row. Steps past
                a row's length give its padding.
        """
        if isinstance(t, torch.Tensor) and t.dim() == 1:
            rows = torch.arange(self.n_elems(), device=t.device)
            return DictTensor._wrap(self._td[rows, t])
        return DictTensor._wrap(self._td[:, int(t)])

    def temporal_multi_index(self, index_t: torch.Tensor) -> DictTensor:
        """Step ``index_t[b]`` of row ``b``: `temporal_index` with a ``[B]`` int64 tensor."""
        return self.temporal_index(index_t)

    def masked_temporal_index(self, index_t: int) -> tuple[DictTensor, torch.Tensor]:
        """Step ``index_t`` of the rows that last that long, and those rows' indices.

        Returns:
            ``[B', ...]`` the step of the ``B'`` rows with ``index_t < lengths[b]``, and
            ``[B']`` int64 their indices in ``self``.
        """
        rows = torch.nonzero(self._lengths > index_t).squeeze(1)
        return DictTensor._wrap(self._td[rows, index_t]), rows

    def temporal_slice(self, start: int | None, stop: int | None) -> TemporalDictTensor:
        """Steps ``start:stop`` of every row, lengths cut to the steps that remain valid.

        A row of length ``l`` keeps ``clamp(l - start, 0, stop - start)`` valid steps.
        """
        start, stop, _ = slice(start, stop).indices(self.n_steps())
        stop = max(start, stop)
        lengths = (self._lengths - start).clamp(0, stop - start)
        return TemporalDictTensor._wrap(self._td[:, start:stop], lengths)

    def shorten(self) -> TemporalDictTensor:
        """Trimmed to ``T = lengths.max()``, the fewest steps that keep every valid step."""
        longest = int(self._lengths.max()) if self.n_elems() else 0
        return self.temporal_slice(0, longest)

    def pad_steps(self, n_steps: int) -> TemporalDictTensor:
        """Padded with zeros along time to ``T = n_steps``; the lengths stay.

        Raises:
            ValueError: ``n_steps`` is below the current ``T``.
        """
        extra = n_steps - self.n_steps()
        if extra < 0:
            raise ValueError(f"cannot pad {self.n_steps()} steps to {n_steps} (use shorten)")
        if extra == 0:
            return self
        return TemporalDictTensor._wrap(pad(self._td, [0, 0, 0, extra]), self._lengths)

    def expand(self, new_batch_size: int) -> TemporalDictTensor:
        """Padded with rows of zeros, each of length 0, to ``B = new_batch_size`` (as in
        rlstructures; `pad_steps` pads the time axis).

        Raises:
            ValueError: ``new_batch_size`` is below the current ``B``.
        """
        extra = new_batch_size - self.n_elems()
        if extra < 0:
            raise ValueError(f"cannot expand {self.n_elems()} rows to {new_batch_size}")
        lengths = torch.cat([self._lengths, self._lengths.new_zeros(extra)])
        return TemporalDictTensor._wrap(pad(self._td, [0, extra, 0, 0]), lengths)

    def copy_(
        self,
        source: TemporalDictTensor,
        source_indexes: torch.Tensor,
        destination_indexes: torch.Tensor,
    ) -> None:
        """Copies rows ``source_indexes`` of ``source`` (their first ``source.lengths.max()``
        steps, and their lengths) into rows ``destination_indexes``, in place."""
        steps = int(source.lengths.max()) if source.n_elems() else 0
        copy_rows(self._td[:, :steps], source.td[:, :steps], source_indexes, destination_indexes)
        self._lengths[destination_indexes] = source.lengths[source_indexes]

    def masked_select(self, mask: torch.Tensor | None = None) -> DictTensor:
        """The steps where ``mask`` ``[B, T]`` is set, flattened row by row into a `DictTensor`.

        Args:
            mask: ``[B, T]`` bool, or 0/1 floats as `mask` gives; the default selects
                every valid step.

        Returns:
            ``[N, ...]`` per key, ``N = mask.sum()``, in order of row then step.
        """
        if mask is None:
            return DictTensor._wrap(self._td[self._valid()])
        if tuple(mask.shape) != tuple(self._td.batch_size):
            raise ValueError(
                f"the mask must be {list(self._td.batch_size)}, got {list(mask.shape)}"
            )
        return DictTensor._wrap(self._td[mask.bool()])

    def truncate_key(self, prefix: str) -> TemporalDictTensor:
        """The tensors whose key starts with ``prefix``, with it removed (see `DictTensor`)."""
        return TemporalDictTensor._wrap(truncate_keys(self._td, prefix), self._lengths)

    def prepend_key(self, prefix: str) -> TemporalDictTensor:
        """The same tensors with ``prefix`` put before every key."""
        return TemporalDictTensor._wrap(prepend_keys(self._td, prefix), self._lengths)

    def to(self, device: Device) -> TemporalDictTensor:
        return TemporalDictTensor._wrap(self._td.to(device), self._lengths.to(device))

    def clone(self) -> TemporalDictTensor:
        return TemporalDictTensor._wrap(self._td.clone(), self._lengths.clone())

    def detach(self) -> TemporalDictTensor:
        return TemporalDictTensor._wrap(self._td.detach(), self._lengths)

    @staticmethod
    def cat(tensors: Sequence[TemporalDictTensor]) -> TemporalDictTensor:
        """Concatenates along the batch dim, padding each with zeros to the longest ``T``.

        Raises:
            ValueError: an empty sequence (it gives no keys nor ``T``), different keys or
                different devices.
        """
        if len(tensors) == 0:
            raise ValueError(
                "TemporalDictTensor.cat needs at least one TemporalDictTensor (an empty "
                "one has no keys to hold; DictTensor.cat([]) gives an empty DictTensor)"
            )
        n_steps = max(t.n_steps() for t in tensors)
        tds = [t.pad_steps(n_steps).td for t in tensors]
        td = cat_tensordicts(tds, "TemporalDictTensor")
        return TemporalDictTensor._wrap(td, torch.cat([t.lengths for t in tensors]))

    def __repr__(self) -> str:
        return (
            f"TemporalDictTensor(n_elems={self.n_elems()}, n_steps={self.n_steps()}, "
            f"device={self.device()}, lengths={self._lengths.tolist()}, {describe(self._td)})"
        )


def _checked_lengths(
    lengths: torch.Tensor | Sequence[int] | None, td: TensorDictBase
) -> torch.Tensor:
    """``lengths`` as int64 ``[B]`` on ``td``'s device, after checking shape, device and range."""
    n_elems, n_steps = td.batch_size
    if lengths is None:
        return torch.full((n_elems,), n_steps, dtype=torch.int64, device=td.device)
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device=td.device)
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers, got {lengths.dtype}")
    if tuple(lengths.shape) != (n_elems,):
        raise ValueError(f"lengths must have shape [{n_elems}], got {list(lengths.shape)}")
    if lengths.device != td.device:
        raise ValueError(f"lengths are on {lengths.device} but the tensors on {td.device}")
    lengths = lengths.to(torch.int64)
    if n_elems and not bool(((lengths >= 0) & (lengths <= n_steps)).all()):
        raise ValueError(f"lengths must lie in [0, {n_steps}] (T), got {lengths.tolist()}")
    return lengths
