"""`EpisodeIndex`: episode start and end of every stored step, against a hand-made step-type
stream and a brute-force reference, through wrap-around, partial adds and a rebuild."""

from __future__ import annotations

import random

import pytest
import torch

from cadence.data.time_step import StepType
from cadence.replay.episode_index import EpisodeIndex
from cadence.replay.storage import RingStorage

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def _indexed(num_envs: int, capacity: int) -> tuple[RingStorage, EpisodeIndex]:
    storage = RingStorage(num_envs=num_envs, capacity=capacity)
    storage.add({"step_type": torch.zeros(num_envs, dtype=torch.int64)})  # fixes the fields
    storage.clear()
    return storage, EpisodeIndex(storage, step_type_key="step_type")


def _add(storage: RingStorage, index: EpisodeIndex, env: int, step_types: list[int]) -> None:
    rows = {"step_type": torch.tensor(step_types, dtype=torch.int64).view(-1, 1)}
    env_ids = storage.add_sequence(rows, env_ids=torch.tensor([env]))
    index.update(env_ids, len(step_types))


def _bounds(storage: RingStorage, index: EpisodeIndex, env: int) -> list[tuple[int, int, int]]:
    """``(time, start time, end time or -1)`` of env ``env``'s stored steps, oldest first."""
    size = int(storage.sizes[env])
    env_ids = torch.tensor([env])
    positions = storage.positions(env_ids, torch.arange(size).unsqueeze(0))
    times = storage.times(env_ids, positions)[0]
    before = index.steps_from_episode_start(env_ids, positions)[0]
    after = index.steps_to_episode_end(env_ids, positions)[0]
    start = index.episode_start(env_ids, positions)[0]
    end = index.episode_end(env_ids, positions)[0]
    capacity = storage.capacity
    assert torch.equal(start, (times - before) % capacity)
    known = end >= 0
    assert torch.equal(end[known], ((times + after) % capacity)[known])
    newest = int(storage.num_added[env]) - 1
    assert bool((times + after)[~known].eq(newest).all()), "an open episode runs to the newest step"
    return [
        (t, t - b, t + a if k else -1)
        for t, b, a, k in zip(
            times.tolist(), before.tolist(), after.tolist(), known.tolist(), strict=True
        )
    ]


def _reference(step_types: list[int], capacity: int) -> list[tuple[int, int, int]]:
    """Brute force over the whole history: an episode starts at a FIRST or after a LAST and
    ends at a LAST or before a FIRST; an overwritten start is the oldest stored step."""
    count = len(step_types)
    oldest = max(0, count - capacity)
    starts, start = [], 0
    for t, step_type in enumerate(step_types):
        if step_type == F or (t > 0 and step_types[t - 1] == L):
            start = t
        starts.append(start)
    result = []
    for t in range(oldest, count):
        end = next(
            (
                u
                for u in range(t, count)
                if step_types[u] == L or (u + 1 < count and step_types[u + 1] == F)
            ),
            -1,
        )
        result.append((t, max(starts[t], oldest), end))
    return result


def test_a_hand_made_stream_with_wrap_around():
    storage, index = _indexed(num_envs=1, capacity=6)
    #            t: 0  1  2  3  4  5  6  7
    _add(storage, index, 0, [F, M, L, F, M, M])
    assert _bounds(storage, index, 0) == [
        (0, 0, 2),
        (1, 0, 2),
        (2, 0, 2),
        (3, 3, -1),
        (4, 3, -1),
        (5, 3, -1),
    ]
    _add(storage, index, 0, [L, F])  # times 6, 7 overwrite times 0, 1
    assert _bounds(storage, index, 0) == [
        (2, 2, 2),
        (3, 3, 6),
        (4, 3, 6),
        (5, 3, 6),
        (6, 3, 6),
        (7, 7, -1),
    ]
    # Positions, as a frame stacker or HER sampler reads them: time 6 sits at position 0.
    env, positions = torch.tensor([0]), torch.tensor([[0, 1, 2]])
    assert index.episode_start(env, positions).tolist() == [[3, 1, 2]]
    assert index.episode_end(env, positions).tolist() == [[0, -1, 2]]


def test_an_overwritten_episode_start_is_reported_as_the_oldest_stored_step():
    storage, index = _indexed(num_envs=1, capacity=4)
    _add(storage, index, 0, [F, M, M, M, M, M])  # times 2..5 stored, the episode began at 0
    assert _bounds(storage, index, 0) == [(2, 2, -1), (3, 2, -1), (4, 2, -1), (5, 2, -1)]


def test_a_stream_without_first_steps_still_splits_after_each_last():
    storage, index = _indexed(num_envs=1, capacity=8)
    _add(storage, index, 0, [M, M, L, M, L, M])
    assert _bounds(storage, index, 0) == [
        (0, 0, 2),
        (1, 0, 2),
        (2, 0, 2),
        (3, 3, 4),
        (4, 3, 4),
        (5, 5, -1),
    ]


@pytest.mark.parametrize("seed", range(6))
def test_random_streams_in_random_adds_match_the_brute_force_reference(seed):
    rng = random.Random(seed)
    capacity = rng.choice([3, 5, 8])
    storage, index = _indexed(num_envs=3, capacity=capacity)
    history: list[list[int]] = [[], [], []]
    for _ in range(12):
        env = rng.randrange(3)
        steps = [rng.choice([F, M, M, M, L]) for _ in range(rng.randint(1, 2 * capacity))]
        _add(storage, index, env, steps)
        history[env] += steps
        for e in range(3):
            assert _bounds(storage, index, e) == _reference(history[e], capacity), (e, history[e])
    rebuilt = EpisodeIndex(storage, step_type_key="step_type")
    rebuilt.rebuild()
    for e in range(3):
        assert _bounds(storage, rebuilt, e) == _reference(history[e], capacity)
    more = [rng.choice([F, M, L]) for _ in range(capacity)]
    _add(storage, index, 0, more)
    rebuilt.update(torch.tensor([0]), len(more))  # a rebuilt index goes on like the live one
    history[0] += more
    assert (
        _bounds(storage, index, 0)
        == _bounds(storage, rebuilt, 0)
        == _reference(history[0], capacity)
    )


def test_batched_adds_to_all_envs_match_the_reference():
    storage, index = _indexed(num_envs=2, capacity=5)
    streams = [[F, M, M, L, F, M, M, M, L, M, F, M, M], [M, F, L, M, M, M, M, M, M, L, F, L, F]]
    for start in range(0, 13, 4):
        chunk = torch.tensor([s[start : start + 4] for s in streams], dtype=torch.int64).T
        index.update(storage.add_sequence({"step_type": chunk}), chunk.shape[0])
    for env in range(2):
        assert _bounds(storage, index, env) == _reference(streams[env], 5)


def test_clear_forgets_the_episodes():
    storage, index = _indexed(num_envs=1, capacity=4)
    _add(storage, index, 0, [F, M, M])
    storage.clear()
    index.clear()
    _add(storage, index, 0, [M, L])
    assert _bounds(storage, index, 0) == [(0, 0, 1), (1, 0, 1)]
