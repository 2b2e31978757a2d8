"""`ReplayFrameStack`: the last ``num_frames`` observations of an episode, stacked at sample time.

A data transformer (config name ``replay_frame_stack``), not an env wrapper: the
env, and so the replay buffer, see single frames. Its env-side counterpart,
`cadence.envs.EnvFrameStack`, stacks inside the env, so that the buffer stores
every stack whole. Here the replay buffer stores single frames (``num_frames``
times less memory than stored stacks); a replayed step's stack is read from the
buffer at sample time through its episode index, so it never reaches across an
episode start. On the rollout path the stack is built from a per-environment
frame history (explicit state). Both paths repeat the episode's first frame where
the episode has fewer than ``num_frames`` frames yet, so the policy sees the same
stacks in both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch

from cadence.data.nest import Nest, flatten_with_paths
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, Spec, TensorSpec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplayBuffer, ReplaySample
from cadence.transforms.leaves import (
    leaf,
    map_leaves,
    map_spec_leaves,
    select_leaves,
    storage_key,
)
from cadence.transforms.transformer import (
    DataTransformer,
    OrderGroup,
    replace_time_step_fields,
    sample_time_step_fields,
)


class ReplayFrameStack(DataTransformer):
    """Stacks each observation leaf's last ``num_frames`` frames along its first axis.

    The stacks are built after the env: on the rollout path from a per-env history,
    and for replayed samples from the single frames the buffer stores (unlike
    `cadence.envs.EnvFrameStack`, which stacks inside the env, so that the buffer
    holds each frame ``num_frames`` times).

    A leaf of shape ``(C, H, W)`` becomes ``(num_frames * C, H, W)`` (channels of
    the oldest frame first), a grayscale ``(H, W)`` becomes ``(num_frames, H, W)``
    (as Gymnasium's ``FrameStackObservation`` stacks Atari frames), ``(D,)`` becomes
    ``(num_frames * D,)`` and a scalar becomes ``(num_frames,)``. Frames come from the
    same episode only: the episode's first frame fills in for frames before it.

    Args:
        observation_spec: the spec of the observations it receives.
        num_frames: frames per stack.
        keys: the leaves to stack; empty: every leaf.
        replay_buffer: the buffer replayed samples come from; needed only by
            `transform_sample` (on-policy training, evaluation and play stack on
            the rollout path alone).

    Raises:
        ValueError: ``num_frames < 1`` or a key names no leaf.

    >>> spec = TensorSpec((4,))
    >>> ReplayFrameStack(spec, num_frames=3).transformed_observation_spec(spec).shape
    (12,)
    """

    order_group: ClassVar[OrderGroup] = OrderGroup.REPLAY_READER

    def __init__(
        self,
        observation_spec: Spec,
        num_frames: int = 4,
        keys: Sequence[str] = (),
        replay_buffer: ReplayBuffer | None = None,
    ) -> None:
        super().__init__()
        if num_frames < 1:
            raise ValueError(f"ReplayFrameStack: num_frames must be >= 1, got {num_frames}")
        self.num_frames = num_frames
        self.paths = select_leaves(observation_spec, keys, lambda s: True, "ReplayFrameStack", "")
        leaves = dict(flatten_with_paths(observation_spec))
        self._frame_ranks = {path: len(leaves[path].shape) for path in self.paths}
        self.replay_buffer = replay_buffer

    def transformed_observation_spec(self, observation_spec: Spec) -> Spec:
        return map_spec_leaves(observation_spec, self.paths, self._stacked_spec)

    def transform_time_step(self, time_step: TimeStep, state: Nest) -> tuple[TimeStep, Nest]:
        """Stacks from the history in ``state`` (``{path: [B, num_frames - 1, *shape]}``)."""
        first = time_step.is_first()
        history, stacks = {}, {}
        for path in self.paths:
            frame = leaf(time_step.observation, path)
            frames = self._rollout_frames(frame, first, state[path] if state else None)
            history[path] = frames[:, 1:]
            stacks[path] = _merge_frames(frames, self._frame_ranks[path])
        observation = map_leaves(time_step.observation, self.paths, lambda p, _: stacks[p])
        return time_step.replace(observation=observation), history

    def transform_sample(self, sample: ReplaySample) -> ReplaySample:
        """Replaces each window step's frame by its stack, read from the replay buffer."""
        buffer = self._buffer()
        positions = self._frame_positions(buffer, sample.env_ids, sample.positions)
        rows = sample.env_ids.view(-1, 1, 1)
        fields = buffer.storage.fields
        stacks = {
            path: _merge_frames(fields[storage_key(path)][rows, positions], rank, 2)
            for path, rank in self._frame_ranks.items()
        }
        observation = sample_time_step_fields(sample)["observation"]
        observation = map_leaves(observation, self.paths, lambda p, _: stacks[p])
        return replace_time_step_fields(sample, observation=observation)

    def extra_repr(self) -> str:
        return f"num_frames={self.num_frames}, keys={list(self.paths)}"

    # ---------------------------------------------------------------- internal

    def _rollout_frames(
        self, frame: torch.Tensor, first: torch.Tensor, history: torch.Tensor | None
    ) -> torch.Tensor:
        """``[B, num_frames, *shape]``: the history then ``frame``; FIRST rows repeat ``frame``."""
        repeated = frame.unsqueeze(1).expand(-1, self.num_frames - 1, *frame.shape[1:])
        if history is None:
            history = repeated
        else:
            mask = first.view(-1, *([1] * (history.dim() - 1)))
            history = torch.where(mask, repeated, history)
        return torch.cat([history, frame.unsqueeze(1)], dim=1)

    def _frame_positions(
        self, buffer: ReplayBuffer, env_ids: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """``[N, L, num_frames]`` ring positions of each step's frames, oldest first."""
        back = buffer.episode_index.steps_from_episode_start(env_ids, positions)
        offsets = torch.arange(self.num_frames - 1, -1, -1, device=positions.device)
        offsets = torch.minimum(offsets, back.unsqueeze(-1))  # never before the episode start
        return (positions.unsqueeze(-1) - offsets) % buffer.capacity

    def _stacked_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = tuple(spec.shape)
        if len(shape) in (0, 2):  # a scalar or a grayscale image: a new leading axis
            stacked_shape = (self.num_frames, *shape)
        else:
            stacked_shape = (self.num_frames * shape[0], *shape[1:])

        def repeat(bound: np.ndarray) -> np.ndarray:
            bound = np.broadcast_to(bound, shape)
            return np.stack([bound] * self.num_frames).reshape(stacked_shape)

        if isinstance(spec, DiscreteTensorSpec):
            return dataclasses.replace(spec, shape=stacked_shape, nvec=repeat(spec.nvec))
        if isinstance(spec, BoundedTensorSpec):
            return dataclasses.replace(
                spec,
                shape=stacked_shape,
                minimum=repeat(spec.minimum),
                maximum=repeat(spec.maximum),
            )
        return TensorSpec(stacked_shape, spec.dtype)

    def _buffer(self) -> ReplayBuffer:
        if self.replay_buffer is None:
            raise RuntimeError(
                "ReplayFrameStack.transform_sample reads frames from the replay buffer, but it was "
                "built without one; pass replay_buffer= (the off-policy scheme's buffer)"
            )
        return self.replay_buffer


def _merge_frames(frames: torch.Tensor, frame_rank: int, frame_dim: int = 1) -> torch.Tensor:
    """``[*B, K, d0, *rest] -> [*B, K * d0, *rest]``; frames of rank 0 or 2 keep ``K`` apart.

    ``frame_rank`` is the rank of one frame: a scalar stacks to ``[*B, K]`` and an
    ``(H, W)`` image to ``[*B, K, H, W]`` (``K`` channels), vectors and ``(C, H, W)``
    images along their first axis.
    """
    if frame_rank in (0, 2):
        return frames
    return frames.flatten(frame_dim, frame_dim + 1)
