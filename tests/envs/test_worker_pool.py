"""`WorkerPool`'s refusal to start workers from a daemonic process."""

from __future__ import annotations

import multiprocessing

import pytest

from cadence.envs import make_env


def _build_parallel_env(_: int) -> int:
    with make_env("CartPole-v1", num_envs=2, backend="parallel", seed=0) as env:
        return env.batch_size


def test_a_pool_worker_building_a_parallel_env_is_told_what_to_do():
    # A real multiprocessing.Pool worker is daemonic: multiprocessing itself would only
    # assert "daemonic processes are not allowed to have children".
    with multiprocessing.get_context("fork").Pool(1) as pool:
        with pytest.raises(RuntimeError, match="is daemonic, e.g. a multiprocessing.Pool") as e:
            pool.apply(_build_parallel_env, (0,))
    assert "concurrent.futures.ProcessPoolExecutor" in str(e.value)
    assert "env.backend=serial" in str(e.value)
