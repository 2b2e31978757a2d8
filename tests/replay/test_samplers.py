"""Uniform windows and whole-buffer minibatches: only stored steps, consecutive, never
across the write head; whole-buffer passes cover every window once, time order kept."""

from __future__ import annotations

import pytest
import torch

from cadence.replay.samplers import UniformSampler, num_window_starts, whole_buffer_minibatches
from cadence.replay.storage import RingStorage


def _storage(num_added: list[int], capacity: int) -> RingStorage:
    """Each env's step ``t`` stores ``time = t`` and ``env``, added one step at a time per env."""
    storage = RingStorage(num_envs=len(num_added), capacity=capacity)
    for env, count in enumerate(num_added):
        if count:
            rows = {
                "time": torch.arange(count).view(count, 1),
                "env": torch.full((count, 1), env),
            }
            storage.add_sequence(rows, env_ids=torch.tensor([env]))
    return storage


def _check_windows(storage: RingStorage, env_ids: torch.Tensor, positions: torch.Tensor) -> None:
    """Every window is consecutive stored steps of its own env, oldest first."""
    rows = storage.gather(env_ids, positions)
    assert bool((rows["env"] == env_ids.unsqueeze(1)).all())
    times = rows["time"]
    assert bool((times[:, 1:] - times[:, :-1] == 1).all()), "a window crossed the write head"
    oldest = (storage.num_added - storage.sizes)[env_ids]
    assert bool((times[:, 0] >= oldest).all()), "a window reads overwritten steps"
    assert bool((times[:, -1] < storage.num_added[env_ids]).all()), "a window reads unwritten slots"
    assert torch.equal(storage.times(env_ids, positions), times)


def test_uniform_windows_are_consecutive_stored_steps_after_wrap_around():
    # Env 0 wrapped twice, env 1 exactly full, env 2 half full, env 3 too short for a window.
    storage = _storage([23, 8, 4, 2], capacity=8)
    sample = UniformSampler().sample(
        storage, batch_size=2000, length=3, generator=torch.Generator().manual_seed(0)
    )
    assert sample.positions.shape == (2000, 3)
    assert bool((sample.weights == 1).all())
    _check_windows(storage, sample.env_ids, sample.positions)
    assert 3 not in sample.env_ids.tolist()


def test_every_window_start_is_equally_likely():
    storage = _storage([11, 5, 3], capacity=6)
    counts = num_window_starts(storage, length=3)
    assert counts.tolist() == [4, 3, 1]
    draws = 16_000
    sample = UniformSampler().sample(
        storage, draws, length=3, generator=torch.Generator().manual_seed(1)
    )
    starts = storage.gather(sample.env_ids, sample.positions[:, :1])["time"][:, 0]
    keys = (sample.env_ids * 100 + starts).tolist()
    expected = {100 * 0 + t for t in range(5, 9)} | {100 + t for t in range(3)} | {200}
    assert set(keys) == expected
    frequency = torch.bincount(torch.tensor(keys), minlength=201)[sorted(expected)].double() / draws
    # 8 starts, p = 1/8; the standard error of a frequency is about 0.0026: allow 5 of them.
    assert torch.allclose(frequency, torch.full_like(frequency, 1 / 8), atol=0.013), frequency


def test_the_same_generator_seed_gives_the_same_windows():
    storage = _storage([9, 9], capacity=5)
    first = UniformSampler().sample(storage, 50, 2, generator=torch.Generator().manual_seed(3))
    again = UniformSampler().sample(storage, 50, 2, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first.positions, again.positions) and torch.equal(
        first.env_ids, again.env_ids
    )


def test_sampling_before_any_window_is_stored_says_how_much_is_there():
    storage = _storage([2, 1], capacity=5)
    with pytest.raises(ValueError, match="no window of 3 steps.*2 steps"):
        UniformSampler().sample(storage, 4, length=3)
    with pytest.raises(ValueError, match="length >= 1"):
        UniformSampler().sample(storage, 4, length=0)


def test_whole_buffer_minibatches_cover_every_window_start_once_in_time_order():
    storage = _storage([13, 7, 2], capacity=8)  # sizes 8, 7, 2
    batches = list(
        whole_buffer_minibatches(storage, 3, 2, generator=torch.Generator().manual_seed(0))
    )
    # A window at every stored step with a stored successor: 7 + 6 + 1 = 14 windows.
    assert [len(b.env_ids) for b in batches] == [3, 3, 3, 3, 2]
    env_ids = torch.cat([b.env_ids for b in batches])
    positions = torch.cat([b.positions for b in batches])
    _check_windows(storage, env_ids, positions)
    starts = storage.gather(env_ids, positions[:, :1])["time"][:, 0]
    windows = sorted(zip(env_ids.tolist(), starts.tolist(), strict=True))
    # Every transition is a window's first step once (env 0 keeps times 5..12 after wrapping).
    expected = [(0, t) for t in range(5, 12)] + [(1, t) for t in range(6)] + [(2, 0)]
    assert windows == expected
    assert [w for w in zip(env_ids.tolist(), starts.tolist(), strict=True)] != windows, (
        "the windows should be shuffled"
    )


def test_whole_buffer_minibatches_refuse_a_buffer_without_a_window():
    storage = _storage([2, 1], capacity=8)
    with pytest.raises(ValueError, match="no window of 3 steps is stored yet"):
        list(whole_buffer_minibatches(storage, 4, 3))


def test_whole_buffer_shuffles_differ_by_generator_seed_but_not_by_content():
    storage = _storage([16, 16], capacity=16)
    orders = []
    for seed in (0, 1):
        batches = whole_buffer_minibatches(
            storage, 4, 4, generator=torch.Generator().manual_seed(seed)
        )
        orders.append(
            [
                (int(e), int(p))
                for b in batches
                for e, p in zip(b.env_ids, b.positions[:, 0], strict=True)
            ]
        )
    assert orders[0] != orders[1]
    assert sorted(orders[0]) == sorted(orders[1])
