import os
import shutil

import pytest
import torch

from cadence.trainer.checkpoint import CheckpointManager, _write_manifest, latest_iteration
from cadence.trainer.errors import CheckpointError


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
    _write_manifest(path)  # a checkpoint that verifies: only weights_only stands in the way
    with pytest.raises(Exception, match="[Ww]eights only"):
        manager.load(path)


def test_missing_checkpoint_says_where(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        CheckpointManager(tmp_path).load()


def _three_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    for iteration in (1, 2, 3):
        manager.save(iteration, {"i": iteration, "w": torch.arange(1000.0) * iteration})
    return manager


def _flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["flipped byte", "truncated", "missing state", "missing manifest", "edited manifest"],
)
def test_a_damaged_newest_checkpoint_is_named_and_the_previous_one_loads(tmp_path, caplog, damage):
    manager = _three_checkpoints(tmp_path)
    newest = tmp_path / "00000003"
    if damage == "flipped byte":
        _flip_middle_byte(newest / "state.pt")
    elif damage == "truncated":
        data = (newest / "state.pt").read_bytes()
        (newest / "state.pt").write_bytes(data[: len(data) // 2])
    elif damage == "missing state":
        (newest / "state.pt").unlink()
    elif damage == "missing manifest":
        (newest / "MANIFEST.json").unlink()
    else:
        (newest / "MANIFEST.json").write_text(
            (newest / "MANIFEST.json").read_text().replace("1", "2")
        )
    path, state = manager.load_verified()
    assert path.name == "00000002" and state["i"] == 2
    named = "MANIFEST.json" if "manifest" in damage else "state.pt"
    assert any(f"00000003/{named}" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("latest", ["00000009", "../outside", "", "00000001"])
def test_latest_naming_something_gone_outside_or_old_still_finds_the_newest_good_one(
    tmp_path, latest
):
    manager = _three_checkpoints(tmp_path)
    (tmp_path / "LATEST").write_text(latest)
    path, state = manager.load_verified()
    expected = 1 if latest == "00000001" else 3  # LATEST's own checkpoint comes first
    assert state["i"] == expected and path.name == f"{expected:08d}"


def test_a_manifest_not_matching_latests_digest_is_refused(tmp_path):
    manager = _three_checkpoints(tmp_path)
    name, digest = (tmp_path / "LATEST").read_text().split()
    (tmp_path / "LATEST").write_text(f"{name} {'0' * len(digest)}\n")
    path, _ = manager.load_verified()
    assert path.name == "00000002"


def test_when_nothing_verifies_the_error_names_each_file_and_nothing_is_removed(tmp_path):
    manager = _three_checkpoints(tmp_path)
    for iteration in (1, 2, 3):
        _flip_middle_byte(tmp_path / f"{iteration:08d}" / "state.pt")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(CheckpointError, match="no checkpoint .* verifies") as error:
        manager.load_verified()
    for iteration in (1, 2, 3):
        assert f"{iteration:08d}/state.pt" in str(error.value)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_a_full_disk_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    manager = _three_checkpoints(tmp_path)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(OSError, match="No space"):
        manager.save(4, {"i": 4})
    assert latest_iteration(tmp_path) == 3
    assert manager.load_verified()[1]["i"] == 3
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_republishing_an_iteration_keeps_the_old_copy_until_latest_has_moved(tmp_path, monkeypatch):
    manager = _three_checkpoints(tmp_path)
    (tmp_path / "LATEST").write_text("00000002")  # as if a run died before LATEST moved to 3
    seen = []
    write_latest = CheckpointManager._write_latest

    def checking_write_latest(self, name, digest):
        # Before LATEST moves, the old copy of 3 still exists (moved aside, not deleted).
        seen.append((tmp_path / ".00000003.old" / "state.pt").exists())
        write_latest(self, name, digest)

    monkeypatch.setattr(CheckpointManager, "_write_latest", checking_write_latest)
    manager.save(3, {"i": 33})
    assert seen == [True]
    assert manager.load_verified()[1]["i"] == 33
    assert not (tmp_path / ".00000003.old").exists()


def test_the_best_evaluated_checkpoint_is_kept_by_pruning_and_chosen_by_best(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=2)
    returns = {1: 10.0, 2: 50.0, 3: None, 4: 20.0, 5: 30.0, 6: None}
    for iteration, eval_return in returns.items():
        manager.save(iteration, {"i": iteration}, eval_return=eval_return)
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name.isdigit())
    assert names == ["00000002", "00000005", "00000006"], "the best (2) outlives pruning"
    assert manager.load_verified(which="best")[1]["i"] == 2
    assert manager.load_verified(which="latest")[1]["i"] == 6
    assert manager.load_verified(which="5")[1]["i"] == 5
    (tmp_path / "00000002" / "state.pt").write_bytes(b"damaged")
    assert manager.load_verified(which="best")[1]["i"] == 5, "the next best that verifies"
    assert "00000002/state.pt" in caplog.text
    with pytest.raises(FileNotFoundError, match="--checkpoint 4"):
        manager.load_verified(which="4")  # pruned
    with pytest.raises(ValueError, match="'latest', 'best' or an iteration"):
        manager.load_verified(which="newest")


def test_best_without_any_evaluated_checkpoint_says_how_to_get_one(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"i": 1})
    with pytest.raises(FileNotFoundError, match="multiple of eval_interval"):
        manager.load_verified(which="best")


def test_a_deleted_newest_checkpoint_is_named_with_the_one_used_instead(tmp_path, caplog):
    manager = _three_checkpoints(tmp_path)
    shutil.rmtree(tmp_path / "00000003")  # the one LATEST names
    with caplog.at_level("WARNING", logger="cadence.trainer.checkpoint"):
        path, state = manager.load_verified()
    assert path.name == "00000002" and state["i"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("00000003" in m and "missing" in m and "00000002" in m for m in warnings), warnings


def test_a_latest_naming_something_outside_is_named(tmp_path, caplog):
    manager = _three_checkpoints(tmp_path)
    (tmp_path / "LATEST").write_text("../outside")
    with caplog.at_level("WARNING", logger="cadence.trainer.checkpoint"):
        assert manager.load_verified()[0].name == "00000003"
    assert any("'../outside'" in r.getMessage() for r in caplog.records)
