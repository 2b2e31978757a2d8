import os

import pytest
import torch

from cadence.trainer.checkpoint import CheckpointManager


def test_save_publishes_latest_and_round_trips(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints", keep=2)
    state = {
        "w": torch.arange(3.0),
        "counters": {"iteration": 5},
        "blob": b"\x00\x01",
        "rng": (1, 2),
    }
    path = manager.save(5, state)
    assert manager.latest() == path
    loaded = manager.load()
    assert torch.equal(loaded["w"], state["w"])
    assert loaded["counters"] == {"iteration": 5}
    assert loaded["blob"] == b"\x00\x01"


def test_keeps_only_the_last_k(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    for iteration in (1, 2, 3):
        manager.save(iteration, {"i": iteration})
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert names == ["00000002", "00000003"]
    assert manager.load()["i"] == 3


def test_a_half_written_checkpoint_is_invisible(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, {"i": 1})
    staging = tmp_path / ".00000002.tmp"  # what a run killed mid-save leaves behind
    staging.mkdir()
    (staging / "state.pt").write_bytes(b"garbage")
    assert manager.load()["i"] == 1
    manager.save(2, {"i": 2})
    assert manager.load()["i"] == 2 and not staging.exists()


def test_loading_never_runs_code(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(1, {"ok": 1})

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"evil": Evil()}, path / "state.pt")
    with pytest.raises(Exception, match="[Ww]eights only"):
        manager.load()


def test_missing_checkpoint_says_where(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        CheckpointManager(tmp_path).load()
