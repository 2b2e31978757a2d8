"""`DataTransformerSequence`: transformers applied in order, the order checked when built."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.order import TransformerOrderError as TransformerOrderError
from cadence.transforms.order import check_order
from cadence.transforms.transformer import DataTransformer


class DataTransformerSequence(DataTransformer):
    """Applies ``transformers`` in order on both the rollout and the replay path.

    Args:
        transformers: the transformers, first applied first.

    Raises:
        TransformerOrderError: the order breaks DESIGN §6 (the message names both
            offending transformers).

    >>> from cadence.transforms.reward import RewardClipping, RewardScaling
    >>> sequence = DataTransformerSequence([RewardScaling(0.5), RewardClipping(-1.0, 1.0)])
    >>> len(sequence)
    2
    """

    def __init__(self, transformers: Sequence[DataTransformer]) -> None:
        super().__init__()
        check_order([(type(t).__name__, t.order_group) for t in transformers])
        self.transformers = nn.ModuleList(transformers)

    def __len__(self) -> int:
        return len(self.transformers)

    def __iter__(self) -> Iterator[DataTransformer]:
        return iter(self.transformers)

    def transformed_observation_spec(self, observation_spec: Spec) -> Spec:
        for transformer in self.transformers:
            observation_spec = transformer.transformed_observation_spec(observation_spec)
        return observation_spec

    def initial_state(self, batch_size: int) -> Nest:
        return tuple(t.initial_state(batch_size) for t in self.transformers)

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        states = state if state else self.initial_state(int(time_step.step_type.shape[0]))
        new_states = []
        for transformer, transformer_state in zip(self.transformers, states, strict=True):
            time_step, transformer_state = transformer.transform_time_step(
                time_step, transformer_state
            )
            new_states.append(transformer_state)
        return time_step, tuple(new_states)

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        for transformer in self.transformers:
            sample = transformer.transform_sample(sample)
        return sample
