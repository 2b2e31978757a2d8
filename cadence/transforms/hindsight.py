"""`HindsightExperienceTransformer`: relabel replayed goals with goals achieved later.

Hindsight experience replay (Andrychowicz et al. 2017, https://arxiv.org/abs/1707.01495),
"future" strategy: a replayed window keeps its goal with probability
``1 - her_proportion``; otherwise its desired goal becomes the goal achieved at a
step drawn uniformly from the same episode, at or after the window's last step
in that episode. Rewards (and, for environments that end an episode on success,
discounts and step types) are recomputed for the new goal, so a failed episode
teaches how to reach the states it did reach.

Goal environments have Dict observations with ``achieved_goal`` and
``desired_goal`` leaves (Gymnasium-Robotics' convention) and the sparse reward
``-1`` while ``||achieved - desired|| > distance_threshold``, else ``0``.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.replay.buffer import ReplayBuffer, ReplaySample
from cadence.transforms.leaves import leaf, map_leaves, select_leaves, storage_key
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


def sparse_goal_reward(
    achieved_goal: torch.Tensor, desired_goal: torch.Tensor, distance_threshold: float
) -> torch.Tensor:
    """``-1`` where the goals are farther apart than ``distance_threshold``, else ``0``.

    Args:
        achieved_goal: ``[*B, *goal_shape]``.
        desired_goal: ``[*B, *goal_shape]``.
        distance_threshold: the largest Euclidean distance that counts as success.

    Returns:
        ``[*B]`` float32 rewards.
    """
    return torch.where(goal_distance(achieved_goal, desired_goal) > distance_threshold, -1.0, 0.0)


def goal_distance(achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
    """``[*B]`` Euclidean distances between goals ``[*B, *goal_shape]`` (``[*B, D]`` usually)."""
    difference = (achieved_goal.float() - desired_goal.float()).flatten(desired_goal.dim() - 1)
    return torch.linalg.vector_norm(difference, dim=-1)


class HindsightExperienceTransformer(DataTransformer):
    """Relabels a fraction of replayed windows with future achieved goals of their episode.

    Args:
        observation_spec: a Dict spec with the two goal leaves.
        replay_buffer: the buffer replayed samples come from (future goals are
            read from it through its episode index).
        her_proportion: the probability that a window is relabelled.
        distance_threshold: success radius of the sparse reward.
        end_episode_on_success: whether reaching the goal ends the episode in this
            environment (as in bit flipping); then a relabelled step that reaches
            its new goal becomes a terminal LAST (discount 0), and one that no
            longer reaches it has discount 1. Fetch tasks never end on success.
        achieved_goal_key: path of the achieved goal in the observation.
        desired_goal_key: path of the desired goal in the observation.

    Raises:
        ValueError: the goal keys are missing, differ in shape, or ``her_proportion``
            is outside ``[0, 1]``.
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.REPLAY_READER

    def __init__(
        self,
        observation_spec: Spec,
        replay_buffer: ReplayBuffer | None = None,
        her_proportion: float = 0.8,
        distance_threshold: float = 0.05,
        end_episode_on_success: bool = False,
        achieved_goal_key: str = "achieved_goal",
        desired_goal_key: str = "desired_goal",
    ) -> None:
        super().__init__()
        if not 0.0 <= her_proportion <= 1.0:
            raise ValueError(f"her_proportion must be in [0, 1], got {her_proportion}")
        keys = (achieved_goal_key, desired_goal_key)
        name = "HindsightExperienceTransformer"
        select_leaves(observation_spec, keys, lambda s: True, name, "")
        shapes = [tuple(leaf(observation_spec, key).shape) for key in keys]
        if shapes[0] != shapes[1]:
            raise ValueError(
                f"{name}: {achieved_goal_key!r} has shape {shapes[0]} but {desired_goal_key!r} "
                f"has {shapes[1]}; goals must be comparable"
            )
        self.replay_buffer = replay_buffer
        self.her_proportion = her_proportion
        self.distance_threshold = distance_threshold
        self.end_episode_on_success = end_episode_on_success
        self.achieved_goal_key = achieved_goal_key
        self.desired_goal_key = desired_goal_key

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        return time_step, state  # the policy acts on the environment's own goal

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        buffer = self._buffer()
        first_positions = sample.positions[:, 0]
        to_end = buffer.episode_index.steps_to_episode_end(sample.env_ids, first_positions)
        future = _future_offsets(to_end, sample.positions.shape[1])
        relabel = torch.rand(to_end.shape, device=to_end.device) < self.her_proportion
        future_positions = (first_positions + future) % buffer.capacity
        achieved_ring = buffer.storage.fields[storage_key(self.achieved_goal_key)]
        new_goal = achieved_ring[sample.env_ids, future_positions]  # [N, *goal_shape]
        # Only the window's steps in the first step's episode take the new goal.
        steps = torch.arange(sample.positions.shape[1], device=to_end.device)
        mask = relabel.unsqueeze(1) & (steps <= to_end.unsqueeze(1))  # [N, L]
        return self._relabel(sample, new_goal, mask)

    def extra_repr(self) -> str:
        return (
            f"her_proportion={self.her_proportion}, distance_threshold={self.distance_threshold}, "
            f"end_episode_on_success={self.end_episode_on_success}"
        )

    # ---------------------------------------------------------------- internal

    def _relabel(
        self, sample: ReplaySample, new_goal: torch.Tensor, mask: torch.Tensor
    ) -> ReplaySample:
        """``sample`` with goal, reward (and maybe discount, step type) replaced where ``mask``."""
        fields = sample_time_step_fields(sample)
        observation = fields["observation"]
        goal_mask = mask.view(*mask.shape, *([1] * (new_goal.dim() - 1)))
        old_goal = leaf(observation, self.desired_goal_key)
        desired = torch.where(goal_mask, new_goal.unsqueeze(1).to(old_goal.dtype), old_goal)
        achieved = leaf(observation, self.achieved_goal_key)
        reward = sparse_goal_reward(achieved, desired, self.distance_threshold)
        # A FIRST step's reward belongs to no action; leave it as the environment gave it.
        changed = mask & (fields["step_type"] != StepType.FIRST)
        updates = {
            "observation": map_leaves(observation, {self.desired_goal_key}, lambda p, x: desired),
            "reward": torch.where(changed, reward.to(fields["reward"].dtype), fields["reward"]),
        }
        if self.end_episode_on_success:
            success = changed & (reward == 0)
            discount = torch.where(success, 0.0, 1.0).to(fields["discount"].dtype)
            updates["discount"] = torch.where(changed, discount, fields["discount"])
            updates["step_type"] = torch.where(success, StepType.LAST, fields["step_type"])
        return replace_time_step_fields(sample, **updates)

    def _buffer(self) -> ReplayBuffer:
        if self.replay_buffer is None:
            raise RuntimeError(
                "HindsightExperienceTransformer relabels replayed samples from a replay buffer, "
                "but it was built without one; it works with off-policy algorithms only"
            )
        return self.replay_buffer


def _future_offsets(to_end: torch.Tensor, length: int) -> torch.Tensor:
    """``[N]`` offsets from each window's first step to its future goal's step.

    Drawn uniformly from ``[min(length - 1, to_end), to_end]``: at or after the
    window's last step that lies in the first step's episode, up to the episode's
    end (or the newest stored step while the episode is still being collected).
    """
    earliest = to_end.clamp(max=length - 1)
    span = (to_end - earliest + 1).double()
    draw = torch.rand(to_end.shape, dtype=torch.float64, device=to_end.device)
    return earliest + (draw * span).long().clamp(max=(span - 1).long())
