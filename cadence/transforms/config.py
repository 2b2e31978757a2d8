"""`DataTransformersConfig`: which data transformers an experiment applies, and their options.

``names`` lists the transformers in the order they run; each has its own section
of options, read only when it is listed::

    data_transformers:
      names: [hindsight_experience, observation_normalizer]
      hindsight_experience:
        her_proportion: 0.8
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from attrs import field
from attrs.validators import ge, gt, instance_of, le

# Names and order groups only: this module imports no transformer (nor torch).
from cadence.data.typed_fields import CHECKED_SETATTR
from cadence.transforms.names import TRANSFORMER_ORDER_GROUPS, TransformerName
from cadence.transforms.order import check_order


def _as_tuple(value: Any) -> Any:
    """Lists (from YAML or the command line) become tuples; the validator judges the rest."""
    return tuple(value) if isinstance(value, list) else value


def _strings(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{attribute.name}' must be a list of observation keys, got {value!r}")


def _finite(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'{attribute.name}' must be a finite number, got {value!r}")


def _keys_field(doc: str) -> Any:
    return field(default=(), converter=_as_tuple, validator=_strings, metadata={"doc": doc})


@attrs.frozen(kw_only=True)
class ObservationNormalizerConfig:
    """Options of `cadence.transforms.ObservationNormalizer`."""

    keys: tuple[str, ...] = _keys_field(
        "Observation keys to normalize ('a/b' for nested Dicts); empty: every float leaf."
    )
    clip: float = field(
        default=10.0, validator=gt(0), metadata={"doc": "Bound on normalized values."}
    )
    epsilon: float = field(
        default=1e-8, validator=gt(0), metadata={"doc": "Added to the variance before the sqrt."}
    )


@attrs.frozen(kw_only=True)
class RewardClippingConfig:
    """Options of `cadence.transforms.RewardClipping`."""

    minimum: float = field(default=-1.0, validator=_finite, metadata={"doc": "Lower reward bound."})
    maximum: float = field(default=1.0, validator=_finite, metadata={"doc": "Upper reward bound."})

    def __attrs_post_init__(self) -> None:
        if self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} exceeds maximum {self.maximum}")


@attrs.frozen(kw_only=True)
class RewardNormalizerConfig:
    """Options of `cadence.transforms.RewardNormalizer`."""

    gamma: float = field(
        default=0.99,
        validator=[ge(0), le(1)],
        metadata={"doc": "Discount of the return whose spread scales the rewards (0: rewards')."},
    )
    clip: float = field(default=10.0, validator=gt(0), metadata={"doc": "Bound on scaled rewards."})
    epsilon: float = field(
        default=1e-8, validator=gt(0), metadata={"doc": "Added to the variance before the sqrt."}
    )


@attrs.frozen(kw_only=True)
class RewardScalingConfig:
    """Options of `cadence.transforms.RewardScaling`."""

    scale: float = field(default=1.0, validator=_finite, metadata={"doc": "Reward multiplier."})


@attrs.frozen(kw_only=True)
class ImageScaleConfig:
    """Options of `cadence.transforms.ImageScaleTransformer`."""

    keys: tuple[str, ...] = _keys_field("Observation keys to scale; empty: every uint8 leaf.")
    minimum: float = field(default=0.0, validator=_finite, metadata={"doc": "Value of pixel 0."})
    maximum: float = field(default=1.0, validator=_finite, metadata={"doc": "Value of pixel 255."})

    def __attrs_post_init__(self) -> None:
        if self.minimum >= self.maximum:
            raise ValueError(f"minimum {self.minimum} must be below maximum {self.maximum}")


@attrs.frozen(kw_only=True)
class ReplayFrameStackConfig:
    """Options of `cadence.transforms.ReplayFrameStack`."""

    num_frames: int = field(default=4, validator=ge(1), metadata={"doc": "Frames per stack."})
    keys: tuple[str, ...] = _keys_field("Observation keys to stack; empty: every leaf.")


@attrs.frozen(kw_only=True)
class HindsightExperienceConfig:
    """Options of `cadence.transforms.HindsightExperienceTransformer` (off-policy only)."""

    her_proportion: float = field(
        default=0.8,
        validator=[ge(0), le(1)],
        metadata={"doc": "Fraction of replayed windows relabelled with a future achieved goal."},
    )
    distance_threshold: float = field(
        default=0.05,
        validator=ge(0),
        metadata={"doc": "Success radius of the sparse reward -1(||achieved - desired|| > r)."},
    )
    end_episode_on_success: bool = field(
        default=False,
        validator=instance_of(bool),
        metadata={"doc": "The env ends episodes on success (bit flipping; not Fetch)."},
    )
    achieved_goal_key: str = field(
        default="achieved_goal", validator=instance_of(str), metadata={"doc": "Achieved goal key."}
    )
    desired_goal_key: str = field(
        default="desired_goal", validator=instance_of(str), metadata={"doc": "Desired goal key."}
    )


def _known_and_ordered(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Refuses unknown or repeated names and orders that break DESIGN §6."""
    if not isinstance(value, tuple):
        raise ValueError(f"'{attribute.name}' must be a list of transformer names, got {value!r}")
    for name in value:
        if name not in TRANSFORMER_ORDER_GROUPS:
            raise ValueError(
                f"unknown data transformer {name!r}; known: {', '.join(TRANSFORMER_ORDER_GROUPS)}"
            )
    repeated = sorted({name for name in value if value.count(name) > 1})
    if repeated:
        raise ValueError(
            f"each data transformer may be listed once; repeated: {', '.join(repeated)}"
        )
    check_order([(name, TRANSFORMER_ORDER_GROUPS[name]) for name in value])


def _section(cls: type, doc: str) -> Any:
    return field(factory=cls, validator=instance_of(cls), metadata={"doc": doc})


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class DataTransformersConfig:
    """The data transformers of an experiment (DESIGN §6), in the order they run.

    >>> DataTransformersConfig(names=["observation_normalizer"]).names
    ('observation_normalizer',)
    """

    names: tuple[TransformerName, ...] = field(
        default=(),
        converter=_as_tuple,
        validator=_known_and_ordered,
        metadata={
            "doc": "Transformers to apply, in order: untransformed_time_step first, then "
            "hindsight_experience / replay_frame_stack, then the rest. Empty: none."
        },
    )
    observation_normalizer: ObservationNormalizerConfig = _section(
        ObservationNormalizerConfig, "Options of observation_normalizer."
    )
    reward_clipping: RewardClippingConfig = _section(
        RewardClippingConfig, "Options of reward_clipping."
    )
    reward_normalizer: RewardNormalizerConfig = _section(
        RewardNormalizerConfig, "Options of reward_normalizer."
    )
    reward_scaling: RewardScalingConfig = _section(
        RewardScalingConfig, "Options of reward_scaling."
    )
    image_scale: ImageScaleConfig = _section(ImageScaleConfig, "Options of image_scale.")
    replay_frame_stack: ReplayFrameStackConfig = _section(
        ReplayFrameStackConfig, "Options of replay_frame_stack."
    )
    hindsight_experience: HindsightExperienceConfig = _section(
        HindsightExperienceConfig, "Options of hindsight_experience."
    )
