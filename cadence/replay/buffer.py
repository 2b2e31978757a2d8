"""`ReplayBuffer`: storage, sampler and episode index composed behind one facade.

The off-policy scheme (DESIGN §5) puts each raw unroll in with `add_experience`
and reads ``[mini_batch_size, mini_batch_length]`` windows back with `sample`
(or `sample_indices` now and `read` later) or, for ``whole_replay_buffer_training``,
with `iterate_minibatches`; each can read only the fields its consumer uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Protocol

import torch

from cadence.data.experience import Experience
from cadence.data.nest import Nest, flatten
from cadence.data.time_step import StepType, TimeStep
from cadence.replay.episode_index import EpisodeIndex
from cadence.replay.rows import STEP_TYPE_KEY, experience_rows, time_step_from_rows
from cadence.replay.samplers import (
    SampleIndices,
    Sampler,
    UniformSampler,
    whole_buffer_minibatches,
)
from cadence.replay.storage import RingStorage


@dataclasses.dataclass(frozen=True)
class ReplaySample:
    """A batch of windows read from a `ReplayBuffer`.

    Attributes:
        steps: the row nest with leaves ``[N, L, ...]``, time order kept; only the fields
            asked for when the sample was read with ``fields`` (then `time_step`, `action`
            and `info` work only if their fields were read).
        env_ids: ``[N]`` the env each window comes from.
        positions: ``[N, L]`` ring positions of the window's steps.
        indices: ``[N]`` flat slot ``env_id * capacity + position`` of each window's
            first step: what `ReplayBuffer.update_priorities` takes.
        weights: ``[N]`` importance weights (ones unless prioritized).
    """

    steps: Nest
    env_ids: torch.Tensor
    positions: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor

    @property
    def time_step(self) -> TimeStep:
        """The ``[N, L]`` time steps (rows made by `experience_rows`)."""
        return time_step_from_rows(self.steps)

    @property
    def action(self) -> Nest:
        """The ``[N, L]`` actions taken at those time steps."""
        return self.steps["action"]

    @property
    def info(self) -> Nest:
        """The ``[N, L]`` rollout infos stored with them."""
        return self.steps["info"]


class StorageObserver(Protocol):
    """Follows a buffer's storage (e.g. `cadence.replay.persistence.ChunkWriter`)."""

    def on_add(self, storage: RingStorage, env_ids: torch.Tensor, num_steps: int) -> None:
        """Called after ``num_steps`` steps were added to each of ``env_ids``."""

    def on_reset(self, storage: RingStorage) -> None:
        """Called after the contents were replaced wholesale (`clear`, `load_state_dict`)."""

    def on_overwrite(
        self, storage: RingStorage, env_ids: torch.Tensor, times: torch.Tensor
    ) -> None:
        """Called after the stored steps at ``times`` (``[N]``) of ``env_ids`` changed in place."""


class ReplayBuffer:
    """Raw experience of ``num_envs`` environments, ``capacity`` steps each.

    Args:
        num_envs: environments of the batch (one ring each).
        capacity: steps kept per environment.
        sampler: chooses windows; `UniformSampler` by default.
        device: where the rings live.
        spec: optional nest of `TensorSpec` for one row; else fixed by the first add.
        step_type_key: key of the step type in a row, for the episode index.
        observer: optional follower of every add, e.g. a background `ChunkWriter`.

    >>> buffer = ReplayBuffer(num_envs=2, capacity=100)
    >>> buffer.add({"time_step": {"step_type": torch.zeros(2, dtype=torch.int64)},
    ...             "action": torch.ones(2, 3)})
    >>> buffer.add({"time_step": {"step_type": torch.ones(2, dtype=torch.int64)},
    ...             "action": torch.ones(2, 3)})
    >>> batch = buffer.sample(batch_size=4, length=2)
    >>> batch.action.shape, buffer.num_steps
    (torch.Size([4, 2, 3]), 4)
    """

    def __init__(
        self,
        num_envs: int,
        capacity: int,
        sampler: Sampler | None = None,
        device: torch.device | str = "cpu",
        spec: Nest | None = None,
        step_type_key: str = STEP_TYPE_KEY,
        observer: StorageObserver | None = None,
    ) -> None:
        self.storage = RingStorage(num_envs, capacity, device, spec)
        self.sampler: Sampler = UniformSampler() if sampler is None else sampler
        self.step_type_key = step_type_key
        self.observer = observer
        self._episode_index: EpisodeIndex | None = None
        self._make_episode_index()

    @property
    def num_envs(self) -> int:
        return self.storage.num_envs

    @property
    def capacity(self) -> int:
        """Steps kept per environment."""
        return self.storage.capacity

    @property
    def num_steps(self) -> int:
        """Steps currently stored, all envs together."""
        return self.storage.num_steps

    @property
    def episode_index(self) -> EpisodeIndex:
        """Episode bounds of the stored steps.

        Raises:
            RuntimeError: the rows have no ``step_type_key`` field.
        """
        if self._episode_index is None:
            raise RuntimeError(
                f"the rows have no {self.step_type_key!r} field to index episodes by"
            )
        return self._episode_index

    def add(self, rows: Nest, env_ids: torch.Tensor | None = None) -> None:
        """Adds one step per env: leaves ``[B, ...]``, row ``i`` to env ``env_ids[i]`` (default all)."""
        env_ids = self.storage.add(rows, env_ids)
        self._after_add(env_ids, 1)

    def add_sequence(self, rows: Nest, env_ids: torch.Tensor | None = None) -> None:
        """Adds ``T`` consecutive steps per env: leaves ``[T, B, ...]``."""
        env_ids = self.storage.add_sequence(rows, env_ids)
        self._after_add(env_ids, _leading_dim(rows))

    def add_experience(self, experience: Experience, with_state: bool = True) -> None:
        """Adds an unroll's ``T`` raw steps of every env (see `experience_rows`)."""
        self.add_sequence(experience_rows(experience, with_state))

    def sample(
        self,
        batch_size: int,
        length: int = 1,
        generator: torch.Generator | None = None,
        fields: Collection[str] | None = None,
    ) -> ReplaySample:
        """``batch_size`` windows of ``length`` consecutive steps, chosen by the sampler.

        Args:
            batch_size: windows N.
            length: steps per window L.
            generator: the random source of the draws (torch's default one if None).
            fields: the row keys to read (see `RingStorage.gather`); None reads all.

        Raises:
            ValueError: no env holds ``length`` steps yet.
        """
        return self.read(self.sample_indices(batch_size, length, generator), fields)

    def sample_indices(
        self, batch_size: int, length: int = 1, generator: torch.Generator | None = None
    ) -> SampleIndices:
        """Where ``batch_size`` sampled windows lie, without reading them (see `read`).

        Raises:
            ValueError: no env holds ``length`` steps yet.
        """
        return self.sampler.sample(self.storage, batch_size, length, generator)

    def read(self, indices: SampleIndices, fields: Collection[str] | None = None) -> ReplaySample:
        """The windows at ``indices``: all fields, or only the row keys in ``fields``."""
        steps = self.storage.gather(indices.env_ids, indices.positions, fields)
        flat = indices.env_ids * self.capacity + indices.positions[:, 0]
        return ReplaySample(steps, indices.env_ids, indices.positions, flat, indices.weights)

    def iterate_minibatches(
        self,
        mini_batch_size: int,
        mini_batch_length: int,
        generator: torch.Generator | None = None,
        fields: Collection[str] | None = None,
    ) -> Iterator[ReplaySample]:
        """One shuffled pass over the whole buffer (see `whole_buffer_minibatches`)."""
        for indices in whole_buffer_minibatches(
            self.storage, mini_batch_size, mini_batch_length, generator
        ):
            yield self.read(indices, fields)

    def gather_all(self) -> Nest:
        """Everything stored, ``[num_envs, size, ...]`` oldest first.

        Raises:
            ValueError: the envs hold different numbers of steps.
        """
        sizes = self.storage.sizes
        if not bool((sizes == sizes[0]).all()):
            raise ValueError(
                f"gather_all needs equally filled rings, the sizes are {sizes.tolist()}"
            )
        env_ids = torch.arange(self.num_envs, device=self.storage.device)
        offsets = torch.arange(int(sizes[0]), device=self.storage.device).expand(self.num_envs, -1)
        return self.storage.gather(env_ids, self.storage.positions(env_ids, offsets))

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Passes new priorities (``[N]`` each) to a prioritized sampler.

        Raises:
            TypeError: the sampler keeps no priorities.
        """
        update = getattr(self.sampler, "update_priorities", None)
        if update is None:
            raise TypeError(f"a {type(self.sampler).__name__} keeps no priorities")
        update(indices, priorities)

    def end_episodes(self, discount_key: str = "time_step/discount") -> None:
        """Ends each env's episode in progress at its newest stored step: LAST, discount 1.

        For episodes that were cut from outside (a resume whose environments had to
        start new episodes): the step before the next FIRST becomes a time-limit
        truncation, so no window bootstraps across the cut. Envs without steps, or whose
        newest step is already LAST, are left as they are.
        """
        storage = self.storage
        if not storage.initialized or self.step_type_key not in storage.fields:
            return
        env_ids = torch.nonzero(storage.num_added > 0).flatten()
        if len(env_ids) == 0:
            return
        positions = (storage.num_added[env_ids] - 1) % storage.capacity
        step_type = storage.fields[self.step_type_key]
        open_ = step_type[env_ids, positions] != int(StepType.LAST)
        env_ids, positions = env_ids[open_], positions[open_]
        if len(env_ids) == 0:
            return
        step_type[env_ids, positions] = int(StepType.LAST)
        if discount_key in storage.fields:
            storage.fields[discount_key][env_ids, positions] = 1
        if self._episode_index is not None:
            self._episode_index.rebuild()
        if self.observer is not None:
            self.observer.on_overwrite(storage, env_ids, storage.num_added[env_ids] - 1)

    def clear(self) -> None:
        """Forgets every stored step."""
        self.storage.clear()
        self.sampler.clear()
        if self._episode_index is not None:
            self._episode_index.clear()
        if self.observer is not None:
            self.observer.on_reset(self.storage)

    def state_dict(self) -> dict[str, Any]:
        """Storage contents and counts, and sampler state (the episode index is rebuilt)."""
        return {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any], copy: bool = True) -> None:
        """Restores a `state_dict` (``copy=False``: see `RingStorage.load_state_dict`)."""
        self.storage.load_state_dict(state["storage"], copy=copy)
        self.sampler.load_state_dict(state["sampler"])
        self._make_episode_index()
        if self._episode_index is not None:
            self._episode_index.rebuild()
        if self.observer is not None:
            self.observer.on_reset(self.storage)

    def _after_add(self, env_ids: torch.Tensor, num_steps: int) -> None:
        if self._episode_index is None:
            self._make_episode_index()
        if self._episode_index is not None:
            self._episode_index.update(env_ids, num_steps)
        self.sampler.on_add(self.storage, env_ids, num_steps)
        if self.observer is not None:
            self.observer.on_add(self.storage, env_ids, num_steps)

    def _make_episode_index(self) -> None:
        if self.storage.initialized and self.step_type_key in self.storage.fields:
            self._episode_index = EpisodeIndex(self.storage, self.step_type_key)


def _leading_dim(rows: Nest) -> int:
    leaves = flatten(rows)
    return int(leaves[0].shape[0]) if leaves else 0
