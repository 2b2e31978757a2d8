"""`NetworkConfig`: the shape of an algorithm's networks, as primitives only.

Building the networks from it is a separate step (`make_encoder`, `MLP`,
`make_action_head`), so a config can be validated, printed and saved before
any tensor exists (DESIGN §10).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs
from attrs import field
from attrs.validators import in_, instance_of

ActivationName = Literal["tanh", "relu", "elu"]
CNNKind = Literal["nature", "small"]
ActionHeadKind = Literal["normal", "tanh_normal"]
RecurrentKind = Literal["none", "gru", "lstm"]


def _positive_ints(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Refuses anything but a tuple of ints >= 1 (bools are not widths)."""
    if not isinstance(value, tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    ):
        raise ValueError(f"'{attribute.name}' must be a tuple of ints >= 1, got {value!r}")


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'{attribute.name}' must be an int >= 1, got {value!r}")


def _finite_float(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'{attribute.name}' must be a finite number, got {value!r}")


def _as_tuple(value: Any) -> Any:
    """Lists (from YAML or the command line) become tuples; anything else is left to the validator."""
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(kw_only=True)
class NetworkConfig:
    """Encoders, MLP bodies and the action head of an algorithm's networks.

    >>> NetworkConfig(hidden_sizes=(256, 256), activation="relu").hidden_sizes
    (256, 256)
    """

    hidden_sizes: tuple[int, ...] = field(
        default=(64, 64),
        converter=_as_tuple,
        validator=_positive_ints,
        metadata={"doc": "Hidden layer widths of each MLP body (actor, critic, Q)."},
    )
    activation: ActivationName = field(
        default="tanh",
        validator=in_(("tanh", "relu", "elu")),
        metadata={"doc": "Hidden activation: tanh (PPO/A2C), relu (SAC/DQN) or elu."},
    )
    cnn: CNNKind = field(
        default="nature",
        validator=in_(("nature", "small")),
        metadata={
            "doc": "Image encoder: 'nature' (Mnih et al. 2015, H, W >= 36) or 'small' (H, W >= 8)."
        },
    )
    layer_norm: bool = field(
        default=False,
        validator=instance_of(bool),
        metadata={"doc": "LayerNorm after each hidden linear layer."},
    )
    orthogonal_init: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={
            "doc": "Orthogonal weights, zero biases (PPO implementation detail); else torch's."
        },
    )
    share_encoder: bool = field(
        default=False,
        validator=instance_of(bool),
        metadata={"doc": "Actor and critic share one observation encoder (saves a CNN on images)."},
    )
    action_head: ActionHeadKind = field(
        default="normal",
        validator=in_(("normal", "tanh_normal")),
        metadata={"doc": "Head for continuous actions; discrete actions are always categorical."},
    )
    init_log_std: float = field(
        default=0.0,
        validator=_finite_float,
        metadata={"doc": "Initial log standard deviation of a 'normal' action head."},
    )
    recurrent: RecurrentKind = field(
        default="none",
        validator=in_(("none", "gru", "lstm")),
        metadata={
            "doc": "Recurrent core after the encoder (PPO and A2C only): 'gru', 'lstm' or "
            "'none' (feed-forward). Its state resets at each episode's first step and trains "
            "by truncated BPTT over the unroll; with share_encoder actor and critic share one."
        },
    )
    recurrent_size: int = field(
        default=64,
        validator=_positive_int,
        metadata={"doc": "Hidden state width of the recurrent core."},
    )
