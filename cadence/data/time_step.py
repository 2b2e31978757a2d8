"""`StepType` and `TimeStep`: what an environment returns for each step.

The ``step_type``/``discount`` pair tells termination from time-limit truncation
(DESIGN §2):

==========  ========  ==================================================
step_type   discount  meaning
==========  ========  ==================================================
FIRST       1         first step of an episode (from reset)
MID         1         any other step
LAST        0         terminated: do not bootstrap from this step
LAST        1         truncated by a time limit: bootstrap, but end here
==========  ========  ==================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest, map_structure


class StepType:
    """The step types: plain ints, compared with ``[B]`` int64 step-type tensors.

    Not an ``IntEnum``: ``torch.compile`` cannot trace a tensor compared with an enum
    member (it fails the whole compiled update), while it traces a tensor compared with
    an int.

    >>> StepType.name(StepType.LAST)
    'LAST'
    """

    FIRST = 0
    MID = 1
    LAST = 2

    @staticmethod
    def name(value: int) -> str:
        """``"FIRST"``, ``"MID"`` or ``"LAST"`` for a step type's value."""
        return ("FIRST", "MID", "LAST")[value]


@dataclasses.dataclass
class TimeStep:
    """One step of a batch of environments; every leaf is batched along dim 0.

    Attributes:
        step_type: ``[B]`` int64, a `StepType`.
        reward: ``[B]`` float32, the reward for ``prev_action``.
        discount: ``[B]`` float32, 0 where the episode terminated, else 1.
        observation: nest of ``[B, *obs_shape]``, the result of ``prev_action``.
        prev_action: nest of ``[B, *action_shape]``, zeros on FIRST.
        env_id: ``[B]`` int64, which environment of the batch produced each row.
        env_info: dict of ``[B]`` numeric values from the environment's ``info``.
        untransformed: the whole time step before any data transformer ran, or None.
    """

    step_type: Any
    reward: Any
    discount: Any
    observation: Nest
    prev_action: Nest
    env_id: Any
    env_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    untransformed: TimeStep | None = None

    def is_first(self) -> Any:
        return self.step_type == StepType.FIRST

    def is_mid(self) -> Any:
        return self.step_type == StepType.MID

    def is_last(self) -> Any:
        return self.step_type == StepType.LAST

    def map(self, fn: Callable[[Any], Any]) -> TimeStep:
        """Applies ``fn`` to every leaf (including those of ``untransformed``)."""
        return TimeStep(
            step_type=fn(self.step_type),
            reward=fn(self.reward),
            discount=fn(self.discount),
            observation=map_structure(fn, self.observation),
            prev_action=map_structure(fn, self.prev_action),
            env_id=fn(self.env_id),
            env_info={k: fn(v) for k, v in self.env_info.items()},
            untransformed=None if self.untransformed is None else self.untransformed.map(fn),
        )

    def __getitem__(self, index: Any) -> TimeStep:
        return self.map(lambda x: x[index])

    def to(self, device: torch.device | str) -> TimeStep:
        return self.map(lambda x: x.to(device))

    def clone(self) -> TimeStep:
        return self.map(lambda x: x.clone() if isinstance(x, torch.Tensor) else np.copy(x))

    def replace(self, **changes: Any) -> TimeStep:
        return dataclasses.replace(self, **changes)

    def to_dict(self, untransformed: bool = True) -> dict[str, Any]:
        """The fields as a plain dict, leaves shared (for replay rows and checkpoints).

        Args:
            untransformed: whether to include ``untransformed`` (None, or itself such a
                dict); replay rows leave it out, as the stored step is already the raw one.

        Returns:
            ``{"step_type", "reward", "discount", "observation", "prev_action", "env_id",
            "env_info"}``, plus ``"untransformed"`` if asked.
        """
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        raw = fields.pop("untransformed")
        if untransformed:
            fields["untransformed"] = None if raw is None else raw.to_dict()
        return fields

    @staticmethod
    def from_dict(fields: dict[str, Any]) -> TimeStep:
        """The inverse of `to_dict`; ``untransformed`` may be missing, None or such a dict."""
        fields = dict(fields)
        untransformed = fields.pop("untransformed", None)
        if isinstance(untransformed, dict):
            untransformed = TimeStep.from_dict(untransformed)
        return TimeStep(**fields, untransformed=untransformed)

    @staticmethod
    def stack(steps: Sequence[TimeStep], dim: int = 0) -> TimeStep:
        """Stacks time steps leaf-wise along a new dimension ``dim``."""
        return _combine(steps, lambda xs: _stack(xs, dim))

    @staticmethod
    def cat(steps: Sequence[TimeStep], dim: int = 0) -> TimeStep:
        """Concatenates time steps leaf-wise along an existing dimension ``dim``."""
        return _combine(steps, lambda xs: _cat(xs, dim))


def _combine(steps: Sequence[TimeStep], fn: Callable[[list[Any]], Any]) -> TimeStep:
    first = steps[0]
    untransformed = None
    if first.untransformed is not None:
        untransformed = _combine([s.untransformed for s in steps], fn)
    return TimeStep(
        step_type=fn([s.step_type for s in steps]),
        reward=fn([s.reward for s in steps]),
        discount=fn([s.discount for s in steps]),
        observation=map_structure(lambda *xs: fn(list(xs)), *(s.observation for s in steps)),
        prev_action=map_structure(lambda *xs: fn(list(xs)), *(s.prev_action for s in steps)),
        env_id=fn([s.env_id for s in steps]),
        env_info={k: fn([s.env_info[k] for s in steps]) for k in first.env_info},
        untransformed=untransformed,
    )


def _stack(xs: list[Any], dim: int) -> Any:
    if isinstance(xs[0], torch.Tensor):
        return torch.stack(xs, dim)
    return np.stack(xs, dim)


def _cat(xs: list[Any], dim: int) -> Any:
    if isinstance(xs[0], torch.Tensor):
        return torch.cat(xs, dim)
    return np.concatenate(xs, dim)


# A pytree node for torch (its leaves are the fields' tensors), so that a compiled
# function can take and return time steps (`cadence.collect.Collector`'s compiled step).
torch.export.register_dataclass(TimeStep)
