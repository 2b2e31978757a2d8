"""`PrioritizedSampler`: proportional prioritized replay over windows.

Schaul et al., 2016, "Prioritized Experience Replay",
https://arxiv.org/abs/1511.05952. Window start ``i`` (one ring slot) is drawn
with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` and corrected by the
importance weight ``w_i = (N * P(i))^-beta / max_j w_j``, where ``N`` is the
number of valid window starts and ``beta`` is annealed towards 1 by a schedule
that the caller advances. New steps get the largest priority seen so far, so
each is replayed at least once soon after it arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from cadence.replay.samplers import SampleIndices, num_window_starts
from cadence.replay.storage import RingStorage
from cadence.replay.sum_tree import SumTree

Schedule = Callable[[int], float]
"""Maps the number of `PrioritizedSampler.advance` steps taken to a value of beta."""


def linear_schedule(start: float, end: float, num_steps: int) -> Schedule:
    """``start`` moving linearly to ``end`` over ``num_steps`` steps, then constant.

    >>> beta = linear_schedule(0.4, 1.0, num_steps=100)
    >>> beta(0), beta(50), beta(1000)
    (0.4, 0.7, 1.0)
    """

    def schedule(step: int) -> float:
        fraction = min(step / num_steps, 1.0) if num_steps > 0 else 1.0
        return start + fraction * (end - start)

    return schedule


class PrioritizedSampler:
    """Samples window starts in proportion to ``priority ** alpha`` (a sum tree over all slots).

    A priority belongs to a window's first step; `update_priorities` takes the
    flat slot ``env_id * capacity + position`` of that step. Slots from which no
    full window fits before the write head are masked out during a draw.

    Args:
        alpha: how much prioritization is used (0 is uniform).
        beta: the importance-sampling exponent, constant or a `Schedule` of the
            number of `advance` steps (e.g. `linear_schedule(0.4, 1.0, n)`).

    >>> storage = RingStorage(num_envs=1, capacity=4)
    >>> _ = storage.add_sequence({"x": torch.zeros(4, 1)})
    >>> sampler = PrioritizedSampler(alpha=1.0, beta=1.0)
    >>> sampler.on_add(storage, torch.tensor([0]), 4)
    >>> sampler.update_priorities(torch.tensor([0, 1, 2]), torch.tensor([1.0, 0.0, 3.0]))
    >>> sorted(set(sampler.sample(storage, 64, length=2).positions[:, 0].tolist()))
    [0, 2]
    """

    def __init__(self, alpha: float = 0.6, beta: float | Schedule = 0.4) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        self._beta = beta if callable(beta) else linear_schedule(beta, beta, num_steps=0)
        self._step = 0
        self._max_priority = 1.0
        self._tree: SumTree | None = None

    @property
    def beta(self) -> float:
        """The current importance-sampling exponent."""
        return float(self._beta(self._step))

    @property
    def max_priority(self) -> float:
        """The largest priority given so far (before ``alpha``), 1.0 before any: the one
        newly added slots get."""
        return self._max_priority

    def advance(self, num_steps: int = 1) -> None:
        """Moves the beta schedule on (e.g. once per training iteration)."""
        self._step += num_steps

    def on_add(self, storage: RingStorage, env_ids: torch.Tensor, num_steps: int) -> None:
        """Gives the newly written slots the largest priority seen so far."""
        kept = min(num_steps, storage.capacity)
        times = (
            storage.num_added[env_ids].unsqueeze(1)
            - kept
            + torch.arange(kept, device=storage.device)
        )
        slots = env_ids.unsqueeze(1) * storage.capacity + times % storage.capacity
        value = torch.tensor(self._max_priority**self.alpha, dtype=torch.float64)
        self._tree_for(storage).set(slots.reshape(-1), value.expand(slots.numel()))

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Sets the priorities of window starts (e.g. ``|TD error| + epsilon``).

        Args:
            indices: ``[N]`` flat slots ``env_id * capacity + position``.
            priorities: ``[N]`` non-negative priorities (before ``alpha``).

        Raises:
            ValueError: a priority is negative or not finite, or nothing was added yet.
        """
        priorities = priorities.detach().reshape(-1).to(torch.float64)
        if not bool(torch.isfinite(priorities).all() and (priorities >= 0).all()):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities.tolist()}")
        if self._tree is None:
            raise ValueError("update_priorities before anything was added")
        if len(priorities):
            self._max_priority = max(self._max_priority, float(priorities.max()))
        indices = indices.reshape(-1).to(self._tree.values.device)
        self._tree.set(indices, priorities.to(indices.device) ** self.alpha)

    def sample(
        self,
        storage: RingStorage,
        batch_size: int,
        length: int,
        generator: torch.Generator | None = None,
    ) -> SampleIndices:
        """Stratified proportional draws (one per equal slice of the total, as Schaul et al.).

        Raises:
            ValueError: no env holds ``length`` steps yet.
        """
        num_starts = int(num_window_starts(storage, length).sum())
        tree = self._tree_for(storage)
        masked = _newest_slots(storage, length - 1)
        saved = tree.values[masked].clone()
        tree.set(masked, torch.zeros_like(saved))
        try:
            slots, probabilities = self._draw(tree, batch_size, generator)
        finally:
            tree.set(masked, saved)
        env_ids, starts = slots // storage.capacity, slots % storage.capacity
        positions = (
            starts.unsqueeze(1) + torch.arange(length, device=storage.device)
        ) % storage.capacity
        weights = (num_starts * probabilities) ** -self.beta
        return SampleIndices(env_ids, positions, (weights / weights.max()).float())

    def clear(self) -> None:
        self._max_priority = 1.0
        if self._tree is not None:
            self._tree.load_values(torch.zeros(self._tree.size))

    def state_dict(self) -> dict[str, Any]:
        """Priorities (after ``alpha``), the largest priority and the schedule position."""
        values = None if self._tree is None else self._tree.values.clone()
        return {"values": values, "max_priority": self._max_priority, "step": self._step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._max_priority = float(state["max_priority"])
        self._step = int(state["step"])
        values = state["values"]
        if values is None:
            self._tree = None
            return
        self._tree = SumTree(len(values), values.device)
        self._tree.load_values(values)

    def _tree_for(self, storage: RingStorage) -> SumTree:
        size = storage.num_envs * storage.capacity
        if self._tree is None:
            self._tree = SumTree(size, storage.device)
        elif self._tree.size != size:
            raise ValueError(f"this sampler has {self._tree.size} slots, the storage {size}")
        elif self._tree.device != storage.device:  # loaded from a cpu checkpoint
            values = self._tree.values
            self._tree = SumTree(size, storage.device)
            self._tree.load_values(values)
        return self._tree

    def _draw(
        self, tree: SumTree, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` slots and their probabilities ``[N]``."""
        total = tree.total()
        if total <= 0:
            raise ValueError("every valid window start has priority 0")
        uniform = torch.rand(batch_size, generator=generator, dtype=torch.float64)
        strata = (torch.arange(batch_size, dtype=torch.float64) + uniform) / batch_size
        strata = strata[torch.randperm(batch_size, generator=generator)]  # not sorted by slot
        slots = tree.find((strata * total).to(tree.values.device))
        return slots, tree.values[slots] / total


def _newest_slots(storage: RingStorage, count: int) -> torch.Tensor:
    """Flat slots of the ``count`` newest stored steps of every env (no full window starts there)."""
    if count <= 0:
        return torch.zeros(0, dtype=torch.int64, device=storage.device)
    back = torch.arange(1, count + 1, device=storage.device)
    times = storage.num_added.unsqueeze(1) - back
    stored = back <= storage.sizes.unsqueeze(1)
    envs = torch.arange(storage.num_envs, device=storage.device).unsqueeze(1).expand_as(times)
    return (envs * storage.capacity + times % storage.capacity)[stored]
