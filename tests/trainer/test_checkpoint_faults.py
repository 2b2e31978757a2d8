"""A run survives damaged checkpoints and a death in the middle of publishing one: it
names what it skipped, resumes from the newest checkpoint that verifies, and ends with
the metrics of an uninterrupted run."""

import logging
import os
import signal

import pytest

from cadence.testing.resume import (
    SimulatedCrash,
    assert_equal_nests,
    comparable_metrics,
    crash_after,
    final_state,
    train_named,
)
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.metrics import read_metrics
from cadence.trainer.trainer import Trainer

OVERRIDES = [
    "env.num_envs=4",
    "trainer.unroll_length=16",
    "trainer.num_env_steps=640",  # 10 iterations
    "trainer.checkpoint_interval=3",
    "trainer.eval_interval=2",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "seed=3",
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    return root


def _die_after(iterations, root):
    with crash_after(iterations), pytest.raises(SimulatedCrash):
        train_named("ppo_cartpole", root, OVERRIDES)


def _assert_same_run(root, uninterrupted):
    assert (root / "COMPLETE").exists()
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(read_metrics(uninterrupted))
    assert_equal_nests(final_state(root)["algorithm"], final_state(uninterrupted)["algorithm"])


def test_a_flipped_byte_in_the_newest_checkpoint_is_named_and_the_run_falls_back(
    tmp_path, uninterrupted, caplog
):
    root = tmp_path / "run"
    _die_after(6, root)
    state = root / "checkpoints" / "00000006" / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, in the middle of the weights
    state.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="cadence.trainer.checkpoint"):
        assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    messages = [record.getMessage() for record in caplog.records]
    assert any("00000006/state.pt" in m and "checksum" in m for m in messages), messages
    assert any("falling back to checkpoint" in m and "00000003" in m for m in messages), messages
    _assert_same_run(root, uninterrupted)


def test_a_death_between_publishing_a_checkpoint_and_moving_latest_resumes_from_the_previous(
    tmp_path, uninterrupted, monkeypatch
):
    root = tmp_path / "run"
    write_latest = CheckpointManager._write_latest

    def die_before_latest_moves_to_6(self, name, digest):
        if name == "00000006":
            raise SimulatedCrash  # 00000006/ is renamed into place; LATEST still says 3
        write_latest(self, name, digest)

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointManager, "_write_latest", die_before_latest_moves_to_6)
        with pytest.raises(SimulatedCrash):
            train_named("ppo_cartpole", root, OVERRIDES)
    assert latest_iteration(root / "checkpoints") == 3
    assert (root / "checkpoints" / "00000006" / "state.pt").exists()
    logged = [r["iteration"] for r in read_metrics(root)]
    assert max(logged) == 6  # the interrupted run logged past its last published checkpoint
    assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    _assert_same_run(root, uninterrupted)
    iterations = [r["iteration"] for r in read_metrics(root)]
    assert iterations == sorted(set(iterations)), "metrics.jsonl repeats no iteration"


def test_the_last_iteration_is_checkpointed_once(tmp_path, monkeypatch):
    saved = []
    save = CheckpointManager.save

    def counting_save(self, iteration, *args, **kwargs):
        saved.append(iteration)
        return save(self, iteration, *args, **kwargs)

    monkeypatch.setattr(CheckpointManager, "save", counting_save)
    overrides = [*OVERRIDES, "trainer.num_env_steps=384"]  # 6 iterations: 6 is periodic too
    assert train_named("ppo_cartpole", tmp_path / "run", overrides) == "complete"
    assert saved == [3, 6]


def test_when_no_checkpoint_verifies_cadence_train_exits_2_and_touches_nothing(tmp_path, capsys):
    from cadence.cli import main

    root = tmp_path / "run"
    _die_after(6, root)
    for name in ("00000003", "00000006"):
        state = root / "checkpoints" / name / "state.pt"
        state.write_bytes(state.read_bytes()[:100])  # truncated
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    assert main(["train", "ppo_cartpole", "--root-dir", str(root), *OVERRIDES]) == 2
    error = capsys.readouterr().err
    assert "no checkpoint" in error and "00000006/state.pt" in error and "00000003" in error
    assert "Traceback" not in error
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before


def test_a_death_after_the_final_checkpoint_finishes_without_logging_the_last_iteration_twice(
    tmp_path, monkeypatch, uninterrupted
):
    root = tmp_path / "run"
    save = Trainer.save

    def dies_after_the_final_save(self):
        save(self)
        if self.counters["env_steps"] >= self.config.num_env_steps:
            raise SimulatedCrash  # before COMPLETE is written

    with monkeypatch.context() as patch, pytest.raises(SimulatedCrash):
        patch.setattr(Trainer, "save", dies_after_the_final_save)
        train_named("ppo_cartpole", root, OVERRIDES)
    assert latest_iteration(root / "checkpoints") == 10 and not (root / "COMPLETE").exists()
    assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    assert [r["iteration"] for r in read_metrics(root)] == list(range(1, 11))
    _assert_same_run(root, uninterrupted)


def test_a_preemption_signal_in_the_last_iteration_completes_the_run(tmp_path, monkeypatch):
    root = tmp_path / "run"
    iteration = Trainer._iteration

    def signalled_in_the_last(self, *args):
        if self.counters["env_steps"] + self.collector.num_env_steps_per_unroll >= 640:
            os.kill(os.getpid(), signal.SIGUSR1)
        return iteration(self, *args)

    monkeypatch.setattr(Trainer, "_iteration", signalled_in_the_last)
    assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    assert (root / "COMPLETE").exists()
    assert [r["iteration"] for r in read_metrics(root)] == list(range(1, 11))


def test_a_fresh_start_after_a_death_before_any_checkpoint_purges_the_dead_runs_tensorboard_points(
    tmp_path,
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = tmp_path / "run"
    _die_after(2, root)  # iterations 1 and 2 logged, no checkpoint yet (interval 3)
    assert not (root / "checkpoints").exists() or latest_iteration(root / "checkpoints") == 0
    assert train_named("ppo_cartpole", root, OVERRIDES) == "complete"
    events = EventAccumulator(str(root / "tb"))
    events.Reload()
    steps = [event.step for event in events.Scalars("loss/total")]
    assert steps == sorted(set(steps)) and len(steps) == 10, "each step once"
