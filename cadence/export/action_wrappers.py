"""The action wrappers of a run's ``env.wrappers``, folded into the exported policy.

A run whose env has, say, ``NormalizedAction`` trains a policy that acts in ``[-1, 1]``;
the wrapper maps that onto the env's bounds. The exported file should give what the
Gymnasium env receives, so the action wrappers cadence can express as tensor operations
are folded into it, outermost first, as the action passes through them:

- ``NormalizedAction`` (cadence): clip to ``[-1, 1]``, then affinely onto the inner bounds;
- ``ContinuousActionClip`` (cadence) and Gymnasium's ``ClipAction``: clip to the inner bounds;
- Gymnasium's ``RescaleAction``: affinely from its ``[min_action, max_action]`` onto the
  inner bounds.

Folding stops at the first other action wrapper (the user's own): that one and those
inside it stay outside the file, which the sidecar says. Observation wrappers always stay
outside: the file's observation is the wrapped env's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cadence.envs.gym_factory import GymEnvFactory
from cadence.envs.wrapper_config import gym_wrappers, resolve_wrapper

FoldKind = Literal["normalize", "clip", "rescale"]
_FOLDABLE: dict[str, FoldKind] = {
    "NormalizedAction": "normalize",
    "ContinuousActionClip": "clip",
    "ClipAction": "clip",
    "RescaleAction": "rescale",
}


@dataclasses.dataclass(frozen=True)
class FoldedActionWrappers:
    """What `fold_action_wrappers` found.

    Attributes:
        action_map: maps the policy's action ``[B, A]`` to the action the innermost folded
            wrapper passes on; None when there is nothing to fold.
        action_space: the action space that action lives in, or None.
        folded: the folded wrappers' names, outermost first.
        outside: the action wrappers left outside the file, outermost first.
    """

    action_map: nn.Module | None
    action_space: gym.spaces.Box | None
    folded: tuple[str, ...]
    outside: tuple[str, ...]


class ActionWrapperMap(nn.Module):
    """Folded action wrappers: ``[B, A]`` actions through each, outermost first.

    Args:
        steps: ``(kind, outer_low, outer_high, inner_low, inner_high)`` per wrapper, the
            bounds ``[A]`` of the space it takes actions in and of the one it passes on.
    """

    def __init__(
        self, steps: list[tuple[FoldKind, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    ):
        super().__init__()
        self.kinds = [kind for kind, *_ in steps]
        for index, (_, *bounds) in enumerate(steps):
            for name, bound in zip(("outer_low", "outer_high", "low", "high"), bounds, strict=True):
                value = torch.as_tensor(np.asarray(bound, np.float32))
                self.register_buffer(f"_{name}_{index}", value, persistent=False)

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        action = action.float()
        for index, kind in enumerate(self.kinds):
            low, high = getattr(self, f"_low_{index}"), getattr(self, f"_high_{index}")
            if kind == "clip":
                action = torch.minimum(torch.maximum(action, low), high)
                continue
            if kind == "normalize":
                outer_low, outer_high = -torch.ones_like(low), torch.ones_like(high)
                action = torch.minimum(torch.maximum(action, outer_low), outer_high)
            else:
                outer_low = getattr(self, f"_outer_low_{index}")
                outer_high = getattr(self, f"_outer_high_{index}")
            action = low + (action - outer_low) * (high - low) / (outer_high - outer_low)
        return action


def fold_action_wrappers(config: Any) -> FoldedActionWrappers:
    """The action wrappers of ``config.env.all_wrappers`` that fold into the exported file.

    The Gymnasium env is built (not reset) only when the config names an action wrapper.
    """
    names = [item["name"] for item in config.env.all_wrappers]
    if not any(issubclass(resolve_wrapper(name), gym.ActionWrapper) for name in names):
        return FoldedActionWrappers(None, None, (), ())
    factory = GymEnvFactory(
        config.env.name,
        0,
        config.seed,
        gym_wrappers=gym_wrappers(config.env.all_wrappers),
        env_kwargs=dict(config.env.env_kwargs or {}),
    )
    env = factory.make_gym()
    try:
        return _fold(env)
    finally:
        env.close()


def _fold(env: gym.Env) -> FoldedActionWrappers:
    steps, folded, outside, space = [], [], [], None
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.ActionWrapper) or type(env).__name__ in _FOLDABLE:
            name = type(env).__name__
            if name in _FOLDABLE and not outside:
                outer, inner = env.action_space, env.env.action_space
                steps.append((_FOLDABLE[name], outer.low, outer.high, inner.low, inner.high))
                folded.append(name)
                space = inner
            else:
                outside.append(name)
        env = env.env
    action_map = ActionWrapperMap(steps) if steps else None
    return FoldedActionWrappers(action_map, space, tuple(folded), tuple(outside))
