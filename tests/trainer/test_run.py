"""`cadence.trainer.run`: how the learner's torch threads share the machine with env workers."""

from __future__ import annotations

import os
import types

import pytest
import torch

from cadence.envs.worker_pool import available_cores
from cadence.trainer.config import TrainerConfig
from cadence.trainer.run import _share_cores_with_env_workers


@pytest.fixture
def torch_threads():
    """Restores torch's thread count after the test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_torch_leaves_the_env_workers_their_cores(torch_threads):
    torch.set_num_threads(available_cores())
    workers = max(1, available_cores() - 1)
    _share_cores_with_env_workers(TrainerConfig(), types.SimpleNamespace(num_workers=workers))
    assert torch.get_num_threads() == max(1, available_cores() - workers)


def test_an_explicit_thread_count_or_an_env_without_workers_is_left_alone(torch_threads):
    torch.set_num_threads(2)
    _share_cores_with_env_workers(
        TrainerConfig(num_threads=2), types.SimpleNamespace(num_workers=2)
    )
    _share_cores_with_env_workers(TrainerConfig(), types.SimpleNamespace())  # e.g. serial
    assert torch.get_num_threads() == 2


@pytest.mark.timeout(120)
def test_the_parallel_back_ends_spin_pinning_and_timeout_are_set_from_the_config():
    import cadence
    from cadence.trainer.run import make_training_env

    config = cadence.load_config(
        "ppo_cartpole",
        [
            "env.backend=parallel",
            "env.num_envs=2",
            "env.spin_us=0",
            "env.pin_workers=false",
            "env.step_timeout_s=7.5",
        ],
    )
    with make_training_env(config, config.env.num_envs, config.seed) as env:
        assert env.spin_us == 0.0 and env.step_timeout_s == 7.5
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None:  # not pinned, though there is one worker per core on CI
            assert all(os.sched_getaffinity(p.pid) == allowed for p in env.processes)
        assert env.step(torch.zeros(2, dtype=torch.int64)).step_type.shape == (2,)
