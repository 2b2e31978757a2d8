"""Networks: MLP bodies, observation encoders, action heads, value and Q networks.

Build an algorithm's networks from its spec and a `NetworkConfig`:

>>> import torch
>>> from cadence.data.specs import BoundedTensorSpec, TensorSpec
>>> config = NetworkConfig(hidden_sizes=(32, 32))
>>> encoder = make_encoder(TensorSpec((4,)), config)
>>> body = MLP(encoder.output_dim, config.hidden_sizes, activation=config.activation)
>>> head = make_action_head(body.output_dim, BoundedTensorSpec((2,), minimum=-1.0), "tanh_normal")
>>> head(body(encoder(torch.zeros(5, 4)))).mode.shape
torch.Size([5, 2])
"""

from cadence.networks.config import NetworkConfig
from cadence.networks.deterministic_actor import DeterministicActor
from cadence.networks.distributions import TanhNormal
from cadence.networks.encoders import (
    DictEncoder,
    FlattenEncoder,
    ImageEncoder,
    OneHotEncoder,
    is_image,
    make_encoder,
)
from cadence.networks.ensemble import EnsembleLinear, EnsembleMLP
from cadence.networks.heads import (
    CategoricalHead,
    NormalHead,
    TanhNormalHead,
    make_action_head,
)
from cadence.networks.mlp import MLP
from cadence.networks.value import CriticEnsemble, QNetwork, ValueNetwork

__all__ = [
    "MLP",
    "CategoricalHead",
    "CriticEnsemble",
    "DeterministicActor",
    "DictEncoder",
    "EnsembleLinear",
    "EnsembleMLP",
    "FlattenEncoder",
    "ImageEncoder",
    "NetworkConfig",
    "NormalHead",
    "OneHotEncoder",
    "QNetwork",
    "TanhNormal",
    "TanhNormalHead",
    "ValueNetwork",
    "is_image",
    "make_action_head",
    "make_encoder",
]
