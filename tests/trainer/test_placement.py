"""Device placement: ``trainer.device`` and ``trainer.collector_device``, what ``auto``
picks, what the run records, and a collector acting with a copy of the learner.

This machine has no GPU, so a split placement is exercised with the CPU under two names
(``cpu`` learning, ``cpu:0`` acting): torch treats them as different devices, so the
collector takes the path it takes for a CPU collector beside a GPU learner (a copy of the
algorithm refreshed before every unroll, experience moved to the learner), and a run
collected that way must equal one collected by the learner itself.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
import yaml

from cadence.algorithms.build import build_algorithm
from cadence.collect.unroll import Collector
from cadence.config import ConfigError, from_yaml, load_config
from cadence.envs.make import make_env
from cadence.testing.resume import (
    SimulatedCrash,
    assert_equal_nests,
    comparable_metrics,
    crash_after,
    final_state,
    train_named,
)
from cadence.trainer.config import TrainerConfig
from cadence.trainer.metrics import read_metrics
from cadence.trainer.placement import (
    PLACEMENT_FILE,
    Placement,
    ThreadCounts,
    learner_device,
    measure_rollout_step,
    record_placement,
    resolve_placement,
    resolve_threads,
    warn_of_removed_matmuls,
)

PPO = [
    "env.num_envs=4",
    "trainer.unroll_length=16",
    "trainer.num_env_steps=640",
    "trainer.checkpoint_interval=3",
    "trainer.eval_interval=2",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "seed=3",
]
SAC = [
    "env.num_envs=2",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=320",
    "algorithm.off_policy.initial_collect_steps=64",
    "algorithm.off_policy.mini_batch_size=16",
    "trainer.checkpoint_interval=5",
    "trainer.eval_interval=10",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "seed=5",
]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@no_gpu
def test_auto_places_everything_on_the_cpu_without_a_gpu_and_records_it(tmp_path):
    root = tmp_path / "run"
    assert train_named("ppo_cartpole", root, PPO) == "complete"
    recorded = json.loads((root / PLACEMENT_FILE).read_text())
    assert recorded == {
        "learner": "cpu",
        "collector": "cpu",
        "env": "cpu",
        "rollout_step_us": {},
        "num_threads": 1,  # PPO's [64, 64] networks are too small for intra-op threads
        "acting_threads": 0,  # as many as it updates with
    }


@no_gpu
def test_asking_for_cuda_without_a_gpu_says_what_to_set():
    with pytest.raises(
        RuntimeError, match=r"trainer.device=cuda .* set trainer.device=auto or cpu"
    ):
        learner_device("cuda")


def test_unknown_device_names_are_rejected_with_the_accepted_ones():
    with pytest.raises(ValueError, match="trainer.device must be one of 'auto', 'cpu'"):
        TrainerConfig(device="gpu")
    with pytest.raises(
        ValueError, match="trainer.collector_device must be one of 'auto', 'learner'"
    ):
        TrainerConfig(collector_device="fast")
    TrainerConfig(device="cuda:1", collector_device="learner")  # accepted; checked at start


REMOVED = (
    r"trainer.cpu_matmul: removed: cadence multiplies the CPU layers' matrices with torch's "
    r"own BLAS .*; drop the key"
)


@pytest.mark.parametrize("value", ["auto", "aten", "onednn", "avx512"])
def test_a_config_that_sets_the_removed_cpu_matmul_is_refused_with_why(value):
    with pytest.raises(ConfigError, match=REMOVED):
        load_config("ppo_cartpole", [f"trainer.cpu_matmul={value}"])


def test_a_named_yaml_that_sets_the_removed_cpu_matmul_is_refused_with_why(tmp_path, monkeypatch):
    (tmp_path / "old.yaml").write_text(
        "defaults:\n  - cadence_defaults\n  - algorithm: ppo\n  - _self_\n"
        "env:\n  name: CartPole-v1\ntrainer:\n  cpu_matmul: onednn\n"
    )
    monkeypatch.setattr("cadence.config.loading.NAMED_CONFIG_DIR", tmp_path)
    with pytest.raises(ConfigError, match=REMOVED):
        load_config("old")


def test_a_resumed_run_reuses_the_measured_placement_of_the_same_learner(tmp_path):
    measured = Placement("cuda", "cpu", "cpu", {"cpu": 80.0, "cuda": 300.0})
    measured.save(tmp_path)
    assert resolve_placement("cuda", "auto", tmp_path, tensor_env=False) == measured
    # Settings that need no measurement, or another learner, do not read it.
    assert resolve_placement("cuda", "learner", tmp_path, tensor_env=False).collector == "cuda"
    assert resolve_placement("cuda", "auto", tmp_path, tensor_env=True).env == "cuda"
    assert resolve_placement("cuda:1", "auto", tmp_path, tensor_env=False) is None
    assert resolve_placement("cpu", "auto", tmp_path, tensor_env=False).collector == "cpu"


def test_a_run_recorded_with_onednn_resumes_on_torchs_blas_and_warns_once(tmp_path, caplog):
    root = tmp_path / "run"
    with crash_after(5), pytest.raises(SimulatedCrash):
        train_named("ppo_cartpole", root, PPO)
    # As an earlier version of cadence recorded a run whose CPU matmuls oneDNN took.
    config = yaml.safe_load((root / "config.yaml").read_text())
    config["trainer"]["cpu_matmul"] = "onednn"
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    placement = json.loads((root / PLACEMENT_FILE).read_text())
    (root / PLACEMENT_FILE).write_text(json.dumps({**placement, "cpu_matmul": "onednn"}))
    with caplog.at_level(logging.WARNING):
        assert train_named("ppo_cartpole", root, PPO) == "complete"
    assert "holds trainer.cpu_matmul='onednn', removed: cadence multiplies" in caplog.text
    assert "with oneDNN, so the numbers it computes from here on differ" in caplog.text
    assert "with oneDNN (cpu_matmul=onednn in" in caplog.text
    # The run's files now hold what it runs with: a later start warns of nothing.
    assert "cpu_matmul" not in (root / "config.yaml").read_text()
    assert "cpu_matmul" not in (root / PLACEMENT_FILE).read_text()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert train_named("ppo_cartpole", root, PPO) is None  # complete already
        assert not warn_of_removed_matmuls(root)
    assert "cpu_matmul" not in caplog.text


@pytest.mark.parametrize(
    ("recorded", "warning"),
    [("avx512", "AVX-512 matmul kernel (cpu_matmul=avx512"), ("aten", None), ("", None)],
)
def test_only_a_removed_backend_in_a_recorded_placement_is_warned_of(
    tmp_path, caplog, recorded, warning
):
    placement = Placement("cpu", "cpu", "cpu", num_threads=1)
    placement.save(tmp_path)
    path = tmp_path / PLACEMENT_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_matmul": recorded}))
    with caplog.at_level(logging.WARNING):
        assert warn_of_removed_matmuls(tmp_path) == (warning is not None)
        assert Placement.load(tmp_path) == placement  # read as it was, without the field
    if warning is None:
        assert not caplog.text
    else:
        assert warning in caplog.text and "numbers it computes from here on differ" in caplog.text


def test_a_run_config_with_the_removed_key_is_read_without_it(caplog):
    config = load_config("ppo_cartpole")
    tree = yaml.safe_load(config.to_yaml())
    tree["trainer"]["cpu_matmul"] = "auto"
    with caplog.at_level(logging.WARNING):
        assert from_yaml(yaml.safe_dump(tree), source="'old/config.yaml'") == config
    assert "'old/config.yaml' holds trainer.cpu_matmul='auto', removed" in caplog.text
    assert "differ" not in caplog.text  # auto chose ATen's multiplies here


def test_a_run_leaves_torchs_thread_count_and_determinism_as_it_found_them(tmp_path):
    torch.set_num_threads(2)  # the fixture restores the session's settings
    torch.use_deterministic_algorithms(False)
    deterministic = ["trainer.num_threads=1", "trainer.deterministic=true"]
    assert train_named("ppo_cartpole", tmp_path / "run", [*PPO, *deterministic]) == "complete"
    assert Placement.load(tmp_path / "run").num_threads == 1
    assert torch.get_num_threads() == 2
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_resumed_run_takes_the_thread_counts_it_started_with(tmp_path, caplog):
    def choose():  # what this start would choose
        return ThreadCounts(2, 2)

    Placement("cpu", "cpu", "cpu", num_threads=1).save(tmp_path)
    assert resolve_threads(0, tmp_path, choose, available=2) == ThreadCounts(1, 1)
    Placement("cpu", "cpu", "cpu", num_threads=2, acting_threads=1).save(tmp_path)
    assert resolve_threads(0, tmp_path, choose, available=2) == ThreadCounts(2, 1)
    # Unless the run names a count, or the cores are too few for the recorded one.
    assert resolve_threads(3, tmp_path, choose, available=2) == ThreadCounts(3, 3)
    Placement("cpu", "cpu", "cpu", num_threads=4).save(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert resolve_threads(0, tmp_path, choose, available=2) == ThreadCounts(2, 2)
    assert "trained with 4 torch threads" in caplog.text
    # A new run (nothing recorded), or one recorded before threads were part of it, chooses.
    assert resolve_threads(0, tmp_path / "new", choose, available=2) == ThreadCounts(2, 2)
    Placement("cpu", "cpu", "cpu").save(tmp_path)
    assert resolve_threads(0, tmp_path, choose, available=2) == ThreadCounts(2, 2)


def test_measuring_a_rollout_step_changes_neither_the_algorithm_nor_the_random_numbers():
    config = load_config("ppo_cartpole", [])
    with make_env("CartPole-v1", 4, "serial", seed=0) as env:
        algorithm = build_algorithm(
            config.algorithm, env.observation_spec, env.action_spec, config.network
        )
        before = {k: v.clone() for k, v in algorithm.state_dict().items() if torch.is_tensor(v)}
        rng = torch.get_rng_state()
        assert measure_rollout_step(algorithm, env, "cpu", repeats=5) > 0
        assert measure_rollout_step(algorithm, env, "cpu:0", repeats=5) > 0  # with a copy
        assert torch.equal(torch.get_rng_state(), rng)
        after = algorithm.state_dict()
        for key, value in before.items():
            torch.testing.assert_close(after[key], value, rtol=0, atol=0)


def test_an_acting_copy_follows_the_learners_weights_from_one_unroll_to_the_next():
    config = load_config("ppo_cartpole", [])
    with make_env("CartPole-v1", 4, "serial", seed=0) as env:
        algorithm = build_algorithm(
            config.algorithm, env.observation_spec, env.action_spec, config.network
        )
        collector = Collector(env, algorithm, 4, "cpu:0", learner_device="cpu")
        assert collector.acting is not algorithm
        collector.unroll()
        with torch.no_grad():
            for parameter in algorithm.parameters():
                parameter.add_(1.0)
        experience, _ = collector.unroll()
        for acting, learning in zip(
            collector.acting.parameters(), algorithm.parameters(), strict=True
        ):
            assert acting is not learning
            torch.testing.assert_close(acting, learning, rtol=0, atol=0)
        assert experience.time_step.observation.device == torch.device("cpu")


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("ppo_cartpole", PPO),
        ("sac_pendulum", SAC),
        ("ppo_cartpole_masked_gru", [*PPO, "trainer.unroll_length=8", "trainer.num_env_steps=320"]),
    ],
    ids=["ppo", "sac", "recurrent-ppo"],
)
def test_a_run_collected_by_an_acting_copy_equals_one_collected_by_the_learner(
    tmp_path, name, overrides
):
    learner, copy = tmp_path / "learner", tmp_path / "copy"
    assert (
        train_named(name, learner, [*overrides, "trainer.collector_device=learner"]) == "complete"
    )
    assert train_named(name, copy, [*overrides, "trainer.collector_device=cpu:0"]) == "complete"
    assert json.loads((copy / PLACEMENT_FILE).read_text())["collector"] == "cpu:0"
    assert comparable_metrics(read_metrics(copy)) == comparable_metrics(read_metrics(learner))
    assert_equal_nests(final_state(copy)["algorithm"], final_state(learner)["algorithm"])


def test_a_run_with_an_acting_copy_resumes_exactly_after_a_crash(tmp_path):
    overrides = [*PPO, "trainer.collector_device=cpu:0"]
    whole, crashed = tmp_path / "whole", tmp_path / "crashed"
    assert train_named("ppo_cartpole", whole, overrides) == "complete"
    with crash_after(5), pytest.raises(SimulatedCrash):
        train_named("ppo_cartpole", crashed, overrides)
    assert train_named("ppo_cartpole", crashed, overrides) == "complete"
    assert comparable_metrics(read_metrics(crashed)) == comparable_metrics(read_metrics(whole))
    assert_equal_nests(final_state(crashed)["algorithm"], final_state(whole)["algorithm"])


def test_data_transformers_refuse_an_acting_copy_and_say_what_to_set(tmp_path):
    overrides = [*PPO, "data_transformers.names=[observation_normalizer]"]
    with pytest.raises(ValueError, match="set trainer.collector_device=learner"):
        train_named(
            "ppo_cartpole", tmp_path / "run", [*overrides, "trainer.collector_device=cpu:0"]
        )


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("collector", ["auto", "cpu", "learner"])
def test_a_gpu_learner_trains_with_the_policy_acting_on_either_device(tmp_path, collector):
    root = tmp_path / "run"
    overrides = [*PPO, "trainer.device=cuda", f"trainer.collector_device={collector}"]
    assert train_named("ppo_cartpole", root, overrides) == "complete"
    placement = json.loads((root / PLACEMENT_FILE).read_text())
    assert placement["learner"] == "cuda"
    if collector == "auto":
        assert set(placement["rollout_step_us"]) == {"cpu", "cuda"}
    else:
        assert placement["collector"] == ("cpu" if collector == "cpu" else "cuda")


@pytest.mark.parametrize("damage", [b'{"learner": "cpu", \xf5', b'{"learner": "cpu"}', b""])
def test_a_damaged_placement_file_is_named_decided_again_and_rewritten(tmp_path, damage, caplog):
    (tmp_path / PLACEMENT_FILE).write_bytes(damage)
    placement = Placement("cpu", "cpu", "cpu")
    with caplog.at_level("WARNING"):
        record_placement(placement, tmp_path, is_writer=True)
    assert PLACEMENT_FILE in caplog.text and "damaged" in caplog.text
    assert Placement.load(tmp_path) == placement
