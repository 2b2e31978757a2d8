"""A model-based run's replay rows hold what its training reads, not the recurrent latent
(replayed windows start from the zero latent); a replay restored from a run whose rows
held it goes on holding it, so that such a run resumes."""

from __future__ import annotations

from cadence.cli import main
from cadence.data.nest import flatten_with_paths
from cadence.mbrl.algorithm import ModelBasedAlgorithm
from cadence.testing.resume import TINY_DREAMER_PENDULUM, final_state, train_named

TINY = [
    *TINY_DREAMER_PENDULUM,
    "trainer.num_env_steps=600",
    "trainer.checkpoint_interval=1",
    "trainer.eval_interval=100",
    "trainer.progress_bar=off",
    "seed=3",
]


def _row_keys(run_dir) -> set[str]:
    structure = final_state(run_dir)["scheme"]["replay_buffer"]["storage"]["structure"]
    return {key for key, _ in flatten_with_paths(structure)}


def test_a_model_based_replay_row_holds_no_recurrent_state(tmp_path):
    assert train_named("denoised_mdp_pendulum_noisy", tmp_path, TINY) == "complete"
    keys = _row_keys(tmp_path)
    assert not [key for key in keys if key.startswith("state") or "belief" in key]
    assert set(ModelBasedAlgorithm.replay_fields) <= keys


def test_a_replay_restored_with_recurrent_states_keeps_storing_them(tmp_path, monkeypatch):
    first = [o.replace("600", "400") if o.startswith("trainer.num_env_steps") else o for o in TINY]
    with monkeypatch.context() as patch:  # rows as a cadence before this change wrote them
        patch.setattr(ModelBasedAlgorithm, "replays_state", True)
        assert train_named("dreamer_pendulum", tmp_path, first) == "complete"
    assert {"state/x_belief", "state/x_state"} <= _row_keys(tmp_path)
    argv = ["train", "dreamer_pendulum", "--root-dir", str(tmp_path), *TINY]
    assert main([*argv, "--resume-with-changes"]) == 0
    assert final_state(tmp_path)["scheme"]["env_steps"] == 600
    assert {"state/x_belief", "state/x_state"} <= _row_keys(tmp_path)
