"""Replay checkpoints on disk: exact round trips, corrupted or missing files refused with the
file named, atomic publishing, and the background `ChunkWriter`."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.replay.buffer import ReplayBuffer
from cadence.replay.chunk_writer import ChunkWriter
from cadence.replay.persistence import ChecksumError, load_checkpoint, save_checkpoint
from cadence.replay.prioritized import PrioritizedSampler


def _buffer(sampler: PrioritizedSampler | None = None, observer=None) -> ReplayBuffer:
    return ReplayBuffer(num_envs=2, capacity=8, sampler=sampler, observer=observer)


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
    snapshot = save_checkpoint(buffer, tmp_path / "replay", chunk_length=4)
    assert sorted(p.name for p in snapshot.iterdir()) == [
        "env00000-chunk00000.pt",
        "env00000-chunk00001.pt",
        "env00001-chunk00000.pt",
        "env00001-chunk00001.pt",
        "manifest.json",
        "meta.pt",
    ]
    restored = _buffer(PrioritizedSampler(alpha=0.6))
    load_checkpoint(restored, tmp_path / "replay")
    _assert_same(buffer, restored)
    envs, positions = torch.tensor([0, 1]), torch.arange(8).expand(2, 8)
    assert torch.equal(
        buffer.episode_index.episode_start(envs, positions),
        restored.episode_index.episode_start(envs, positions),
    )


def test_a_partly_filled_buffer_saves_only_the_chunks_that_hold_data(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 3)
    snapshot = save_checkpoint(buffer, tmp_path, chunk_length=2)
    assert sorted(p.name for p in snapshot.glob("env*")) == [
        "env00000-chunk00000.pt",
        "env00000-chunk00001.pt",
        "env00001-chunk00000.pt",
        "env00001-chunk00001.pt",
    ]
    restored = _buffer()
    load_checkpoint(restored, tmp_path)
    _assert_same(buffer, restored)


def test_a_corrupted_chunk_is_refused_with_the_file_named_and_the_buffer_untouched(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 8)
    snapshot = save_checkpoint(buffer, tmp_path, chunk_length=4)
    chunk = snapshot / "env00001-chunk00001.pt"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    restored = _buffer()
    _add(restored, 50, 2)
    before = restored.state_dict()
    with pytest.raises(ChecksumError, match="env00001-chunk00001.pt: checksum mismatch") as error:
        load_checkpoint(restored, tmp_path)
    assert error.value.path == chunk
    assert torch.equal(
        restored.state_dict()["storage"]["fields"]["x"], before["storage"]["fields"]["x"]
    )
    assert restored.storage.num_added.tolist() == [2, 2]


def test_missing_files_and_pointers_are_refused_with_their_names(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 4)
    with pytest.raises(ChecksumError, match="CURRENT"):
        load_checkpoint(buffer, tmp_path)
    snapshot = save_checkpoint(buffer, tmp_path, chunk_length=4)
    (snapshot / "meta.pt").unlink()
    with pytest.raises(ChecksumError, match="meta.pt: cannot be read"):
        load_checkpoint(_buffer(), tmp_path)
    save_checkpoint(buffer, tmp_path, chunk_length=4)
    manifest = tmp_path / (tmp_path / "CURRENT").read_text().split()[0] / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"format": 1', '"format":  1'))
    with pytest.raises(ChecksumError, match="manifest.json: checksum mismatch"):
        load_checkpoint(_buffer(), tmp_path)


def test_a_checkpoint_of_another_size_or_chunking_is_refused(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 4)
    save_checkpoint(buffer, tmp_path, chunk_length=4)
    with pytest.raises(ValueError, match="2 envs x 8 steps"):
        load_checkpoint(ReplayBuffer(num_envs=2, capacity=16), tmp_path)
    with pytest.raises(ValueError, match="must divide the capacity 8"):
        save_checkpoint(buffer, tmp_path, chunk_length=3)


def test_publishing_replaces_the_previous_snapshot_only_when_complete(tmp_path):
    buffer = _buffer()
    _add(buffer, 0, 4)
    first = save_checkpoint(buffer, tmp_path, chunk_length=4)
    # A crash while staging the next snapshot leaves a .tmp directory and CURRENT untouched.
    (tmp_path / "snapshot-000002.tmp").mkdir()
    (tmp_path / "snapshot-000002.tmp" / "meta.pt").write_bytes(b"half written")
    restored = _buffer()
    load_checkpoint(restored, tmp_path)
    _assert_same(buffer, restored)
    _add(buffer, 4, 3)
    second = save_checkpoint(buffer, tmp_path, chunk_length=4)
    assert second.name != first.name and not first.exists()
    assert not (tmp_path / "snapshot-000002.tmp").exists()
    load_checkpoint(restored, tmp_path)
    _assert_same(buffer, restored)


def test_the_chunk_writer_flushes_completed_chunks_and_checkpoints_link_them(tmp_path):
    with ChunkWriter(tmp_path / "live", chunk_length=4) as writer:
        buffer = _buffer(PrioritizedSampler(), observer=writer)
        _add(buffer, 0, 6)  # chunk 0 of each env complete, chunk 1 half full
        writer.wait()
        assert sorted(p.name for p in (tmp_path / "live").iterdir()) == [
            "env00000-chunk00000.pt",
            "env00001-chunk00000.pt",
        ]
        snapshot = writer.checkpoint(buffer, tmp_path / "ckpt")
        live = tmp_path / "live" / "env00000-chunk00000.pt"
        assert os.stat(live).st_ino == os.stat(snapshot / live.name).st_ino, "not re-written"
        _add(buffer, 6, 7)  # 13 steps: wraps, chunk slot 0 now holds times 8..11
        snapshot = writer.checkpoint(buffer, tmp_path / "ckpt")
        # The first snapshot's hard link kept the old bytes; the new one has the new chunk.
        restored = _buffer(PrioritizedSampler())
        load_checkpoint(restored, tmp_path / "ckpt")
        _assert_same(buffer, restored)
        assert restored.gather_all()["x"][0].tolist() == list(range(5, 13))


def test_loading_into_a_followed_buffer_forgets_the_stale_live_chunks(tmp_path):
    source = _buffer()
    _add(source, 0, 8)
    save_checkpoint(source, tmp_path / "ckpt", chunk_length=4)
    with ChunkWriter(tmp_path / "live", chunk_length=4) as writer:
        buffer = _buffer(observer=writer)
        _add(buffer, 40, 4)
        writer.wait()
        assert any((tmp_path / "live").iterdir())
        load_checkpoint(buffer, tmp_path / "ckpt")
        assert not any((tmp_path / "live").iterdir())
        snapshot = writer.checkpoint(buffer, tmp_path / "again")
        assert len(list(snapshot.glob("env*"))) == 4
    restored = _buffer()
    load_checkpoint(restored, tmp_path / "again")
    _assert_same(source, restored)
