"""`make_gym_env`: one Gymnasium environment as a `Batcher` builds its envs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from cadence.envs.environment import PyEnvironment
from cadence.envs.gym_factory import GymEnvFactory


def make_gym_env(
    seed: int,
    name: str | Callable[..., gym.Env],
    max_episode_steps: int | None = None,
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    env_kwargs: dict[str, Any] | None = None,
) -> PyEnvironment:
    """Builds Gymnasium env ``name`` seeded ``seed``, through cadence's adapter.

    The ``create_env`` of a `Batcher` for any Gymnasium id or env class: it is called
    as ``make_gym_env(seed=seed + i, **env_args)``.

    Args:
        seed: the seed of the env's first reset (and of its action space).
        name: a Gymnasium id (``"CartPole-v1"``, ``"module:Id"``) or a callable
            returning a ``gymnasium.Env``.
        max_episode_steps: wraps the env in cadence's `TimeLimit` when set.
        gym_wrappers: Gymnasium wrappers applied in order.
        env_kwargs: keyword arguments for ``gymnasium.make``.

    >>> env = make_gym_env(seed=3, name="CartPole-v1")
    >>> env.reset().observation.shape
    (4,)
    """
    return GymEnvFactory(name, 0, seed, max_episode_steps, gym_wrappers, env_kwargs)()
