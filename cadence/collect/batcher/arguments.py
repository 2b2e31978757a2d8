"""The `Batcher`'s constructor arguments: their checks, and the agents' seeds they give."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cadence.collect.batcher.transport import Backend

Mode = Literal["continuing", "episodic"]
"""``"continuing"``: an env whose episode ends starts the next at once; ``"episodic"``:
it waits for the next `Batcher.reset`."""


def check_arguments(
    n_timesteps: int, n_processes: int, n_envs: int, mode: Mode, backend: Backend
) -> None:
    for name, value in (("n_timesteps", n_timesteps), ("n_processes", n_processes)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    if mode not in ("continuing", "episodic"):
        raise ValueError(f"mode must be 'continuing' or 'episodic', got {mode!r}")
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")


def agent_seeds_of(
    agent_seeds: Sequence[int] | None, seed: int, n_processes: int, n_envs: int
) -> list[int]:
    """Worker ``w``'s agent seed: ``agent_seeds[w]``, or ``seed + w * n_envs``."""
    if agent_seeds is None:
        return [seed + w * n_envs for w in range(n_processes)]
    if len(agent_seeds) != n_processes:
        raise ValueError(
            f"agent_seeds must hold one seed per worker (n_processes = {n_processes}), "
            f"got {len(agent_seeds)}"
        )
    return [int(s) for s in agent_seeds]


def check_timeouts(**timeouts: float | None) -> None:
    for name, value in timeouts.items():
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be > 0 or None, got {value}")
