import math

import pytest
import torch
from torch import nn

from cadence.networks.linear import Linear
from cadence.networks.mlp import MLP


def test_shapes_with_and_without_projection():
    assert MLP(4, (32, 16))(torch.zeros(8, 4)).shape == (8, 16)
    assert MLP(4, (32, 16), out_dim=3)(torch.zeros(5, 8, 4)).shape == (5, 8, 3)
    assert MLP(4, (32, 16), out_dim=3).output_dim == 3
    assert MLP(4, (32, 16)).output_dim == 16


def test_no_hidden_layers_is_identity_or_one_linear():
    x = torch.randn(3, 4)
    assert torch.equal(MLP(4, ())(x), x)
    assert [type(m) for m in MLP(4, (), out_dim=2)] == [Linear]


def test_orthogonal_init_gains_and_zero_biases():
    mlp = MLP(64, (64,), out_dim=64, output_gain=0.01)
    hidden, output = mlp[0], mlp[2]
    torch.testing.assert_close(
        hidden.weight @ hidden.weight.T, 2 * torch.eye(64), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        output.weight @ output.weight.T, 1e-4 * torch.eye(64), atol=1e-7, rtol=0
    )
    assert (hidden.bias == 0).all() and (output.bias == 0).all()


def test_default_init_keeps_torch_biases():
    torch.manual_seed(0)
    mlp = MLP(16, (16,), orthogonal_init=False)
    assert (mlp[0].bias != 0).any()
    assert mlp[0].weight.abs().max() <= 1 / math.sqrt(16)


@pytest.mark.parametrize(
    "activation, cls", [("relu", nn.ReLU), ("elu", nn.ELU), (nn.SiLU, nn.SiLU)]
)
def test_activation_by_name_or_class(activation, cls):
    mlp = MLP(4, (8, 8), activation=activation, layer_norm=True)
    assert [type(m) for m in mlp] == [Linear, nn.LayerNorm, cls] * 2
