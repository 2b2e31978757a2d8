"""`NetworkConfig`: the shape of an algorithm's networks."""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import field
from attrs.validators import deep_iterable, ge, in_, instance_of


@attrs.define(kw_only=True)
class NetworkConfig:
    """Encoders, MLP bodies and the action head of the actor and critic."""

    hidden_sizes: tuple[int, ...] = field(
        default=(64, 64),
        converter=tuple,
        validator=deep_iterable(ge(1), instance_of(tuple)),
        metadata={"doc": "Hidden layer widths of each MLP body."},
    )
    activation: Literal["tanh", "relu", "elu"] = field(
        default="tanh",
        validator=in_(["tanh", "relu", "elu"]),
        metadata={"doc": "Hidden activation."},
    )
    cnn: Literal["nature", "small"] = field(
        default="nature",
        validator=in_(["nature", "small"]),
        metadata={
            "doc": "Image encoder: 'nature' (Mnih et al. 2015) or 'small' (for 64x64 and less)."
        },
    )
    layer_norm: bool = field(default=False, metadata={"doc": "LayerNorm after each hidden layer."})
    orthogonal_init: bool = field(
        default=True, metadata={"doc": "Orthogonal weight init (as in PPO implementations)."}
    )
    share_encoder: bool = field(
        default=False, metadata={"doc": "Actor and critic share the observation encoder."}
    )
    action_head: Literal["normal", "tanh_normal"] = field(
        default="normal",
        validator=in_(["normal", "tanh_normal"]),
        metadata={"doc": "Head for continuous actions (discrete actions are always categorical)."},
    )
    init_log_std: float = field(
        default=0.0, metadata={"doc": "Initial log standard deviation of a 'normal' action head."}
    )
