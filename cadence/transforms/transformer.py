"""The `DataTransformer` contract (DESIGN §6).

A data transformer maps a batch to a batch on two paths:

- rollout: `transform_time_step` maps the ``[B]`` time step the environments just
  returned, before the algorithm sees it (the collector keeps the raw step in
  ``TimeStep.untransformed``; evaluation and play apply the same transformer in
  eval mode, where statistics are frozen). Per-environment memory (a frame
  history, a running return) is explicit state, as for algorithms.
- replay: `transform_sample` maps a minibatch of ``[N, L]`` windows read from the
  replay buffer, which stores raw steps.

Statistics (normalizers) live in torch buffers, so ``state_dict`` checkpoints them
and ``.to(device)`` moves them. They are updated on the rollout path in training
mode only: every observed step counts once, however often it is replayed.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.order import OrderGroup


class DataTransformer(nn.Module, abc.ABC):
    """Maps rollout time steps and replayed minibatches; stateful through ``state_dict``.

    Subclasses set `order_group` and implement the two transforms; those that
    change the observation's shape or dtype also override `transformed_observation_spec`
    (the algorithm is built for the transformed spec).
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def transformed_observation_spec(self, observation_spec: Spec) -> Spec:
        """The spec of the observations this transformer outputs, given its input spec."""
        return observation_spec

    def initial_state(self, batch_size: int) -> Nest:
        """The rollout state of ``batch_size`` fresh environments.

        ``()`` means "nothing seen yet"; stateful transformers build their state
        from the first time step they see (which is a FIRST, right after a reset).
        """
        return ()

    @abc.abstractmethod
    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        """Maps the ``[B]`` time step of a rollout (or evaluation); returns it and the new state."""

    @abc.abstractmethod
    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        """Maps a replayed minibatch of ``[N, L]`` windows."""


def sample_time_step_fields(sample: ReplaySample) -> dict[str, Any]:
    """The ``time_step`` row fields of ``sample`` (leaves ``[N, L, ...]``)."""
    return sample.steps["time_step"]


def replace_time_step_fields(sample: ReplaySample, **fields: Any) -> ReplaySample:
    """A copy of ``sample`` whose ``time_step`` row fields are updated by ``fields``.

    The tensors of ``sample`` are not modified, so earlier references (e.g. an
    untransformed copy) keep their values.
    """
    steps = dict(sample.steps)
    steps["time_step"] = {**sample.steps["time_step"], **fields}
    return dataclasses.replace(sample, steps=steps)
