"""Networks: MLP bodies, observation encoders, action heads."""

from cadence.networks.config import NetworkConfig
from cadence.networks.encoders import (
    DictEncoder,
    FlattenEncoder,
    ImageEncoder,
    is_image,
    make_encoder,
)
from cadence.networks.heads import (
    CategoricalHead,
    NormalHead,
    TanhNormal,
    TanhNormalHead,
    make_action_head,
)
from cadence.networks.mlp import MLP

__all__ = [
    "MLP",
    "CategoricalHead",
    "DictEncoder",
    "FlattenEncoder",
    "ImageEncoder",
    "NetworkConfig",
    "NormalHead",
    "TanhNormal",
    "TanhNormalHead",
    "is_image",
    "make_action_head",
    "make_encoder",
]
