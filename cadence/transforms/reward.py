"""Stateless reward maps: `RewardClipping` and `RewardScaling`."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from cadence.data.nest import Nest
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


class RewardClipping(DataTransformer):
    """Rewards clamped to ``[minimum, maximum]`` (Mnih et al. 2015 clip Atari rewards to [-1, 1]).

    Args:
        minimum: the lower bound.
        maximum: the upper bound.

    Raises:
        ValueError: ``minimum > maximum``.

    >>> RewardClipping(-1.0, 1.0).map_reward(torch.tensor([-3.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def __init__(self, minimum: float = -1.0, maximum: float = 1.0) -> None:
        super().__init__()
        if minimum > maximum:
            raise ValueError(f"RewardClipping: minimum {minimum} exceeds maximum {maximum}")
        self.minimum = minimum
        self.maximum = maximum

    def map_reward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.clamp(self.minimum, self.maximum)

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        return time_step.replace(reward=self.map_reward(time_step.reward)), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        return map_sample_reward(sample, self.map_reward)

    def extra_repr(self) -> str:
        return f"minimum={self.minimum}, maximum={self.maximum}"


class RewardScaling(DataTransformer):
    """Rewards multiplied by a constant ``scale``.

    >>> RewardScaling(0.5).map_reward(torch.tensor([10.0, -2.0])).tolist()
    [5.0, -1.0]
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def map_reward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward * self.scale

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        return time_step.replace(reward=self.map_reward(time_step.reward)), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        return map_sample_reward(sample, self.map_reward)

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


def map_sample_reward(
    sample: ReplaySample, fn: Callable[[torch.Tensor], torch.Tensor]
) -> ReplaySample:
    """``sample`` with ``fn`` applied to its ``[N, L]`` rewards."""
    return replace_time_step_fields(sample, reward=fn(sample_time_step_fields(sample)["reward"]))
