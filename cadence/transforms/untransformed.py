"""`UntransformedTimeStep`: keeps the raw time step beside the transformed one."""

from __future__ import annotations

from typing import ClassVar

from cadence.data.nest import Nest
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


class UntransformedTimeStep(DataTransformer):
    """Puts the time step as it arrives into ``untransformed``; the data is unchanged.

    On the rollout path the collector keeps the raw step anyway; on the replay path
    this is what gives an algorithm the raw rewards and observations of a minibatch
    (``sample.time_step.untransformed``) after later transformers changed them. It
    must come first in a sequence, before anything has changed the data.

    >>> from cadence.data.time_step import StepType
    >>> step = TimeStep(StepType.FIRST, 0.0, 1.0, 5.0, 0, 0)
    >>> UntransformedTimeStep().transform_time_step(step, ())[0].untransformed.observation
    5.0
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.UNTRANSFORMED

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        if time_step.untransformed is not None:
            return time_step, state
        return time_step.replace(untransformed=time_step), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        fields = sample_time_step_fields(sample)
        if "untransformed" in fields:
            return sample
        # Later transformers build new tensors instead of writing in place, so a
        # shallow copy of the field dict keeps the raw values.
        return replace_time_step_fields(sample, untransformed=dict(fields))
