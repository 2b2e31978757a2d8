"""`PrioritizedSampler`: draws proportional to priority ** alpha, max priority for new steps,
importance weights with an annealed beta, masking of window starts without a full window."""

from __future__ import annotations

import pytest
import torch

from cadence.replay.prioritized import PrioritizedSampler, linear_schedule
from cadence.replay.storage import RingStorage


def _filled(sampler: PrioritizedSampler, num_envs: int, capacity: int, steps: int) -> RingStorage:
    storage = RingStorage(num_envs=num_envs, capacity=capacity)
    storage.add_sequence({"x": torch.zeros(steps, num_envs)})
    sampler.on_add(storage, torch.arange(num_envs), steps)
    return storage


def _slots(sample, capacity: int) -> torch.Tensor:
    return sample.env_ids * capacity + sample.positions[:, 0]


def test_draws_are_proportional_to_priority_to_the_alpha():
    alpha, capacity = 0.7, 6
    sampler = PrioritizedSampler(alpha=alpha, beta=0.5)
    storage = _filled(sampler, num_envs=2, capacity=capacity, steps=capacity)
    priorities = torch.tensor([1.0, 4.0, 0.5, 9.0, 2.0, 50.0, 3.0, 0.0, 1.0, 6.0, 2.5, 50.0])
    sampler.update_priorities(torch.arange(12), priorities)
    draws = 40_000
    sample = sampler.sample(storage, draws, length=2, generator=torch.Generator().manual_seed(0))
    # Slots 5 and 11 hold each env's newest step: no window of 2 starts there.
    valid = torch.ones(12, dtype=torch.bool)
    valid[[5, 11]] = False
    expected = torch.where(valid, priorities**alpha, 0.0)
    expected = expected / expected.sum()
    frequency = torch.bincount(_slots(sample, capacity), minlength=12).double() / draws
    # Standard error of a frequency <= 0.0025 at this count: allow about 4 of them.
    assert torch.allclose(frequency, expected.double(), atol=0.01), (frequency, expected)
    assert frequency[7] == 0, "a zero priority is never drawn"


def test_importance_weights_follow_beta_normalised_by_the_batch_maximum():
    alpha, beta, capacity = 0.6, 0.4, 5
    sampler = PrioritizedSampler(alpha=alpha, beta=beta)
    storage = _filled(sampler, num_envs=1, capacity=capacity, steps=capacity)
    priorities = torch.tensor([1.0, 2.0, 3.0, 8.0, 1.0])
    sampler.update_priorities(torch.arange(5), priorities)
    sample = sampler.sample(storage, 64, length=2, generator=torch.Generator().manual_seed(1))
    slots = _slots(sample, capacity)
    probability = priorities[:4] ** alpha / (priorities[:4] ** alpha).sum()  # slot 4: no window
    raw = (4 * probability[slots]) ** -beta
    assert torch.allclose(sample.weights, (raw / raw.max()).float(), rtol=1e-5)
    assert sample.weights.max() == 1.0
    # A higher priority is drawn more often and so weighted less.
    by_slot = {int(s): float(w) for s, w in zip(slots, sample.weights, strict=True)}
    assert by_slot[3] < by_slot[0]


def test_beta_anneals_on_its_schedule_and_at_one_weights_undo_the_bias_fully():
    sampler = PrioritizedSampler(alpha=1.0, beta=linear_schedule(0.4, 1.0, num_steps=10))
    assert sampler.beta == pytest.approx(0.4)
    sampler.advance(5)
    assert sampler.beta == pytest.approx(0.7)
    sampler.advance(50)
    assert sampler.beta == 1.0
    storage = _filled(sampler, num_envs=1, capacity=4, steps=4)
    sampler.update_priorities(torch.arange(3), torch.tensor([1.0, 2.0, 4.0]))
    sample = sampler.sample(storage, 30, length=2, generator=torch.Generator().manual_seed(2))
    # With beta = 1, weight * probability is the same for every slot.
    probability = torch.tensor([1.0, 2.0, 4.0])[sample.positions[:, 0]] / 7
    assert torch.allclose(
        sample.weights * probability, (sample.weights * probability)[0].expand(30)
    )


def test_new_steps_get_the_largest_priority_seen_so_far():
    alpha = 0.5
    sampler = PrioritizedSampler(alpha=alpha)
    storage = _filled(sampler, num_envs=2, capacity=4, steps=2)
    assert sampler.max_priority == 1.0  # before any priority is given
    assert torch.equal(
        sampler.state_dict()["values"][[0, 1, 4, 5]], torch.ones(4, dtype=torch.float64)
    )
    sampler.update_priorities(torch.tensor([0, 1, 4]), torch.tensor([9.0, 0.25, 4.0]))
    sampler.update_priorities(torch.tensor([5]), torch.tensor([1.0]))  # a lower one keeps the max
    assert sampler.max_priority == 9.0  # before alpha
    with pytest.raises(AttributeError):
        sampler.max_priority = 2.0  # read-only: set by the priorities given
    storage.add_sequence({"x": torch.zeros(3, 2)})
    sampler.on_add(storage, torch.arange(2), 3)
    values = sampler.state_dict()["values"]
    # Env 0: times 2, 3, 4 -> positions 2, 3, 0 (time 4 overwrote time 0's priority).
    assert values[[2, 3, 0]].tolist() == [3.0, 3.0, 3.0]
    assert values[1].item() == pytest.approx(0.5)
    assert values[[6, 7, 4]].tolist() == [3.0, 3.0, 3.0]
    assert values[5].item() == 1.0


def test_starts_without_a_full_window_before_the_write_head_are_never_drawn():
    sampler = PrioritizedSampler(alpha=1.0)
    storage = _filled(sampler, num_envs=1, capacity=8, steps=11)  # wrapped: times 3..10 stored
    sampler.update_priorities(torch.arange(8), torch.tensor([1.0, 1, 100, 100, 1, 1, 1, 1]))
    before = sampler.state_dict()["values"].clone()
    sample = sampler.sample(storage, 500, length=3, generator=torch.Generator().manual_seed(3))
    # Times 9 and 10 (positions 1 and 2) are the newest two steps: no window of 3 fits there.
    assert not {1, 2} & set(sample.positions[:, 0].tolist())
    times = storage.times(sample.env_ids, sample.positions)
    assert bool((times[:, 1:] - times[:, :-1] == 1).all())
    assert torch.equal(sampler.state_dict()["values"], before), "the mask must be undone"


def test_state_dict_round_trip_draws_the_same_windows():
    sampler = PrioritizedSampler(alpha=0.6, beta=linear_schedule(0.4, 1.0, 100))
    storage = _filled(sampler, num_envs=2, capacity=5, steps=7)
    sampler.update_priorities(torch.tensor([0, 3, 6]), torch.tensor([5.0, 0.1, 2.0]))
    sampler.advance(30)
    restored = PrioritizedSampler(alpha=0.6, beta=linear_schedule(0.4, 1.0, 100))
    restored.load_state_dict(sampler.state_dict())
    assert restored.beta == sampler.beta
    first = sampler.sample(storage, 40, 2, generator=torch.Generator().manual_seed(4))
    again = restored.sample(storage, 40, 2, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first.positions, again.positions) and torch.equal(
        first.weights, again.weights
    )
    assert restored.state_dict()["max_priority"] == 5.0


def test_clear_forgets_priorities_and_the_maximum():
    sampler = PrioritizedSampler(alpha=1.0)
    storage = _filled(sampler, num_envs=1, capacity=4, steps=4)
    sampler.update_priorities(torch.tensor([0]), torch.tensor([7.0]))
    sampler.clear()
    storage.clear()
    assert sampler.state_dict()["values"].sum() == 0
    assert sampler.state_dict()["max_priority"] == 1.0
    assert sampler.max_priority == 1.0


def test_bad_priorities_are_refused():
    sampler = PrioritizedSampler()
    with pytest.raises(ValueError, match="before anything was added"):
        sampler.update_priorities(torch.tensor([0]), torch.tensor([1.0]))
    storage = _filled(sampler, num_envs=1, capacity=4, steps=4)
    with pytest.raises(ValueError, match="finite and >= 0"):
        sampler.update_priorities(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        sampler.update_priorities(torch.tensor([0]), torch.tensor([float("nan")]))
    sampler.update_priorities(torch.arange(4), torch.zeros(4))
    with pytest.raises(ValueError, match="priority 0"):
        sampler.sample(storage, 4, length=2)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSampler(alpha=-0.1)
