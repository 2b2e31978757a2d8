"""Step rows: how an `Experience` is laid out in the replay storage.

One row per env per time step::

    {"time_step": {"step_type", "reward", "discount", "observation",
                   "prev_action", "env_id", "env_info"},
     "action": ...,   # the action taken at that time step
     "info": ...,     # whatever the algorithm's rollout_step returned as info
     "state": ...}    # the recurrent state the step started from (stateful algorithms
                      # that read it back only)

An unroll's ``time_step`` is ``[T + 1, B]`` but its last step has no action yet;
the collector starts the next unroll from it, so only the first ``T`` steps are
stored and every stored step comes with its action.
"""

from __future__ import annotations

from typing import Any

from cadence.data.experience import Experience
from cadence.data.nest import Nest, flatten, map_structure
from cadence.data.time_step import TimeStep

STEP_TYPE_KEY = "time_step/step_type"
"""The key of the step type in a row (the episode index reads it)."""


def experience_rows(experience: Experience, with_state: bool = True) -> dict[str, Any]:
    """The ``[T, B]`` rows of an unroll, raw (before any data transformer).

    Args:
        experience: ``time_step`` ``[T + 1, B]``; ``action``, ``info`` and ``state`` ``[T, B]``.
        with_state: store the recurrent state (for an algorithm that reads it back; see
            `cadence.algorithms.algorithm.Algorithm.replays_state`).

    Returns:
        the row nest with leaves ``[T, B, ...]``.
    """
    time_step = experience.time_step
    raw = time_step.untransformed if time_step.untransformed is not None else time_step
    steps = experience.unroll_length
    rows = {
        "time_step": map_structure(lambda x: x[:steps], raw.to_dict(untransformed=False)),
        "action": experience.action,
        "info": experience.info,
    }
    if with_state and flatten(experience.state):
        rows["state"] = experience.state
    return rows


def time_step_from_rows(rows: Nest) -> TimeStep:
    """The `TimeStep` of rows made by `experience_rows` (any leading dims, e.g. ``[N, L]``).

    A data transformer may have added ``untransformed`` (the raw fields, a dict of
    the same form) to the rows of a replayed sample; it becomes a `TimeStep` too.
    """
    return TimeStep.from_dict(rows["time_step"])
