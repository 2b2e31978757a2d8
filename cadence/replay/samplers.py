"""Samplers: which windows of consecutive steps to read from a `RingStorage`.

A sampler picks ``[batch_size]`` windows of ``length`` consecutive steps, each
from one env's ring, in time order. A window lies wholly in stored data and
never spans the write head (which would join the newest step to the oldest);
it may cross episode boundaries, which the consumer handles through step types
and discounts (DESIGN §2).

Plug points, after Dopamine's replay: a `Sampler` is told about adds and asked
for `SampleIndices`; the storage alone holds the data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import torch

from cadence.replay.storage import RingStorage


@dataclasses.dataclass(frozen=True)
class SampleIndices:
    """Where a batch of windows lies in the storage.

    Attributes:
        env_ids: ``[N]`` int64, the env (ring) of each window.
        positions: ``[N, L]`` int64 ring positions of the window's steps, oldest first.
        weights: ``[N]`` float32 importance weights (all ones unless prioritized).
    """

    env_ids: torch.Tensor
    positions: torch.Tensor
    weights: torch.Tensor


class Sampler(Protocol):
    """Chooses windows to replay; may keep per-slot state (priorities)."""

    def on_add(self, storage: RingStorage, env_ids: torch.Tensor, num_steps: int) -> None:
        """Called after ``num_steps`` steps were added to each of ``env_ids``."""

    def sample(
        self,
        storage: RingStorage,
        batch_size: int,
        length: int,
        generator: torch.Generator | None = None,
    ) -> SampleIndices:
        """``batch_size`` windows of ``length`` consecutive stored steps."""

    def clear(self) -> None:
        """Forgets all per-slot state (the storage was cleared)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class UniformSampler:
    """Every valid window start of every env is equally likely.

    >>> storage = RingStorage(num_envs=2, capacity=4)
    >>> _ = storage.add_sequence({"x": torch.zeros(3, 2)})
    >>> UniformSampler().sample(storage, batch_size=5, length=2).positions.shape
    torch.Size([5, 2])
    """

    def on_add(self, storage: RingStorage, env_ids: torch.Tensor, num_steps: int) -> None:
        pass  # uniform sampling keeps no per-slot state

    def sample(
        self,
        storage: RingStorage,
        batch_size: int,
        length: int,
        generator: torch.Generator | None = None,
    ) -> SampleIndices:
        """Draws window starts uniformly, with replacement, from all envs together.

        Raises:
            ValueError: no env holds ``length`` steps yet.
        """
        counts = num_window_starts(storage, length)
        ends = counts.cumsum(0)
        draws = _randint(int(ends[-1]), batch_size, generator).to(storage.device)
        env_ids = torch.searchsorted(ends, draws, right=True)
        offsets = draws - (ends[env_ids] - counts[env_ids])
        weights = torch.ones(batch_size, device=storage.device)
        return SampleIndices(env_ids, window_positions(storage, env_ids, offsets, length), weights)

    def clear(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


def whole_buffer_minibatches(
    storage: RingStorage,
    mini_batch_size: int,
    mini_batch_length: int,
    generator: torch.Generator | None = None,
) -> Iterator[SampleIndices]:
    """One pass over the stored data: every window the samplers could draw, once each,
    shuffled along the batch dim with time order kept (DESIGN §5).

    A window starts at each stored step that has ``mini_batch_length - 1`` stored steps
    after it (`num_window_starts`), so windows overlap: an off-policy algorithm trains on a
    window's first step and reads the later ones as its targets (the next observation, an
    n-step return), so one pass trains every stored transition once. Cutting the rings into
    back-to-back windows instead would train only every ``mini_batch_length``-th step,
    the same ones on every pass. The windows of all envs are shuffled and yielded
    ``mini_batch_size`` at a time (the last minibatch may be smaller).

    Args:
        storage: the rings to read.
        mini_batch_size: windows per minibatch.
        mini_batch_length: steps per window, time order kept.
        generator: the source of the shuffle.

    Yields:
        `SampleIndices` with ``[mini_batch_size, mini_batch_length]`` positions.

    Raises:
        ValueError: no env holds a window of ``mini_batch_length`` steps yet.
    """
    per_env = num_window_starts(storage, mini_batch_length)
    env_ids = torch.repeat_interleave(
        torch.arange(storage.num_envs, device=storage.device), per_env
    )
    # An env's windows start at offsets 0 .. per_env - 1 from its oldest step.
    first_window = torch.cumsum(per_env, 0) - per_env
    offsets = torch.arange(len(env_ids), device=storage.device) - first_window[env_ids]
    order = torch.randperm(len(env_ids), generator=generator).to(storage.device)
    for chunk in order.split(mini_batch_size):
        positions = window_positions(storage, env_ids[chunk], offsets[chunk], mini_batch_length)
        yield SampleIndices(
            env_ids[chunk], positions, torch.ones(len(chunk), device=storage.device)
        )


def num_window_starts(storage: RingStorage, length: int) -> torch.Tensor:
    """``[num_envs]``: how many windows of ``length`` steps each env holds.

    Raises:
        ValueError: ``length`` is not positive or no env holds a window yet.
    """
    if length < 1:
        raise ValueError(f"a window needs length >= 1, got {length}")
    counts = (storage.sizes - length + 1).clamp(min=0)
    if int(counts.sum()) == 0:
        raise ValueError(
            f"no window of {length} steps is stored yet: the most any env holds is "
            f"{int(storage.sizes.max())} steps"
        )
    return counts


def window_positions(
    storage: RingStorage, env_ids: torch.Tensor, offsets: torch.Tensor, length: int
) -> torch.Tensor:
    """``[N, length]`` ring positions of windows starting ``offsets`` ``[N]`` after the oldest step."""
    steps = torch.arange(length, device=storage.device)
    return storage.positions(env_ids, offsets.unsqueeze(1) + steps)


def _randint(high: int, size: int, generator: torch.Generator | None) -> torch.Tensor:
    # Draw on the generator's device (cpu by default) so that seeding is device independent.
    return torch.randint(high, (size,), generator=generator)
