"""Durable writes: a crash leaves the old file or the new one, renames are synced, and the
digests agree whether taken from bytes or streamed from a file."""

from __future__ import annotations

import hashlib
import os

import pytest

from cadence.data import durable
from cadence.data.durable import (
    fsync_directory,
    replace_durably,
    sha256_of_bytes,
    sha256_of_file,
    write_atomic,
    write_durable,
)


def test_a_file_is_hashed_the_same_streamed_in_blocks_as_from_its_bytes(tmp_path):
    data = bytes(range(256)) * (3 * (1 << 20) // 256 + 7)  # over three 1 MiB blocks
    write_durable(tmp_path / "blob", data)
    expected = hashlib.sha256(data).hexdigest()
    assert sha256_of_bytes(data) == expected
    assert sha256_of_file(tmp_path / "blob") == expected


def test_write_atomic_replaces_the_content_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "LATEST"
    path.write_bytes(b"old")
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST"]


def test_a_write_that_fails_before_the_rename_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "LATEST"
    path.write_bytes(b"00000004 digest\n")

    def full_disk(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, b"00000008 digest\n")
    assert path.read_bytes() == b"00000004 digest\n"


@pytest.mark.parametrize("sync_directory", [True, False])
def test_the_rename_is_synced_unless_asked_not_to(tmp_path, monkeypatch, sync_directory):
    synced = []
    monkeypatch.setattr(durable, "fsync_directory", synced.append)
    write_atomic(tmp_path / "chunk.pt", b"x", tmp_path / "chunk.tmp", sync_directory)
    assert (tmp_path / "chunk.pt").read_bytes() == b"x" and not (tmp_path / "chunk.tmp").exists()
    assert synced == ([tmp_path] if sync_directory else [])


def test_replace_durably_moves_a_directory_over_another_and_syncs_its_parent(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(durable, "fsync_directory", synced.append)
    (tmp_path / ".staging").mkdir()
    (tmp_path / ".staging" / "state.pt").write_bytes(b"state")
    replace_durably(tmp_path / ".staging", tmp_path / "00000004")
    assert (tmp_path / "00000004" / "state.pt").read_bytes() == b"state"
    assert synced == [tmp_path]


def test_syncing_a_directory_that_cannot_be_opened_is_a_no_op(tmp_path):
    fsync_directory(tmp_path / "missing")  # no error: nothing to make durable
    fsync_directory(tmp_path)
