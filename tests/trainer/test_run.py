"""`cadence.trainer.run`: how the learner's torch threads share the machine with env workers
(fewer while the workers step, every one while it learns)."""

from __future__ import annotations

import os
import types

import pytest
import torch

from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.collect.unroll import Collector
from cadence.envs.make import make_env
from cadence.envs.worker_pool import available_cores
from cadence.networks import NetworkConfig
from cadence.trainer.config import TrainerConfig
from cadence.trainer.placement import Placement
from cadence.trainer.run import _acting_threads, train


@pytest.fixture
def torch_threads():
    """Restores torch's thread count after the test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_torch_acts_on_the_cores_the_env_workers_leave(torch_threads):
    torch.set_num_threads(available_cores())
    workers = max(1, available_cores() - 1)
    env = types.SimpleNamespace(num_workers=workers)
    acting = _acting_threads(TrainerConfig(), env)
    left = max(1, available_cores() - workers)
    assert acting == (left if left < available_cores() else None)
    assert torch.get_num_threads() == available_cores()  # the updates keep every core


def test_an_explicit_thread_count_or_an_env_without_workers_acts_on_every_thread(torch_threads):
    torch.set_num_threads(2)
    assert (
        _acting_threads(TrainerConfig(num_threads=2), types.SimpleNamespace(num_workers=2)) is None
    )
    assert _acting_threads(TrainerConfig(), types.SimpleNamespace()) is None  # e.g. serial
    assert torch.get_num_threads() == 2


def test_the_collector_acts_with_its_acting_threads_and_gives_the_rest_back(torch_threads):
    torch.set_num_threads(2)
    env = make_env("CartPole-v1", 2, "serial", seed=0)
    algorithm = make_ppo(PPOConfig(), env.observation_spec, env.action_spec, NetworkConfig())
    seen = []
    rollout_step = algorithm.rollout_step

    def counted(*args):
        seen.append(torch.get_num_threads())
        return rollout_step(*args)

    algorithm.rollout_step = counted
    with env:
        Collector(env, algorithm, 4, acting_threads=1).unroll()
        assert seen == [1] * 4
        assert torch.get_num_threads() == 2
        Collector(env, algorithm, 4).unroll()
    assert seen[4:] == [2] * 4


def test_a_run_with_env_workers_records_both_thread_counts(tmp_path, torch_threads):
    cores = available_cores()
    if cores < 2:
        pytest.skip("needs 2 cores: one worker leaves torch the others")
    import cadence

    torch.set_num_threads(cores)
    config = cadence.load_config(
        "ppo_cartpole",
        [
            "env.backend=parallel",
            "env.num_envs=2",
            "env.num_workers=1",
            "trainer.unroll_length=8",
            "trainer.num_env_steps=16",
            "trainer.eval_interval=0",
            "trainer.num_eval_episodes=1",
            "trainer.progress_bar=off",
        ],
        root_dir=tmp_path,
    )
    train(config)
    placement = Placement.load(tmp_path)
    assert (placement.num_threads, placement.acting_threads) == (cores, cores - 1)


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


def test_a_new_run_in_a_directory_of_other_files_says_so_and_keeps_them(tmp_path, caplog):
    from cadence.config import load_config

    (tmp_path / "notes.txt").write_text("the user's")
    overrides = ["trainer.num_env_steps=64", "trainer.progress_bar=off", "trainer.eval_interval=0"]
    config = load_config("ppo_cartpole", overrides, root_dir=tmp_path)
    with caplog.at_level("WARNING", logger="cadence.trainer.run"):
        train(config)
    assert "already holds notes.txt, which are not a run's" in caplog.text
    assert (tmp_path / "notes.txt").read_text() == "the user's"
    caplog.clear()
    with caplog.at_level("WARNING", logger="cadence.trainer.run"):
        train(load_config("ppo_cartpole", overrides, root_dir=tmp_path / "fresh"))
    assert "which are not a run's" not in caplog.text
