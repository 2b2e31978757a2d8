"""`ImageScaleTransformer`: uint8 pixels to floats in ``[minimum, maximum]``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from cadence.data.nest import Nest
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, Spec, TensorSpec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.leaves import map_leaves, map_spec_leaves, select_leaves
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


class ImageScaleTransformer(DataTransformer):
    """``minimum + x * (maximum - minimum) / 255`` for uint8 image leaves, float32.

    The replay buffer keeps the bytes (4x smaller than floats); the scaling runs
    on each replayed minibatch and each rollout step.

    Args:
        observation_spec: the spec of the observations it receives.
        keys: the leaves to scale; empty: every uint8 leaf.
        minimum: the value of pixel 0.
        maximum: the value of pixel 255.

    Raises:
        ValueError: a key names no uint8 leaf, no leaf is uint8, or ``minimum >= maximum``.

    >>> scale = ImageScaleTransformer(TensorSpec((1, 2, 2), torch.uint8), minimum=-1.0)
    >>> scale.scale("", torch.tensor([0, 255], dtype=torch.uint8)).tolist()
    [-1.0, 1.0]
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def __init__(
        self,
        observation_spec: Spec,
        keys: Sequence[str] = (),
        minimum: float = 0.0,
        maximum: float = 1.0,
    ) -> None:
        super().__init__()
        if minimum >= maximum:
            raise ValueError(
                f"ImageScaleTransformer: minimum {minimum} must be below maximum {maximum}"
            )
        self.paths = select_leaves(
            observation_spec, keys, _is_uint8, "ImageScaleTransformer", "a uint8 image"
        )
        self.minimum = minimum
        self.maximum = maximum

    def transformed_observation_spec(self, observation_spec: Spec) -> Spec:
        def scaled(spec: TensorSpec) -> Spec:
            return BoundedTensorSpec(spec.shape, torch.float32, self.minimum, self.maximum)

        return map_spec_leaves(observation_spec, self.paths, scaled)

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        observation = map_leaves(time_step.observation, self.paths, self.scale)
        return time_step.replace(observation=observation), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        observation = sample_time_step_fields(sample)["observation"]
        observation = map_leaves(observation, self.paths, self.scale)
        return replace_time_step_fields(sample, observation=observation)

    def scale(self, path: str, image: torch.Tensor) -> torch.Tensor:
        """uint8 pixels of any shape as float32 in ``[minimum, maximum]``."""
        return self.minimum + image.float() * ((self.maximum - self.minimum) / 255.0)

    def extra_repr(self) -> str:
        return f"keys={list(self.paths)}, minimum={self.minimum}, maximum={self.maximum}"


def _is_uint8(spec: TensorSpec) -> bool:
    return (
        isinstance(spec, TensorSpec)
        and not isinstance(spec, DiscreteTensorSpec)
        and spec.dtype == torch.uint8
    )
