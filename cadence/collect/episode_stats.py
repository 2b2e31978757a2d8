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
        returns, lengths, infos = [], [], {k: [] for k in time_steps.env_info}
        for t in range(time_steps.step_type.shape[0]):
            step = time_steps[t]
            first = step.step_type == StepType.FIRST
            self._return = torch.where(first, 0.0, self._return + step.reward.double())
            self._length = torch.where(first, 0, self._length + 1)
            last = step.step_type == StepType.LAST
            returns.append(self._return[last])
            lengths.append(self._length[last])
            for key, value in step.env_info.items():
                infos[key].append(value[last])
        stats = {"return": torch.cat(returns), "length": torch.cat(lengths)}
        stats.update({f"info/{k}": torch.cat(v) for k, v in infos.items()})
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {"return": self._return.clone(), "length": self._length.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._return = state["return"].to(self._return.device)
        self._length = state["length"].to(self._length.device)
