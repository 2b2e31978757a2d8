"""`SumTree` against a brute-force reference: sums, prefix-sum search, repeated slots."""

from __future__ import annotations

import pytest
import torch

from cadence.replay.sum_tree import SumTree


def _reference_find(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The first slot whose running sum exceeds each target (a linear scan, no tree)."""
    cumulative = values.cumsum(0)
    return torch.searchsorted(cumulative, targets, right=True)


@pytest.mark.parametrize("size", [1, 2, 5, 8, 37])
def test_random_updates_and_searches_match_a_brute_force_reference(size):
    generator = torch.Generator().manual_seed(size)
    tree = SumTree(size)
    reference = torch.zeros(size, dtype=torch.float64)
    for _ in range(20):
        count = int(torch.randint(1, 2 * size + 1, (), generator=generator))
        indices = torch.randint(size, (count,), generator=generator)
        values = torch.rand(count, generator=generator, dtype=torch.float64)
        values[torch.rand(count, generator=generator) < 0.3] = 0.0  # empty slots too
        tree.set(indices, values)
        for index, value in zip(indices.tolist(), values.tolist(), strict=True):
            reference[index] = value  # the last write of a repeated slot wins
        assert torch.equal(tree.values, reference)
        assert tree.total() == pytest.approx(float(reference.sum()), rel=1e-12)
        if tree.total() > 0:
            targets = torch.rand(200, generator=generator, dtype=torch.float64) * tree.total()
            assert torch.equal(tree.find(targets), _reference_find(reference, targets))


def test_search_never_lands_on_an_empty_slot_even_at_the_very_top():
    tree = SumTree(6)
    tree.set(torch.tensor([1, 3]), torch.tensor([0.1, 0.2], dtype=torch.float64))
    total = torch.tensor(tree.total(), dtype=torch.float64)
    below_total = torch.nextafter(total, torch.zeros_like(total))
    # Targets at the total or a rounding step below it must not fall into empty slots 4, 5.
    targets = torch.stack(
        [torch.tensor(0.0, dtype=torch.float64), total * 0 + 0.1, below_total, total]
    )
    slots = tree.find(targets)
    assert set(slots.tolist()) <= {1, 3}
    assert slots.tolist()[:2] == [1, 3]


def test_load_values_rebuilds_every_sum():
    tree = SumTree(5)
    values = torch.tensor([1.0, 0.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    tree.load_values(values)
    assert tree.total() == 10.0
    assert tree.find(torch.tensor([0.5, 1.0, 2.9, 3.0, 6.0, 9.99])).tolist() == [0, 2, 2, 3, 4, 4]
    tree.set(torch.tensor([4]), torch.tensor([0.0]))
    assert tree.total() == 6.0
