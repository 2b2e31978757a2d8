"""`polyak_update` against hand-computed values: the one target update SAC, TD3/DDPG and SAC
on latents share."""

import pytest
import torch
from torch import nn

from cadence.algorithms.polyak import polyak_update


def test_moves_each_target_tau_of_the_way_to_its_online_tensor():
    targets = [torch.tensor([0.0, 4.0]), torch.tensor([[2.0]])]
    onlines = [torch.tensor([1.0, 0.0]), torch.tensor([[-2.0]])]
    polyak_update(targets, onlines, 0.25)
    assert targets[0].tolist() == [0.25, 3.0]
    assert targets[1].tolist() == [[1.0]]
    assert onlines[0].tolist() == [1.0, 0.0]  # the online tensors are only read


def test_is_a_lerp_per_tensor_bit_for_bit():
    generator = torch.Generator().manual_seed(0)
    targets = [torch.randn(64, 32, generator=generator) for _ in range(3)]
    onlines = [torch.randn(64, 32, generator=generator) for _ in range(3)]
    expected = [torch.lerp(t, o, 0.005) for t, o in zip(targets, onlines, strict=True)]
    polyak_update(targets, onlines, 0.005)
    for target, reference in zip(targets, expected, strict=True):
        assert torch.equal(target, reference)


def test_updates_parameters_that_require_grad_without_recording_it():
    torch.manual_seed(0)
    target, online = nn.Linear(3, 2), nn.Linear(3, 2)
    expected = [
        torch.lerp(t.detach(), o.detach(), 0.5)
        for t, o in zip(target.parameters(), online.parameters(), strict=True)
    ]
    polyak_update(target.parameters(), online.parameters(), 0.5)
    for parameter, reference in zip(target.parameters(), expected, strict=True):
        assert torch.equal(parameter.detach(), reference)
        assert parameter.grad_fn is None


def test_networks_of_different_sizes_are_refused():
    with pytest.raises(ValueError):
        polyak_update([torch.zeros(1), torch.zeros(1)], [torch.ones(1)], 0.5)
