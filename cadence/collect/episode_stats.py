"""`EpisodeStats`: returns and lengths of the episodes an unroll completes."""

from __future__ import annotations

from typing import Any

import torch

from cadence.data.time_step import StepType, TimeStep


class EpisodeStats:
    """Accumulates per-environment returns and lengths across unrolls.

    The return of an episode sums the rewards of its non-FIRST steps; its length
    counts them (the number of actions taken).
    """

    def __init__(self, batch_size: int, device: Any = "cpu"):
        self._return = torch.zeros(batch_size, dtype=torch.float64, device=device)
        self._length = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self._info_sums: dict[str, torch.Tensor] = {}

    def update(self, time_steps: TimeStep) -> dict[str, torch.Tensor]:
        """Consumes ``[T, B]`` time steps; returns the completed episodes' stats.

        Returns:
            ``{"return": [N], "length": [N]}`` plus ``"info/<key>": [N]`` holding the
            value of each ``env_info`` key at the episode's LAST step.
        """
        step_type = time_steps.step_type
        first, last = step_type == StepType.FIRST, step_type == StepType.LAST
        rewards = torch.where(first, 0.0, time_steps.reward.double())
        sums = rewards.cumsum(0)  # [T, B]
        steps = torch.arange(1, step_type.shape[0] + 1, device=step_type.device).unsqueeze(1)
        # The latest FIRST at or before each step (-1: none in this unroll): where its episode's
        # sums start; before any, the episode goes on from the last unroll's running values.
        reset = torch.where(first, steps - 1, -1).cummax(0).values
        restarted = reset >= 0
        base = sums.gather(0, reset.clamp(min=0))
        returns = torch.where(restarted, sums - base, self._return + sums)
        lengths = torch.where(restarted, steps - 1 - reset, self._length + steps)
        self._return, self._length = returns[-1].clone(), lengths[-1].clone()
        stats = {"return": returns[last], "length": lengths[last]}
        stats.update({f"info/{k}": v[last] for k, v in time_steps.env_info.items()})
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {"return": self._return.clone(), "length": self._length.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._return = state["return"].to(self._return.device)
        self._length = state["length"].to(self._length.device)
