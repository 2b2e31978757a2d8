"""The replay buffer on disk: completed chunks stream to the run directory while training
runs, a checkpoint writes only what is new and hard-links the rest, and loading checks
every chunk (checksum, shape, dtype, count) before using it; eval and play never read it."""

from __future__ import annotations

import errno
import logging
import os

import pytest
import torch

from cadence.data.time_step import StepType
from cadence.replay.buffer import ReplayBuffer
from cadence.replay.chunk_writer import ChunkWriter
from cadence.replay.persistence import ChecksumError, read_snapshot, write_snapshot
from cadence.testing.resume import (
    SimulatedCrash,
    assert_equal_nests,
    comparable_metrics,
    crash_after,
    final_state,
    train_named,
)
from cadence.trainer.checkpoint import STATE_FILE, CheckpointManager
from cadence.trainer.metrics import read_metrics

CHUNK = 16
OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=256",  # 16 iterations
    "trainer.checkpoint_interval=4",
    "trainer.keep_checkpoints=4",
    "trainer.eval_interval=0",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[16]",
    "algorithm.off_policy.initial_collect_steps=32",
    "algorithm.off_policy.mini_batch_size=8",
    "algorithm.off_policy.replay_buffer_length=96",  # wraps: 128 steps per env
    f"algorithm.off_policy.replay_chunk_length={CHUNK}",
    "seed=5",
]


def _chunks(directory):
    return {p.name: p for p in directory.glob("env*-chunk*.pt")}


def test_checkpoints_hold_the_buffer_as_chunk_files_written_once(tmp_path):
    train_named("dqn_cartpole", tmp_path, OVERRIDES)
    checkpoints = sorted((tmp_path / "checkpoints").glob("0*"))
    assert [p.name for p in checkpoints] == ["00000004", "00000008", "00000012", "00000016"]
    state = torch.load(checkpoints[-1] / STATE_FILE, weights_only=True)
    assert "replay_buffer" not in state["scheme"], "the buffer left state.pt"
    # 8 steps per env per iteration: at iteration 4 two complete chunks per env, at 8 four.
    first, second = _chunks(checkpoints[0] / "data"), _chunks(checkpoints[1] / "data")
    assert len(first) == 2 * 2 and len(second) == 2 * 4
    assert all(os.path.samefile(first[n], second[n]) for n in first), "linked, not rewritten"
    # At the end (the rings wrapped at 96) the last checkpoint links the live files.
    live, last = _chunks(tmp_path / "replay"), _chunks(checkpoints[-1] / "data")
    assert sorted(live) == sorted(last) and len(last) == 2 * 6
    assert all(os.path.samefile(live[n], last[n]) for n in last)
    assert not os.path.samefile(first["env00000-chunk00000.pt"], last["env00000-chunk00000.pt"])
    # The whole buffer read back from the files is the one training ended with.
    replay = final_state(tmp_path)["scheme"]["replay_buffer"]
    assert replay["storage"]["num_added"].tolist() == [128, 128]


def test_a_flipped_byte_in_a_chunk_is_named_and_the_run_falls_back(tmp_path, caplog):
    train_named("dqn_cartpole", tmp_path / "whole", OVERRIDES)
    run = tmp_path / "run"
    with crash_after(9), pytest.raises(SimulatedCrash):
        train_named("dqn_cartpole", run, OVERRIDES)
    newest = run / "checkpoints" / "00000008"
    chunk = sorted(_chunks(newest / "data").values())[1]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x40
    os.unlink(chunk)  # the byte flips in the checkpoint's link only, as on a bad sector
    chunk.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        train_named("dqn_cartpole", run, OVERRIDES)
    assert f"00000008/data/{chunk.name}" in caplog.text
    assert "falling back to checkpoint" in caplog.text and "00000004" in caplog.text
    got, want = read_metrics(run), read_metrics(tmp_path / "whole")
    assert [r["iteration"] for r in got] == list(range(1, 17))
    assert comparable_metrics(got) == comparable_metrics(want)
    assert_equal_nests(final_state(run)["scheme"], final_state(tmp_path / "whole")["scheme"])


def test_eval_and_play_read_only_the_state_file(tmp_path):
    train_named("dqn_cartpole", tmp_path, OVERRIDES)
    newest = tmp_path / "checkpoints" / "00000016"
    for chunk in _chunks(newest / "data").values():
        chunk.unlink()  # a replay buffer they must not need
    manager = CheckpointManager(tmp_path / "checkpoints")
    path, state = manager.load_verified(only=(STATE_FILE,))
    assert path == newest and "algorithm" in state
    with pytest.raises(Exception, match="missing"):
        manager.verify(newest)


def _buffer(capacity=8):
    buffer = ReplayBuffer(num_envs=2, capacity=capacity)
    for t in range(11):
        buffer.add({"x": torch.full((2, 3), float(t)), "n": torch.tensor([t, -t])})
    return buffer


def test_loading_checks_each_chunk_against_the_metadata(tmp_path):
    buffer = _buffer()
    files = write_snapshot(buffer, tmp_path, chunk_length=4)
    restored = ReplayBuffer(num_envs=2, capacity=8)
    read_snapshot(restored, tmp_path, files)
    assert torch.equal(restored.gather_all()["x"], buffer.gather_all()["x"])

    chunk = tmp_path / "env00001-chunk00000.pt"
    good = chunk.read_bytes()
    torch.save({"x": torch.zeros(4, 2), "n": torch.zeros(4, dtype=torch.int64)}, chunk)
    with pytest.raises(ValueError, match="env00001-chunk00000.pt: field 'x' is \\[4, 2\\]"):
        read_snapshot(restored, tmp_path)  # a checksum that matched would not save it
    torch.save({"x": torch.zeros(4, 3), "n": torch.zeros(4, dtype=torch.int32)}, chunk)
    with pytest.raises(ValueError, match="field 'n' is torch.int32"):
        read_snapshot(restored, tmp_path)
    chunk.unlink()
    with pytest.raises(ChecksumError, match="env00001-chunk00000.pt"):
        read_snapshot(restored, tmp_path)
    chunk.write_bytes(good[:-10])
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        read_snapshot(restored, tmp_path, files)
    assert torch.equal(restored.gather_all()["x"], buffer.gather_all()["x"]), "left unchanged"


def test_a_resume_without_env_state_ends_the_stored_episodes_as_truncated(tmp_path, monkeypatch):
    # As with Box2D envs, whose state cannot be saved: the resumed run starts new episodes.
    monkeypatch.setattr("cadence.trainer.trainer.Trainer._env_state", lambda self: None)
    with crash_after(9), pytest.raises(SimulatedCrash):
        train_named("dqn_cartpole", tmp_path, OVERRIDES)
    train_named("dqn_cartpole", tmp_path, OVERRIDES)
    storage = final_state(tmp_path)["scheme"]["replay_buffer"]["storage"]
    step_type = storage["fields"]["time_step/step_type"]
    discount = storage["fields"]["time_step/discount"]
    cut = 8 * 8 - 1  # each env's newest step at the iteration-8 checkpoint (time = position)
    assert step_type[:, cut].tolist() == [int(StepType.LAST)] * 2
    assert discount[:, cut].tolist() == [1.0, 1.0]
    assert step_type[:, cut + 1].tolist() == [int(StepType.FIRST)] * 2


def test_ending_episodes_in_place_makes_the_next_snapshot_rewrite_that_chunk(tmp_path):
    with ChunkWriter(tmp_path / "live", chunk_length=4) as writer:
        buffer = ReplayBuffer(num_envs=2, capacity=8, observer=writer)
        for t in range(8):  # the newest step (time 7) closes chunk 1, already on disk
            buffer.add(
                {
                    "time_step": {
                        "step_type": torch.full((2,), int(StepType.MID)),
                        "discount": torch.full((2,), 0.5),
                    },
                    "x": torch.full((2,), float(t)),
                }
            )
        writer.wait()
        buffer.end_episodes()
        files = writer.write_snapshot(buffer, _fresh(tmp_path / "snapshot"))
    restored = ReplayBuffer(num_envs=2, capacity=8)
    read_snapshot(restored, tmp_path / "snapshot", files)
    rows = restored.gather_all()["time_step"]
    assert rows["step_type"][:, -1].tolist() == [int(StepType.LAST)] * 2
    assert rows["discount"][:, -1].tolist() == [1.0, 1.0]
    assert rows["step_type"][:, -2].tolist() == [int(StepType.MID)] * 2


def _fresh(path):
    path.mkdir()
    return path


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "where", ["cadence.trainer.checkpoint.torch.save", "cadence.replay.chunk_writer.write_atomic"]
)
def test_a_full_disk_stops_the_run_with_a_message_and_the_same_command_resumes(
    tmp_path, monkeypatch, capsys, where
):
    from cadence.cli import main

    command = ["train", "dqn_cartpole", "--root-dir", str(tmp_path), *OVERRIDES]
    with crash_after(5), pytest.raises(SimulatedCrash):
        train_named("dqn_cartpole", tmp_path, OVERRIDES)  # checkpoint 4 is on disk
    with monkeypatch.context() as patch:
        patch.setattr(where, _no_space)
        assert main(command) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert "00000004 is intact" in err and "run the same command to resume" in err
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("0*"))[-1] <= "00000008"
    assert main(command) == 0
    assert [r["iteration"] for r in read_metrics(tmp_path)] == list(range(1, 17))
