"""`ObservationNormalizer`: observations shifted and scaled by running statistics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import Spec, TensorSpec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.leaves import leaf, map_leaves, map_spec_leaves, select_leaves
from cadence.transforms.running_stats import RunningMeanStd
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


class ObservationNormalizer(DataTransformer):
    """``clamp((x - mean) / sqrt(var + epsilon), -clip, clip)`` per element, as float32.

    The mean and variance are those of every observation seen on the rollout path
    in training mode (each environment step counts once). Evaluation (eval mode)
    and replayed minibatches use the statistics without changing them. As in
    Stable-Baselines3's ``VecNormalize``; the statistics are checkpointed.

    Args:
        observation_spec: the spec of the observations it receives.
        keys: the observation leaves to normalize (paths into a Dict observation);
            empty: every floating-point leaf.
        clip: bound on the normalized values.
        epsilon: added to the variance before the square root.

    Raises:
        ValueError: a key names no float leaf, or no leaf is a float tensor.

    >>> normalizer = ObservationNormalizer(TensorSpec((1,)), clip=10.0)
    >>> normalizer.update("", torch.tensor([[1.0], [3.0]]))
    >>> normalizer.normalize("", torch.tensor([[2.0], [5.0]])).tolist()
    [[0.0], [3.0]]
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def __init__(
        self,
        observation_spec: Spec,
        keys: Sequence[str] = (),
        clip: float = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        self.paths = select_leaves(
            observation_spec, keys, _is_float, "ObservationNormalizer", "a float tensor"
        )
        self.clip = clip
        self.epsilon = epsilon
        self.stats = nn.ModuleDict(
            {_module_key(p): RunningMeanStd(leaf(observation_spec, p).shape) for p in self.paths}
        )
        self._event_dims = {p: len(leaf(observation_spec, p).shape) for p in self.paths}

    def transformed_observation_spec(self, observation_spec: Spec) -> Spec:
        return map_spec_leaves(observation_spec, self.paths, lambda s: TensorSpec(s.shape))

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        if self.training:
            for path in self.paths:
                self.update(path, leaf(time_step.observation, path))
        observation = map_leaves(time_step.observation, self.paths, self.normalize)
        return time_step.replace(observation=observation), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        observation = sample_time_step_fields(sample)["observation"]
        observation = map_leaves(observation, self.paths, self.normalize)
        return replace_time_step_fields(sample, observation=observation)

    def update(self, path: str, observation: torch.Tensor) -> None:
        """Merges observations ``[*B, *shape]`` of leaf ``path`` into its statistics."""
        stats = self.stats[_module_key(path)]
        stats.update(observation.reshape(-1, *stats.mean.shape))

    def normalize(self, path: str, observation: torch.Tensor) -> torch.Tensor:
        """Observations ``[*B, *shape]`` of leaf ``path`` normalized, float32."""
        stats = self.stats[_module_key(path)]
        # Statistics accumulate in float64; applying them in float32 is exact enough and
        # keeps the per-step cost low on accelerators.
        mean, std = stats.mean.float(), stats.std(self.epsilon).float()
        return ((observation.float() - mean) / std).clamp(-self.clip, self.clip)

    def extra_repr(self) -> str:
        return f"keys={list(self.paths)}, clip={self.clip}"


def _is_float(spec: TensorSpec) -> bool:
    return isinstance(spec, TensorSpec) and spec.dtype.is_floating_point


def _module_key(path: str) -> str:
    # ModuleDict keys may neither contain '.' nor be empty.
    return path.replace(".", "_") or "observation"
