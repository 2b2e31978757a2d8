"""The Batcher workers' transport: local processes (`WorkerPool`) or Ray actors
(`cadence.collect.batcher.ray_backend.RayWorkerPool`)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Mapping
from typing import Any, Literal

from cadence.envs.parallel_worker import start_resource_tracker
from cadence.envs.worker_pool import WorkerPool

Backend = Literal["local", "ray"]
StartMethod = Literal["forkserver", "spawn", "fork"]


def make_pool(
    backend: Backend,
    n_processes: int,
    timeout_s: float | None,
    start_method: StartMethod,
    ray_actor_options: Mapping[str, Any] | None,
) -> Any:
    """The workers' transport: a `WorkerPool` of processes, or a `RayWorkerPool` of actors."""
    if backend == "ray":
        try:
            import ray  # noqa: F401 - only whether it imports
        except ImportError as error:
            raise ImportError(
                f"Batcher(backend='ray') needs Ray ({error}): pip install 'cadence[ray]'"
            ) from error
        from cadence.collect.batcher.ray_backend import RayWorkerPool

        return RayWorkerPool(n_processes, timeout_s, ray_actor_options)
    context = mp.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload(["cadence.collect.batcher.worker"])
    start_resource_tracker()  # the workers' own would unlink the blocks as they die
    return WorkerPool(context, n_processes, timeout_s)
