"""Replay snapshots on disk: exact round trips, corrupted or missing files refused with the
file named, and the background `ChunkWriter` (publishing is the trainer's checkpoint's job)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from cadence.replay.buffer import ReplayBuffer
from cadence.replay.chunk_writer import ChunkWriter
from cadence.replay.persistence import ChecksumError, read_snapshot, write_snapshot
from cadence.replay.prioritized import PrioritizedSampler


def _buffer(sampler: PrioritizedSampler | None = None, observer=None) -> ReplayBuffer:
    return ReplayBuffer(num_envs=2, capacity=8, sampler=sampler, observer=observer)


def _save(buffer: ReplayBuffer, directory: Path, chunk_length: int) -> tuple[Path, dict]:
    """Writes a snapshot into the new directory ``directory``; returns it and its digests."""
    directory.mkdir(parents=True)
    return directory, write_snapshot(buffer, directory, chunk_length)


def _save_with(writer: ChunkWriter, buffer: ReplayBuffer, directory: Path) -> tuple[Path, dict]:
    directory.mkdir(parents=True)
    return directory, writer.write_snapshot(buffer, directory)


def _add(buffer: ReplayBuffer, start: int, steps: int) -> None:
    """``steps`` steps per env; env e's step t holds ``x = 100 e + t`` and a step type."""
    times = torch.arange(start, start + steps)
    x = (times[:, None] + torch.tensor([0, 100])).float()
    step_type = torch.where(times % 5 == 0, 0, torch.where(times % 5 == 4, 2, 1))
    buffer.add_sequence(
        {
            "x": x,
            "obs": {"pixels": x.to(torch.uint8)[..., None].expand(-1, -1, 3).clone()},
            "time_step": {"step_type": step_type[:, None].expand(-1, 2).clone()},
        }
    )


def _assert_same(a: ReplayBuffer, b: ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert torch.equal(sa["storage"]["num_added"], sb["storage"]["num_added"])
    assert sa["storage"]["structure"] == sb["storage"]["structure"]
    assert sa["storage"]["fields"].keys() == sb["storage"]["fields"].keys()
    for key, ring in sa["storage"]["fields"].items():
        assert torch.equal(ring, sb["storage"]["fields"][key]), key
    for key, value in sa["sampler"].items():
        other = sb["sampler"][key]
        assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other, key


def test_save_and_load_round_trip_is_exact(tmp_path):
    buffer = _buffer(PrioritizedSampler(alpha=0.6))
    _add(buffer, 0, 11)  # wrapped, and the write head is in the middle of a chunk
    buffer.update_priorities(torch.tensor([0, 9]), torch.tensor([3.0, 0.2]))
    buffer.sampler.advance(7)
    snapshot, files = _save(buffer, tmp_path / "replay", chunk_length=4)
    names = [
        "env00000-chunk00000.pt",
        "env00000-chunk00001.pt",
        "env00001-chunk00000.pt",
        "env00001-chunk00001.pt",
        "meta.pt",
    ]
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(files) == names
    restored = _buffer(PrioritizedSampler(alpha=0.6))
    read_snapshot(restored, snapshot, files)
    _assert_same(buffer, restored)
    envs, positions = torch.tensor([0, 1]), torch.arange(8).expand(2, 8)
    assert torch.equal(
        buffer.episode_index.episode_start(envs, positions),
        restored.episode_index.episode_start(envs, positions),
    )


def test_a_partly_filled_buffer_saves_only_the_chunks_that_hold_data(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 3)
    snapshot, files = _save(buffer, tmp_path / "replay", chunk_length=2)
    assert sorted(p.name for p in snapshot.glob("env*")) == [
        "env00000-chunk00000.pt",
        "env00000-chunk00001.pt",
        "env00001-chunk00000.pt",
        "env00001-chunk00001.pt",
    ]
    restored = _buffer()
    read_snapshot(restored, snapshot, files)
    _assert_same(buffer, restored)


def test_a_corrupted_chunk_is_refused_with_the_file_named_and_the_buffer_untouched(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 8)
    snapshot, files = _save(buffer, tmp_path / "replay", chunk_length=4)
    chunk = snapshot / "env00001-chunk00001.pt"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    restored = _buffer()
    _add(restored, 50, 2)
    before = restored.state_dict()
    with pytest.raises(ChecksumError, match="env00001-chunk00001.pt: checksum mismatch") as error:
        read_snapshot(restored, snapshot, files)
    assert error.value.path == chunk
    assert torch.equal(
        restored.state_dict()["storage"]["fields"]["x"], before["storage"]["fields"]["x"]
    )
    assert restored.storage.num_added.tolist() == [2, 2]


def test_missing_and_unlisted_files_are_refused_with_their_names(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 4)
    snapshot, files = _save(buffer, tmp_path / "replay", chunk_length=4)
    (snapshot / "env00001-chunk00000.pt").unlink()
    with pytest.raises(ChecksumError, match="env00001-chunk00000.pt: is missing"):
        read_snapshot(_buffer(), snapshot, files)
    del files["env00000-chunk00000.pt"]
    with pytest.raises(ChecksumError, match="env00000-chunk00000.pt: not listed"):
        read_snapshot(_buffer(), snapshot, files)
    (snapshot / "meta.pt").unlink()
    with pytest.raises(ChecksumError, match="meta.pt: cannot be read"):
        read_snapshot(_buffer(), snapshot, files)


def test_a_snapshot_of_another_size_or_chunking_is_refused(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 4)
    snapshot, files = _save(buffer, tmp_path / "replay", chunk_length=4)
    with pytest.raises(ValueError, match="2 envs x 8 steps"):
        read_snapshot(ReplayBuffer(num_envs=2, capacity=16), snapshot, files)
    with pytest.raises(ValueError, match="must divide the capacity 8"):
        _save(buffer, tmp_path / "other", chunk_length=3)


def test_the_chunk_writer_flushes_completed_chunks_and_checkpoints_link_them(tmp_path):
    with ChunkWriter(tmp_path / "live", chunk_length=4) as writer:
        buffer = _buffer(PrioritizedSampler(), observer=writer)
        _add(buffer, 0, 6)  # chunk 0 of each env complete, chunk 1 half full
        writer.wait()
        assert sorted(p.name for p in (tmp_path / "live").iterdir()) == [
            "env00000-chunk00000.pt",
            "env00001-chunk00000.pt",
        ]
        first, first_files = _save_with(writer, buffer, tmp_path / "ckpt1")
        live = tmp_path / "live" / "env00000-chunk00000.pt"
        assert os.stat(live).st_ino == os.stat(first / live.name).st_ino, "not re-written"
        _add(buffer, 6, 7)  # 13 steps: wraps, chunk slot 0 now holds times 8..11
        snapshot, files = _save_with(writer, buffer, tmp_path / "ckpt2")
        # The new snapshot has the new chunk; the first one's hard link kept the old bytes.
        restored = _buffer(PrioritizedSampler())
        read_snapshot(restored, snapshot, files)
        _assert_same(buffer, restored)
        assert restored.gather_all()["x"][0].tolist() == list(range(5, 13))
        read_snapshot(restored, first, first_files)
        assert restored.gather_all()["x"][0].tolist() == list(range(6))


def test_loading_into_a_followed_buffer_forgets_the_stale_live_chunks(tmp_path):
    source = _buffer()
    _add(source, 0, 8)
    saved, saved_files = _save(source, tmp_path / "ckpt", chunk_length=4)
    with ChunkWriter(tmp_path / "live", chunk_length=4) as writer:
        buffer = _buffer(observer=writer)
        _add(buffer, 40, 4)
        writer.wait()
        assert any((tmp_path / "live").iterdir())
        read_snapshot(buffer, saved, saved_files)
        assert not any((tmp_path / "live").iterdir())
        snapshot, files = _save_with(writer, buffer, tmp_path / "again")
        assert len(list(snapshot.glob("env*"))) == 4
    restored = _buffer()
    read_snapshot(restored, snapshot, files)
    _assert_same(source, restored)
