"""The training loop in-process: the run directory, metrics, evaluation, early stop,
and checkpoints holding the environments' in-progress episodes in every back end.

(`test_resume.py` proves exact resume with real processes and real signals.)
"""

from __future__ import annotations

import logging
import os
import signal
import tarfile
import threading

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from cadence.config import load_config, to_yaml
from cadence.testing.resume import comparable_metrics
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import build_trainer, train

COUNTERS = {"iteration", "env_steps", "wall_time", "train_time"}
CHEAP = [
    "env.num_envs=2",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=64",  # 4 iterations of 2 envs x 8 steps
    "trainer.eval_interval=2",
    "trainer.num_eval_episodes=2",
    "trainer.checkpoint_interval=1",
    "trainer.keep_checkpoints=2",
    "trainer.progress_bar=off",
    "env.max_episode_steps=20",
    "algorithm.mini_batch_size=8",
]


def _config(root, *overrides, name="ppo_cartpole"):
    return load_config(name, [*CHEAP, *overrides], root_dir=root)


def test_a_run_writes_its_directory_metrics_and_checkpoints(tmp_path):
    root = tmp_path / "run"
    config = _config(root)
    assert train(config) == "complete"
    assert (root / "COMPLETE").read_text().strip() == "complete"
    assert (root / "config.yaml").read_text() == to_yaml(config)
    with tarfile.open(root / "snapshot.tar.gz") as tar:
        names = tar.getnames()
    assert "cadence/trainer/trainer.py" in names and not any("__pycache__" in n for n in names)
    assert any(path.name.startswith("events.") for path in (root / "tb").iterdir())
    assert latest_iteration(root / "checkpoints") == 4
    assert sorted(p.name for p in (root / "checkpoints").iterdir() if p.is_dir()) == [
        "00000003",
        "00000004",
    ]
    records = read_metrics(root)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert [r["env_steps"] for r in records] == [16, 32, 48, 64]
    for record in records:
        assert COUNTERS <= set(record)
        assert 0 < record["train_time"] <= record["wall_time"]
        assert {"loss/policy", "loss/value", "loss/entropy", "train/approx_kl"} <= set(record)
        assert {"perf/env_steps_per_s", "rollout/num_episodes"} <= set(record)
    evaluated = [r["iteration"] for r in records if "eval/episode_return" in r]
    assert evaluated == [2, 4]
    assert all("eval/episode_length" in r for r in records if "eval/episode_return" in r)
    assert any("rollout/episode_return" in r and "rollout/episode_length" in r for r in records)
    # Episodes of at most 20 steps: 64 steps in 2 envs complete at least 2.
    assert records[-1]["rollout/num_episodes"] >= 2


def test_checkpoint_is_an_explicit_dict_of_states(tmp_path):
    config = _config(tmp_path / "run")
    train(config)
    state = CheckpointManager(tmp_path / "run" / "checkpoints").load()
    assert {"algorithm", "collector", "scheme", "env", "counters", "rng"} <= set(state)
    assert state["counters"]["iteration"] == 4 and state["counters"]["env_steps"] == 64
    assert {"python", "numpy", "torch"} <= set(state["rng"])
    assert "optim/actor_critic" in state["algorithm"]
    assert state["env"] is not None and state["collector"]["time_step"] is not None


def test_stop_at_eval_return_ends_the_run_early(tmp_path):
    root = tmp_path / "run"
    assert train(_config(root, "trainer.stop_at_eval_return=1")) == "stopped_at_eval_return"
    assert (root / "COMPLETE").read_text().strip() == "stopped_at_eval_return"
    assert read_metrics(root)[-1]["iteration"] == 2  # the first evaluation already reached 1


def test_evaluation_envs_are_seeded_apart_from_training(tmp_path):
    config = _config(tmp_path / "run", "seed=5")
    trainer = build_trainer(config, tmp_path / "run")
    seeds = []
    make_eval_env = trainer.make_eval_env
    trainer.make_eval_env = lambda seed: seeds.append(seed) or make_eval_env(seed)
    try:
        trainer.run()
    finally:
        trainer.collector.env.close()
    offset = config.trainer.eval_seed_offset
    assert seeds == [5 + offset + 2, 5 + offset + 4]  # never seed + i of a training env


def _run_preempted_after(trainer, iterations):
    """Runs ``trainer`` until SIGUSR1, raised by the process itself during iteration ``iterations``."""
    calls = 0
    train_iter = trainer.scheme.train_iter

    def signalling_train_iter():
        nonlocal calls
        calls += 1
        if calls == iterations:
            os.kill(os.getpid(), signal.SIGUSR1)
        return train_iter()

    trainer.scheme.train_iter = signalling_train_iter
    try:
        return trainer.run()
    finally:
        trainer.collector.env.close()


RESUME = ["trainer.num_env_steps=96", "trainer.eval_interval=3", "trainer.checkpoint_interval=0"]


@pytest.mark.parametrize("backend", ["serial", "parallel", "tensor", "thread"])
def test_a_preempted_run_resumes_its_episodes_in_every_backend(tmp_path, backend):
    assert threading.current_thread() is threading.main_thread()
    # No max_episode_steps: in-progress episodes span the checkpoint.
    overrides = [
        *RESUME,
        f"env.backend={backend}",
        "env.num_workers=2",
        "env.max_episode_steps=null",
    ]
    uninterrupted = _config(tmp_path / "a", *overrides)
    train(uninterrupted)
    resumed = _config(tmp_path / "b", *overrides)
    assert _run_preempted_after(build_trainer(resumed, tmp_path / "b"), 2) == "preempted"
    state = CheckpointManager(tmp_path / "b" / "checkpoints").load()
    assert state["counters"]["iteration"] == 2 and state["env"] is not None
    assert not (tmp_path / "b" / "COMPLETE").exists()
    assert train(resumed) == "complete"
    expected, actual = (
        comparable_metrics(read_metrics(tmp_path / "a")),
        comparable_metrics(read_metrics(tmp_path / "b")),
    )
    assert [r["iteration"] for r in actual] == list(range(1, 7))
    assert actual == expected


class UnpicklableCartPole(CartPoleEnv):
    """CartPole holding a lock, which cannot be pickled."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.lock = threading.Lock()


@pytest.fixture
def unpicklable_env_id():
    env_id = "cadence_test/UnpicklableCartPole-v0"
    gym.register(id=env_id, entry_point=UnpicklableCartPole, max_episode_steps=500)
    yield env_id
    del gym.registry[env_id]


def test_an_unpicklable_env_is_reset_on_resume_with_a_warning(tmp_path, unpicklable_env_id, caplog):
    root = tmp_path / "run"
    config = _config(root, *RESUME, f"env.name={unpicklable_env_id}", "env.backend=serial")
    with caplog.at_level(logging.WARNING, logger="cadence.trainer"):
        assert _run_preempted_after(build_trainer(config, root), 2) == "preempted"
    assert "a run resumed from a checkpoint cuts its episodes" in caplog.text
    assert CheckpointManager(root / "checkpoints").load()["env"] is None
    caplog.clear()
    trainer = build_trainer(config, root)
    try:
        with caplog.at_level(logging.WARNING, logger="cadence.trainer"):
            assert trainer.restore()
        assert "environments are reset" in caplog.text
        collector_state = trainer.collector.state_dict()
        assert collector_state["time_step"] is None  # the next unroll starts with env.reset()
        assert not collector_state["episode_stats"]["length"].any()
        assert trainer.counters["iteration"] == 2
    finally:
        trainer.collector.env.close()
    assert train(config) == "complete"
    records = read_metrics(root)
    assert [r["iteration"] for r in records] == list(range(1, 7))
    lengths = [r["rollout/episode_length"] for r in records if "rollout/episode_length" in r]
    assert all(length <= 500 for length in lengths)


def test_an_env_state_of_another_back_end_is_reset_on_resume_with_a_warning(tmp_path, caplog):
    # prefer_tensor is CartPole's tensor env; with a wrapper (kept with --resume-with-changes)
    # it is Gymnasium's, which cannot load the tensor env's state: new episodes, no TypeError.
    root = tmp_path / "run"
    config = _config(root, *RESUME, "env.backend=prefer_tensor")
    assert _run_preempted_after(build_trainer(config, root), 2) == "preempted"
    assert isinstance(CheckpointManager(root / "checkpoints").load()["env"], dict)
    wrapped = _config(
        root, *RESUME, "env.backend=prefer_tensor", "env.wrappers=[{name:FrameSkip,skip:1}]"
    )
    with caplog.at_level(logging.WARNING, logger="cadence.trainer"):
        assert train(wrapped, resume_with_changes=True) == "complete"
    assert "does not fit these environments" in caplog.text
    assert "saved by a tensor-native env" in caplog.text
    assert [r["iteration"] for r in read_metrics(root)] == list(range(1, 7))


def test_off_a_terminal_training_prints_plain_progress_lines(tmp_path, capsys):
    config = load_config(
        "ppo_cartpole",
        [
            "trainer.unroll_length=16",
            "env.num_envs=4",
            "trainer.num_env_steps=128",
            "trainer.progress_bar=auto",  # pytest's stdout is not a terminal
            "trainer.progress_interval_s=0",
            f"root_dir={tmp_path / 'run'}",
        ],
    )
    assert train(config) == "complete"
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("progress: iter 2  env steps 128/128 (100%)")
    assert not any("\r" in line or "\x1b" in line for line in lines)


def test_the_final_evaluation_shares_the_last_iterations_row(tmp_path):
    root = tmp_path / "run"
    config = load_config(
        "ppo_cartpole",
        ["trainer.unroll_length=16", "env.num_envs=4", "trainer.num_env_steps=256"],
        root_dir=root,
    )
    assert train(config) == "complete"
    rows = read_metrics(root)
    iterations = [row["iteration"] for row in rows]
    assert iterations == sorted(set(iterations)), "one row per iteration"
    assert rows[-1]["iteration"] == 4 and "eval/episode_return" in rows[-1]
    assert "loss/total" in rows[-1]
