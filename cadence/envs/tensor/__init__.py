"""Tensor-native batched environments: the `Environment` contract implemented in torch.

No workers and no numpy: the whole batch steps as a few tensor operations on any
device. `TENSOR_ENVS` maps a Gymnasium id to its tensor-native implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cadence.envs.environment import Environment

TENSOR_ENVS: dict[str, Callable[..., Environment]] = {}


def has_tensor_env(name: str) -> bool:
    return name in TENSOR_ENVS


def no_tensor_env_message(name: str, has_gym_wrappers: bool = False) -> str:
    if has_gym_wrappers:
        return (
            f"backend='tensor' cannot apply Gymnasium wrappers to {name!r}; drop the wrappers "
            "or use backend='serial'/'parallel'"
        )
    known = ", ".join(sorted(TENSOR_ENVS)) or "none"
    return (
        f"No tensor-native implementation of {name!r} (cadence has: {known}); "
        "use backend='serial', 'parallel' or 'auto'"
    )


def make_tensor_env(name: str, num_envs: int, **kwargs: Any) -> Environment:
    return TENSOR_ENVS[name](num_envs=num_envs, **kwargs)
