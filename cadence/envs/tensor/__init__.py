"""Tensor-native batched environments: the `Environment` contract implemented in torch.

No workers and no numpy: the whole batch steps as a few tensor operations on any
device. `TENSOR_ENVS` maps a Gymnasium id to its tensor-native implementation, a
callable ``(num_envs, *, seed, device, max_episode_steps, **env_kwargs)``. Each
is a `TensorEnvironment` (the shared episode bookkeeping) around one family's
`TensorDynamics`; ``dtype=torch.float64`` makes its trajectories match
Gymnasium's to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cadence.envs.environment import Environment
from cadence.envs.tensor.cartpole import CartPoleDynamics, make_cartpole
from cadence.envs.tensor.environment import TensorDynamics, TensorEnvironment
from cadence.envs.tensor.pendulum import PendulumDynamics, make_pendulum

TENSOR_ENVS: dict[str, Callable[..., Environment]] = {
    "CartPole-v1": make_cartpole,
    "Pendulum-v1": make_pendulum,
}

__all__ = [
    "TENSOR_ENVS",
    "CartPoleDynamics",
    "PendulumDynamics",
    "TensorDynamics",
    "TensorEnvironment",
    "has_tensor_env",
    "make_cartpole",
    "make_pendulum",
    "make_tensor_env",
    "no_tensor_env_message",
]


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
    """Builds ``num_envs`` tensor-native envs of Gymnasium id ``name``.

    Args:
        name: a key of `TENSOR_ENVS`.
        num_envs: the batch size.
        **kwargs: ``seed``, ``device``, ``max_episode_steps``, ``dtype`` and the
            env's own options (Gymnasium's ``env_kwargs``).

    Raises:
        ValueError: no tensor-native implementation of ``name``.
    """
    if name not in TENSOR_ENVS:
        raise ValueError(no_tensor_env_message(name))
    return TENSOR_ENVS[name](num_envs, **kwargs)
