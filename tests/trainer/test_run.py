"""`cadence.trainer.run`: how a run chooses torch's intra-op threads per role (acting,
updating) from its networks' work and the cores, records the choice and reuses it on a
resume, and shares the machine with env workers (fewer threads while they step)."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from cadence.algorithms.actor_critic import ActorCriticAlgorithm
from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.collect.unroll import Collector
from cadence.envs.make import make_env
from cadence.envs.worker_pool import available_cores
from cadence.networks import NetworkConfig
from cadence.trainer import placement as placement_module
from cadence.trainer.placement import (
    PARALLEL_MIN_FLOPS,
    Placement,
    ThreadCounts,
    choose_threads,
    forward_flops_per_row,
    warn_of_load,
)
from cadence.trainer.run import train

TINY = [
    "env.num_envs=8",
    "trainer.unroll_length=16",
    "trainer.num_env_steps=128",
    "trainer.eval_interval=0",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
]
LARGE = 1e5
"""A `PARALLEL_MIN_FLOPS` for which ppo_cartpole's networks (9 kFLOPs a row) update as
large ones do (a minibatch of 128 rows: 1.1 MFLOPs) and act on 8 envs as small ones do
(72 kFLOPs), so that the tests train small networks rather than gigaflop ones."""


@pytest.fixture
def torch_threads():
    """Restores torch's thread count after the test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_small_networks_update_and_act_on_one_thread_large_ones_on_every_core():
    assert PARALLEL_MIN_FLOPS == 1e9
    # sac_pendulum: 8.8 kFLOPs a row, minibatches of 256, one env.
    assert choose_threads(8832, 1, 256, cores=2, acting_cores=2) == ThreadCounts(1, 1)
    # A CNN over images: the updates on every core, acting on 8 envs still on one.
    assert choose_threads(1e7, 8, 256, cores=2, acting_cores=2) == ThreadCounts(2, 1)
    assert choose_threads(1e7, 128, 256, cores=4, acting_cores=4) == ThreadCounts(4, 4)
    # Acting takes the cores env workers leave, and never more threads than updating.
    assert choose_threads(1e7, 128, 256, cores=4, acting_cores=3) == ThreadCounts(4, 3)
    assert choose_threads(1e7, 512, 64, cores=4, acting_cores=4) == ThreadCounts(1, 1)
    assert choose_threads(1e9, 1, 1, cores=1, acting_cores=1) == ThreadCounts(1, 1)


def test_a_rows_flops_are_its_networks_multiplies_and_counting_changes_nothing():
    import cadence
    from cadence.algorithms.build import build_algorithm

    config = cadence.load_config("sac_pendulum", [])
    with make_env("Pendulum-v1", 1, "serial", seed=0) as env:
        algorithm = build_algorithm(
            config.algorithm, env.observation_spec, env.action_spec, config.network
        )
        before = [p.detach().clone() for p in algorithm.parameters()]
        rng = torch.get_rng_state()
        flops = forward_flops_per_row(algorithm, env.observation_spec, env.action_spec)
    # The actor acts: 3 -> 64 -> 64 -> 2 (the action's mean and log-std), 2 FLOPs a MAC.
    assert flops == 2 * (3 * 64 + 64 * 64 + 64 * 2)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(map(torch.equal, before, algorithm.parameters()))


def test_a_run_records_the_threads_it_chose_for_its_networks(tmp_path, torch_threads, monkeypatch):
    if available_cores() < 2:
        pytest.skip("needs 2 cores: on one, every role has one thread")
    import cadence

    torch.set_num_threads(2)
    train(cadence.load_config("ppo_cartpole", TINY, root_dir=tmp_path / "small"))
    small = Placement.load(tmp_path / "small")
    assert (small.num_threads, small.acting_threads) == (1, 0)  # 0: as many as updating
    monkeypatch.setattr(placement_module, "PARALLEL_MIN_FLOPS", LARGE)
    train(cadence.load_config("ppo_cartpole", TINY, root_dir=tmp_path / "large"))
    large = Placement.load(tmp_path / "large")
    assert (large.num_threads, large.acting_threads) == (2, 1)
    assert torch.get_num_threads() == 2  # the run gives the process its count back


def test_a_resumed_run_updates_and_acts_on_the_threads_it_recorded(
    tmp_path, torch_threads, caplog, monkeypatch
):
    import cadence

    config = cadence.load_config("ppo_cartpole", TINY, root_dir=tmp_path)
    train(config)
    # As if the run had started on a machine, or in a version, that chose otherwise.
    recorded = json.loads((tmp_path / "placement.json").read_text())
    (tmp_path / "placement.json").write_text(
        json.dumps({**recorded, "num_threads": 2, "acting_threads": 1})
    )
    seen = {"acting": set(), "updating": set()}
    rollout_step, update_rows = ActorCriticAlgorithm.rollout_step, Algorithm.update_rows

    def acting(self, *args):
        seen["acting"].add(torch.get_num_threads())
        return rollout_step(self, *args)

    def updating(self, *args):
        seen["updating"].add(torch.get_num_threads())
        return update_rows(self, *args)

    monkeypatch.setattr(ActorCriticAlgorithm, "rollout_step", acting)
    monkeypatch.setattr(Algorithm, "update_rows", updating)
    monkeypatch.setattr("cadence.trainer.run.available_cores", lambda: 2)
    longer = cadence.load_config(
        "ppo_cartpole", [*TINY, "trainer.num_env_steps=256"], root_dir=tmp_path
    )
    with caplog.at_level(logging.INFO, logger="cadence.trainer.placement"):
        train(longer, resume_with_changes=True)
    assert "resuming with the torch threads this run started with: 2 updating, 1 acting" in (
        caplog.text
    )
    assert seen == {"acting": {1}, "updating": {2}}
    assert Placement.load(tmp_path).num_threads == 2


def test_a_loaded_machine_is_warned_of_once(monkeypatch, caplog):
    monkeypatch.setattr(placement_module, "_warned_of_load", False)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert not warn_of_load(cores=2)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 1.0, 1.0))
    with caplog.at_level(logging.WARNING, logger="cadence.trainer.placement"):
        assert warn_of_load(cores=2)
        assert not warn_of_load(cores=2)  # once per process
    assert caplog.text.count("exceeds its 2 cores") == 1


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


def test_a_run_with_env_workers_acts_on_the_cores_they_leave(tmp_path, torch_threads, monkeypatch):
    cores = available_cores()
    if cores < 2:
        pytest.skip("needs 2 cores: one worker leaves torch the others")
    import cadence

    torch.set_num_threads(cores)
    monkeypatch.setattr(placement_module, "PARALLEL_MIN_FLOPS", 1e4)  # 2 envs: 18 kFLOPs
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
