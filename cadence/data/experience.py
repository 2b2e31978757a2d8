"""`Experience`: one unroll, time-major."""

from __future__ import annotations

import dataclasses

from cadence.data.nest import Nest, map_structure
from cadence.data.time_step import TimeStep


@dataclasses.dataclass
class Experience:
    """``T`` steps of a batch of ``B`` environments.

    Attributes:
        time_step: ``[T + 1, B]`` time steps; ``time_step[t]`` was observed before
            ``action[t]`` was taken, and ``time_step[T]`` is the one the next unroll
            starts from (needed to bootstrap).
        action: nest of ``[T, B, *action_shape]``, the action sent to the env at ``t``.
        info: nest of ``[T, B, ...]``, the ``info`` of each ``rollout_step``.
        state: nest of ``[T, B, ...]``, the recurrent state ``rollout_step`` started from
            at each step (already reset at FIRST steps); ``()`` when stateless.
    """

    time_step: TimeStep
    action: Nest
    info: Nest
    state: Nest = ()

    @property
    def initial_state(self) -> Nest:
        """The recurrent state before ``time_step[0]``, ``[B, ...]`` (``()`` when stateless)."""
        return map_structure(lambda x: x[0], self.state)

    @property
    def unroll_length(self) -> int:
        return int(self.time_step.step_type.shape[0]) - 1

    @property
    def batch_size(self) -> int:
        return int(self.time_step.step_type.shape[1])
