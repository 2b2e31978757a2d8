"""`DeterministicActor`: tanh-bounded actions for any leading batch dims, trainable end to end."""

from __future__ import annotations

import torch

from cadence.data.specs import TensorSpec
from cadence.networks import DeterministicActor
from cadence.networks.encoders import make_encoder


def test_actions_lie_in_minus_one_to_one_for_any_batch_dims():
    actor = DeterministicActor(make_encoder(TensorSpec((3,))), 2, (32,))
    actions = actor(100.0 * torch.randn(5, 7, 3))
    assert actions.shape == (5, 7, 2)
    assert bool((actions.abs() <= 1.0).all())
    assert actions.std() > 0.1, "large inputs spread the actions over the range"


def test_gradients_reach_every_parameter():
    actor = DeterministicActor(make_encoder(TensorSpec((3,))), 1, (8, 8), layer_norm=True)
    actor(torch.randn(16, 3)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())
