"""The `Batcher`'s arguments: their checks, the agents' seeds they give, per-slot rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cadence.collect.batcher.transport import Backend
from cadence.data.dict_tensor import DictTensor

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


def per_slot(
    values: DictTensor | None, example: DictTensor | None, n_slots: int, what: str
) -> DictTensor:
    """``values`` checked to have a row per slot; ``None``: ``example``'s first row in each.

    Raises:
        ValueError: ``values`` has another number of rows than ``n_slots``.
    """
    if values is None:
        if example is None or example.empty():
            return DictTensor({}, batch_size=n_slots)
        example = example.to_dict()
        values = DictTensor(
            {k: v[:1].expand(n_slots, *v.shape[1:]).clone() for k, v in example.items()}
        )
    if values.empty():
        return DictTensor({}, batch_size=n_slots)
    if values.n_elems() != n_slots:
        raise ValueError(
            f"{what} must have one row per slot (n_processes * n_envs = {n_slots}), "
            f"got {values.n_elems()}"
        )
    return values.to("cpu")
