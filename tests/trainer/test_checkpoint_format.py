"""The checkpoint format on disk is fixed: a run directory written by an earlier version
must load. The bytes below are what the code wrote before the durable-write module was
shared with the replay buffer; any change to the layout, the manifest's fields or their
encoding shows up here."""

from __future__ import annotations

from cadence.trainer.checkpoint import MANIFEST_FILE, STATE_FILE, CheckpointManager

EXPECTED_MANIFEST = (
    b'{\n "files": {\n  "data/meta.pt": {\n   "size": 4,\n   "sha256": '
    b'"abababababababababababababababababababababababababababababababab"\n  },\n'
    b'  "state.pt": {\n   "size": 11,\n   "sha256": '
    b'"81c46cbc495ddd7bb39b1a80f631df6f475a72f0e864c1b6eb27f759c93c0629"\n  }\n },\n'
    b' "digest": "89ad7185d1dea3b899f86d1ebe156e10e501431d5531d6890ab35f3fb6f68ade",\n'
    b' "eval_return": 1.5\n}'
)
EXPECTED_LATEST = b"00000007 413f3749985be5bf3aa284160bc899a93524d14c7779de24c00f34c40240b4aa\n"


def _publish(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    staging = manager.staging_path(7)
    manager.prepare_staging(staging)
    (staging / STATE_FILE).write_bytes(b"state bytes")
    (staging / "data").mkdir()
    (staging / "data" / "meta.pt").write_bytes(b"meta")
    # The digest of data/meta.pt is "known" (as the replay writer reports it): not rehashed.
    return manager, manager.publish(7, staging, {"data/meta.pt": "ab" * 32}, eval_return=1.5)


def test_the_manifest_and_latest_are_byte_identical_to_the_earlier_format(tmp_path):
    _, final = _publish(tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["00000007", "LATEST"]
    assert sorted(p.name for p in final.iterdir()) == [MANIFEST_FILE, "data", STATE_FILE]
    assert (final / MANIFEST_FILE).read_bytes() == EXPECTED_MANIFEST
    assert (tmp_path / "checkpoints" / "LATEST").read_bytes() == EXPECTED_LATEST


def test_a_checkpoint_in_the_earlier_format_verifies(tmp_path):
    manager, final = _publish(tmp_path)
    (final / "data" / "meta.pt").unlink()  # the known digest is not that of b"meta"
    assert manager.verify(final, EXPECTED_LATEST.split()[1].decode(), only={STATE_FILE}) == {
        "data/meta.pt": "ab" * 32,
        STATE_FILE: "81c46cbc495ddd7bb39b1a80f631df6f475a72f0e864c1b6eb27f759c93c0629",
    }
