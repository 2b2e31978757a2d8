"""`RewardNormalizer`: rewards scaled by the running spread of the discounted return."""

from __future__ import annotations

from typing import ClassVar

import torch

from cadence.data.nest import Nest
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample
from cadence.transforms.reward import map_sample_reward
from cadence.transforms.running_stats import RunningMeanStd
from cadence.transforms.transformer import DataTransformer, OrderGroup


class RewardNormalizer(DataTransformer):
    """``clamp(r / sqrt(var(G) + epsilon), -clip, clip)``, G the running discounted return.

    Each environment's return ``G_t = gamma * G_{t-1} + r_t`` (0 at a FIRST) is
    tracked on the rollout path; in training mode its values go into running
    statistics. Dividing by their standard deviation without centering keeps the
    reward's sign and the optimal policy (Engstrom et al. 2020,
    https://arxiv.org/abs/2005.12729, "reward scaling"; Stable-Baselines3's
    ``VecNormalize``). With ``gamma = 0`` it scales by the spread of the rewards.
    Eval mode and replayed minibatches use the statistics without changing them.

    Args:
        gamma: discount of the tracked return.
        clip: bound on the normalized rewards.
        epsilon: added to the variance before the square root.

    >>> normalizer = RewardNormalizer(gamma=0.0)
    >>> normalizer.stats.update(torch.tensor([2.0, -2.0]))
    >>> normalizer.normalize(torch.tensor([4.0])).tolist()
    [2.0]
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.OTHER

    def __init__(self, gamma: float = 0.99, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"RewardNormalizer: gamma must be in [0, 1], got {gamma}")
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        self.stats = RunningMeanStd(())

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        reward = time_step.reward
        if self.training:
            first = time_step.is_first()
            fresh = not isinstance(state, torch.Tensor)
            previous = torch.zeros_like(reward, dtype=torch.float64) if fresh else state
            state = torch.where(first, 0.0, previous * self.gamma + reward.double())
            self.stats.update(state[~first])
        return time_step.replace(reward=self.normalize(reward)), state

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        return map_sample_reward(sample, self.normalize)

    def normalize(self, reward: torch.Tensor) -> torch.Tensor:
        """Rewards of any shape divided by the return's standard deviation, clipped, float32."""
        std = self.stats.std(self.epsilon).float()
        return (reward.float() / std).clamp(-self.clip, self.clip)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, clip={self.clip}"
