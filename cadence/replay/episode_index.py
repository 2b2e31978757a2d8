"""`EpisodeIndex`: where each stored step's episode starts and ends in its ring.

Hindsight relabelling samples a *future* step of the same episode and frame
stacking reads *earlier* frames of the same episode; both need episode bounds
per stored step, in O(1) per query.

The index keeps, per ring slot, the times (see `cadence.replay.storage`) of
the first and last step of the slot's episode. An episode begins at a FIRST
(or right after a LAST, so a stream that skips the FIRST still splits) and ends
at a LAST (or right before the next FIRST). The end of the episode still being
collected is unknown. Starts that the ring has overwritten are reported as the
oldest stored step of the episode, so a query never points at foreign data.
"""

from __future__ import annotations

import torch

from cadence.data.time_step import StepType
from cadence.replay.storage import RingStorage

_UNKNOWN = -1


class EpisodeIndex:
    """Episode bounds of every step of ``storage``, updated as steps are added.

    Args:
        storage: the rings to index; call `update` after each add to it.
        step_type_key: the ``/``-joined key of the ``[B]`` step type in a row.

    >>> storage = RingStorage(num_envs=1, capacity=8)
    >>> index = EpisodeIndex(storage, step_type_key="step_type")
    >>> _ = storage.add_sequence({"step_type": torch.tensor([[0], [1], [2], [0], [1]])})
    >>> index.update(torch.tensor([0]), 5)
    >>> envs, positions = torch.tensor([0, 0]), torch.tensor([1, 4])
    >>> index.episode_start(envs, positions).tolist(), index.episode_end(envs, positions).tolist()
    ([0, 3], [2, -1])
    """

    def __init__(self, storage: RingStorage, step_type_key: str = "time_step/step_type") -> None:
        self.storage = storage
        self.step_type_key = step_type_key
        shape, device = (storage.num_envs, storage.capacity), storage.device
        self._start = torch.zeros(shape, dtype=torch.int64, device=device)
        self._end = torch.full(shape, _UNKNOWN, dtype=torch.int64, device=device)
        # Time at which the episode that the next non-FIRST step joins began.
        self._open_start = torch.zeros(storage.num_envs, dtype=torch.int64, device=device)

    # ----------------------------------------------------------------- queries

    def episode_start(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Ring positions ``[N, ...]`` of the oldest stored step of each step's episode.

        Args:
            env_ids: ``[N]`` env indices.
            positions: ``[N, ...]`` ring positions of stored steps.
        """
        return self._start_times(env_ids, positions) % self.storage.capacity

    def episode_end(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Ring positions ``[N, ...]`` of each step's episode end, ``-1`` while not yet known."""
        end = self._end[self._rows(env_ids, positions), positions]
        return torch.where(end == _UNKNOWN, _UNKNOWN, end % self.storage.capacity)

    def steps_from_episode_start(
        self, env_ids: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """``[N, ...]``: how many stored steps of the same episode precede each step.

        Frame stacking may read this many earlier frames without crossing a FIRST.
        """
        times = self.storage.times(env_ids, positions)
        return times - self._start_times(env_ids, positions)

    def steps_to_episode_end(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[N, ...]``: how many stored steps of the same episode follow each step.

        Counts up to the episode's LAST when known, else up to the newest stored
        step (the episode is still being collected). Hindsight relabelling draws
        its future goal ``k`` steps ahead with ``0 <= k <= steps_to_episode_end``.
        """
        rows = self._rows(env_ids, positions)
        times = self.storage.times(env_ids, positions)
        end = self._end[rows, positions]
        newest = self.storage.num_added[rows] - 1
        return torch.where(end == _UNKNOWN, newest, end) - times

    # ----------------------------------------------------------------- updates

    def update(self, env_ids: torch.Tensor, num_steps: int) -> None:
        """Indexes the ``num_steps`` steps just added to each env of ``env_ids``.

        Args:
            env_ids: ``[B]`` the envs the last add wrote (all envs when None).
            num_steps: ``T``, the steps added to each of them.
        """
        kept = min(num_steps, self.storage.capacity)
        newest = self.storage.num_added[env_ids]
        times = newest.unsqueeze(1) - kept + torch.arange(kept, device=newest.device)
        step_type = self._step_types(env_ids, times)
        start, end = _episode_bounds(step_type, times, self._open_start[env_ids])
        self._close_open_episodes(env_ids, times[:, 0], step_type[:, 0], end[:, 0])
        self._write(env_ids, times, start, end)
        self._open_start[env_ids] = _next_open_start(step_type[:, -1], times[:, -1], start[:, -1])

    def rebuild(self) -> None:
        """Recomputes the whole index from the stored step types (after a load)."""
        storage = self.storage
        self._end.fill_(_UNKNOWN)
        self._open_start = storage.num_added.clone()  # an empty ring opens at its next step
        longest = int(storage.sizes.max())
        if longest == 0:
            return
        env_ids = torch.arange(storage.num_envs, device=storage.device)
        # Left-pad shorter rings so every row ends at its newest step.
        times = (
            storage.num_added.unsqueeze(1) - longest + torch.arange(longest, device=storage.device)
        )
        oldest = (storage.num_added - storage.sizes).unsqueeze(1)
        stored = times >= oldest
        times = torch.maximum(times, oldest)  # padding repeats the oldest step; never written
        step_type = self._step_types(env_ids, times)
        start, end = _episode_bounds(step_type, times, oldest.squeeze(1), stored)
        self._write(env_ids, times, start, end, stored)
        has_steps = storage.sizes > 0
        open_start = _next_open_start(step_type[:, -1], times[:, -1], start[:, -1])
        self._open_start = torch.where(has_steps, open_start, self._open_start)

    def clear(self) -> None:
        """Forgets every episode (after the storage was cleared)."""
        self._end.fill_(_UNKNOWN)
        self._open_start.zero_()

    # ---------------------------------------------------------------- internal

    def _rows(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return env_ids.view(-1, *([1] * (positions.dim() - 1))).expand_as(positions)

    def _start_times(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = self._rows(env_ids, positions)
        oldest = (self.storage.num_added - self.storage.sizes)[rows]
        return torch.maximum(self._start[rows, positions], oldest)

    def _step_types(self, env_ids: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        ring = self.storage.fields[self.step_type_key]
        return ring[env_ids.unsqueeze(1), times % self.storage.capacity]

    def _write(
        self,
        env_ids: torch.Tensor,
        times: torch.Tensor,
        start: torch.Tensor,
        end: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> None:
        rows = env_ids.unsqueeze(1).expand_as(times)
        positions = times % self.storage.capacity
        if mask is not None:
            rows, positions, start, end = rows[mask], positions[mask], start[mask], end[mask]
        self._start[rows, positions] = start
        self._end[rows, positions] = end

    def _close_open_episodes(
        self,
        env_ids: torch.Tensor,
        first_time: torch.Tensor,
        first_type: torch.Tensor,
        first_end: torch.Tensor,
    ) -> None:
        """Sets the end of the older steps of episodes that the new steps closed.

        Those steps were added by earlier calls with an unknown end; the new
        steps end their episode either by starting a new one (a FIRST) or by
        reaching its LAST.
        """
        is_first = first_type == StepType.FIRST
        close_time = torch.where(is_first, first_time - 1, first_end)
        oldest_kept = self.storage.num_added[env_ids] - self.storage.capacity
        low = torch.maximum(self._open_start[env_ids], oldest_kept)
        count = (first_time - low).clamp(min=0)
        count = torch.where(is_first | (first_end != _UNKNOWN), count, 0)
        longest = int(count.max()) if len(count) else 0
        if longest == 0:
            return
        offsets = torch.arange(longest, device=count.device)
        times = low.unsqueeze(1) + offsets
        mask = offsets < count.unsqueeze(1)
        rows = env_ids.unsqueeze(1).expand_as(times)
        self._end[rows[mask], times[mask] % self.storage.capacity] = close_time.unsqueeze(
            1
        ).expand_as(times)[mask]


def _episode_bounds(
    step_type: torch.Tensor,
    times: torch.Tensor,
    open_start: torch.Tensor,
    stored: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end times of each step's episode within a segment of steps.

    Args:
        step_type: ``[B, T]`` step types of consecutive steps of each env.
        times: ``[B, T]`` their times.
        open_start: ``[B]`` start time of the episode a leading non-FIRST step joins.
        stored: ``[B, T]`` which steps are real (left padding is not), or None.

    Returns:
        ``(start, end)``, each ``[B, T]`` int64; ``end`` is ``-1`` where the
        segment does not show the episode's end.
    """
    is_first = step_type == StepType.FIRST
    is_last = step_type == StepType.LAST
    if stored is not None:
        is_first, is_last = is_first & stored, is_last & stored
    after_last = torch.zeros_like(is_last)
    after_last[:, 1:] = is_last[:, :-1]
    begins = torch.where(is_first | after_last, times, -1)
    start = torch.maximum(begins.cummax(dim=1).values, open_start.unsqueeze(1))
    before_first = torch.zeros_like(is_first)
    before_first[:, :-1] = is_first[:, 1:]
    never = torch.iinfo(torch.int64).max
    closes = torch.where(is_last | before_first, times, never)
    end = closes.flip(1).cummin(dim=1).values.flip(1)
    return start, torch.where(end == never, _UNKNOWN, end)


def _next_open_start(
    last_type: torch.Tensor, last_time: torch.Tensor, last_start: torch.Tensor
) -> torch.Tensor:
    """``[B]``: the start of the episode the next step joins (a new one after a LAST)."""
    return torch.where(last_type == StepType.LAST, last_time + 1, last_start)
