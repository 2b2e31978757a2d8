"""`WeightsPublisher`: new weights for the `Batcher`'s workers, versioned, never pickled whole.

Locally the weights go into a `WeightsBlock` of shared memory with two copies: an update
writes the copy that neither the acquisition in flight nor the latest version uses, so
an acquisition runs on the weights it started with. With Ray, each version is put into
Ray's object store once, for every actor. A worker's message names the latest version
(`message`); version 0 is what ``create_agent`` built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cadence.collect.batcher.shared import WeightsBlock, row_fields


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

    def publish(self, weights: dict[str, torch.Tensor], in_flight: int | None) -> int:
        """Makes ``weights`` the next version; ``in_flight``: the version an acquisition in
        flight runs on (its copy is left alone), if any. Returns the new version."""
        if self._ray:
            return self._put(weights)
        if self._block is None:
            self._block = WeightsBlock.for_weights(weights)
        in_use = set()
        if in_flight is not None and in_flight in self._copy_of:
            in_use.add(self._copy_of[in_flight])
        if self.version in self._copy_of and not in_use:
            in_use.add(self._copy_of[self.version])
        copy = 0 if 0 not in in_use else 1
        self._block.write(copy, weights, self.version + 1)
        self.version += 1
        self._copy_of = {v: c for v, c in self._copy_of.items() if c != copy}
        self._copy_of[self.version] = copy
        return self.version

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
