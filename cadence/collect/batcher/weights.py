"""`WeightsPublisher`: new weights for the `Batcher`'s workers, versioned, never pickled whole.

Locally the weights go into a `WeightsBlock` of shared memory with two copies: an update
writes a copy that holds no version a worker in flight may still be loading (preferring
the one without the latest version), so an acquisition runs on the weights it started
with. With Ray, each version is put into Ray's object store once, for every actor. A
worker's message names the latest version (`message`); version 0 is what ``create_agent``
built.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from cadence.collect.batcher.shared import WeightsBlock, row_fields

_POLL_S = 0.001


class WeightsPublisher:
    """The versions of the weights the workers act with.

    Args:
        ray: whether the workers are Ray actors (the object store) rather than local
            processes (shared memory).
    """

    def __init__(self, ray: bool):
        self.version = 0  # of the latest weights (0: those create_agent built)
        self._ray = ray
        self._block: WeightsBlock | None = None
        self._copy_of: dict[int, int] = {}  # weights version -> the copy holding it
        self._ref: Any = None  # Ray: the object holding the latest version
        self._fields: list[Any] | None = None  # Ray: what every update must match

    def publish(self, weights: dict[str, torch.Tensor], loading: Callable[[], set[int]]) -> int:
        """Makes ``weights`` the next version; returns it.

        Args:
            weights: the tensors.
            loading: the versions workers in flight may still be loading, whose copies
                are left alone; while they hold both copies (workers started on two
                versions, neither begun), asked again every millisecond.
        """
        if self._ray:
            return self._put(weights)
        if self._block is None:
            self._block = WeightsBlock.for_weights(weights)
        while (copy := self.free_copy(loading())) is None:
            time.sleep(_POLL_S)  # a worker loads its weights before its first step
        self._block.write(copy, weights, self.version + 1)
        self.version += 1
        self._copy_of = {v: c for v, c in self._copy_of.items() if c != copy}
        self._copy_of[self.version] = copy
        return self.version

    def free_copy(self, loading: set[int]) -> int | None:
        """A copy that holds none of the ``loading`` versions, the one without the
        latest if both qualify; ``None`` if neither does."""
        held = {self._copy_of[v] for v in loading if v in self._copy_of}
        free = [copy for copy in (0, 1) if copy not in held]
        latest = self._copy_of.get(self.version)
        return next((c for c in free if c != latest), free[0] if free else None)

    def message(self) -> tuple[Any, ...] | None:
        """Where a worker finds the latest version (``None``: no update yet)."""
        if self._ray:
            # In a list, so that Ray passes the reference rather than what it holds.
            return None if self._ref is None else ([self._ref], self.version)
        if self._block is None:
            return None
        copy = self._copy_of[self.version]
        return (self._block.name, self._block.fields, copy, self.version)

    def close(self) -> None:
        """Frees the shared memory; idempotent."""
        if self._block is not None:
            self._block.close(unlink=True)
        self._block = None

    def _put(self, weights: dict[str, torch.Tensor]) -> int:
        """Ray: puts the new version into the object store, once for every actor."""
        import ray

        weights = {k: v.detach().cpu().clone() for k, v in weights.items()}
        fields = row_fields({k: v.unsqueeze(0) for k, v in weights.items()})
        if self._fields is not None and fields != self._fields:
            raise ValueError(
                "Batcher.update takes tensors of the same names, shapes and dtypes every time; "
                f"first {self._fields}, now {fields}"
            )
        self._fields = fields
        self._ref = ray.put(weights)
        self.version += 1
        return self.version


def acting_weights(weights: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensor entries of ``weights``: what the workers' agents act with.

    An algorithm's ``state_dict()`` also holds its optimizers' state (``optim/*``,
    nested dicts) and what ``compile=auto`` chose; workers act, they never step an
    optimizer, so these stay behind rather than be pickled at every update.

    Raises:
        TypeError: ``weights`` holds no tensor.
    """
    tensors = {k: v for k, v in weights.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise TypeError(
            "Batcher.update takes tensors by name (e.g. a state_dict()), got none among "
            f"{sorted(weights)[:8]}"
        )
    return tensors
