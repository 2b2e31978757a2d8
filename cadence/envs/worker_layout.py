"""Placing a batch of envs on worker processes: contiguous slices, cores, reseeded factories.

`split_evenly` gives each worker a contiguous slice of the batch; `worker_cores` the core
each worker is pinned to, if any; `with_seed_offset` the factory of a restarted worker's
env, its seed moved so that it does not replay the run's first episodes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from cadence.envs.environment import PyEnvironment

logger = logging.getLogger(__name__)


@runtime_checkable
class SeedOffsetFactory(Protocol):
    """An env factory that can build the same env with its seed moved by ``offset``."""

    def with_seed_offset(self, offset: int) -> Callable[[], PyEnvironment]: ...


def with_seed_offset(fn: Callable[[], PyEnvironment], offset: int) -> Callable[[], PyEnvironment]:
    """``fn`` with its seed moved by ``offset`` where it supports it (`SeedOffsetFactory`)."""
    if offset and isinstance(fn, SeedOffsetFactory):
        return fn.with_seed_offset(offset)
    return fn


def worker_cores(num_workers: int, pin: bool | None) -> list[int] | None:
    """The core each worker is pinned to (see `ParallelEnvironment`'s ``pin_workers``), or ``None``."""
    if pin is False or not hasattr(os, "sched_setaffinity"):
        if pin:
            logger.warning("pin_workers: this platform cannot pin processes to cores; not pinned")
        return None
    cores = sorted(os.sched_getaffinity(0))
    if pin is None and (len(cores) < 2 or num_workers != len(cores)):
        return None
    return [cores[w % len(cores)] for w in range(num_workers)]


def split_evenly(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` slices of ``num_envs`` for ``min(num_workers, num_envs)`` workers.

    >>> split_evenly(5, 2)
    [(0, 3), (3, 5)]
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    num_workers = min(num_workers, num_envs)
    base, extra = divmod(num_envs, num_workers)
    slices, start = [], 0
    for worker in range(num_workers):
        stop = start + base + (worker < extra)
        slices.append((start, stop))
        start = stop
    return slices
