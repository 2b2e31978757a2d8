"""Starting a run directory again with another config: refused with the changed keys,
unless asked to resume with changes (which is how a finished run gets a larger budget)."""

import json

import pytest

from cadence.cli import main
from cadence.config import load_config
from cadence.trainer.errors import RunConfigMismatchError
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

SHORT = ["trainer.unroll_length=16", "env.num_envs=4", "trainer.progress_bar=off"]


def _config(root, *overrides):
    return load_config("ppo_cartpole", [*SHORT, *overrides], root_dir=root)


@pytest.fixture
def finished(tmp_path):
    root = tmp_path / "run"
    assert train(_config(root, "trainer.num_env_steps=256")) == "complete"
    return root


def test_a_changed_config_is_refused_naming_the_keys_and_writing_nothing(finished, capsys):
    before = {p: p.stat().st_mtime_ns for p in finished.rglob("*") if p.is_file()}
    argv = ["train", "ppo_cartpole", "--root-dir", str(finished), *SHORT]
    code = main([*argv, "trainer.num_env_steps=512", "algorithm.ent_coef=0.02"])
    error = capsys.readouterr().err
    assert code == 2
    assert "trainer.num_env_steps: 256 -> 512" in error and "algorithm.ent_coef" in error
    assert "--resume-with-changes" in error
    assert {p: p.stat().st_mtime_ns for p in finished.rglob("*") if p.is_file()} == before


def test_a_finished_run_is_extended_when_asked(finished, capsys):
    argv = ["train", "ppo_cartpole", "--root-dir", str(finished), *SHORT]
    assert main([*argv, "trainer.num_env_steps=512", "--resume-with-changes"]) == 0
    assert "complete" in capsys.readouterr().out
    rows = read_metrics(finished)
    assert rows[-1]["env_steps"] == 512
    iterations = [row["iteration"] for row in rows]
    assert iterations == sorted(set(iterations))
    [change] = [
        json.loads(line) for line in (finished / "config_changes.jsonl").read_text().splitlines()
    ]
    assert change["iteration"] == 4 and change["changes"]["trainer.num_env_steps"] == [256, 512]
    assert "num_env_steps: 512" in (finished / "config.yaml").read_text()
    # The same command again: the config now matches, and the run is complete.
    assert main([*argv, "trainer.num_env_steps=512"]) == 0
    assert "already complete" in capsys.readouterr().out


@pytest.mark.parametrize(
    "override",
    [
        "network.hidden_sizes=[32]",
        "env.num_envs=2",
        "env.backend=tensor",  # env states are back-end specific
        "algorithm=a2c",
        "seed=5",
    ],
)
def test_what_the_checkpoint_depends_on_cannot_change_even_when_asked(finished, override):
    config = _config(finished, "trainer.num_env_steps=256", override)
    with pytest.raises(RunConfigMismatchError, match="cannot change on resume"):
        train(config, resume_with_changes=True)


def test_the_budget_is_not_part_of_the_default_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    short = load_config("ppo_cartpole", ["trainer.num_env_steps=1000"])
    long = load_config("ppo_cartpole", ["trainer.num_env_steps=2000"])
    other = load_config("ppo_cartpole", ["algorithm.learning_rate=1e-3"])
    assert short.root_dir == long.root_dir != other.root_dir


def test_the_number_of_ranks_cannot_change_even_when_asked(finished):
    from cadence.trainer.run import prepare_run  # what `cadence train --nproc` checks first

    config = _config(finished, "trainer.num_env_steps=256", "trainer.num_ranks=2")
    with pytest.raises(RunConfigMismatchError, match="trainer.num_ranks cannot change"):
        prepare_run(config, resume_with_changes=True)


@pytest.mark.parametrize("override", ["trainer.progress_bar=on", "trainer.progress_interval_s=5"])
def test_display_only_keys_are_not_part_of_the_default_run_directory(
    tmp_path, monkeypatch, override
):
    monkeypatch.chdir(tmp_path)
    default = load_config("ppo_cartpole", ["trainer.num_env_steps=6000"])
    shown = load_config("ppo_cartpole", ["trainer.num_env_steps=6000", override])
    assert shown.root_dir == default.root_dir


def test_the_digest_of_a_run_with_default_display_keys_is_unchanged(tmp_path, monkeypatch):
    # Hashed at their defaults, not dropped: directories made before stay resolvable.
    monkeypatch.chdir(tmp_path)
    assert load_config("ppo_cartpole").root_dir.endswith("seed0-96ac1172")
    # Keys added since (env.async_batch_size, the model-based structure keys) at the value
    # that means what runs made before them did leave the name too.
    assert load_config("denoised_mdp_pendulum_noisy").root_dir.endswith("seed0-2e2e0b12")
    assert load_config("ppo_cartpole", ["env.async_batch_size=null"]).root_dir.endswith(
        "seed0-96ac1172"
    )


def test_a_changed_display_key_resumes_without_being_asked(finished, capsys):
    argv = ["train", "ppo_cartpole", "--root-dir", str(finished), *SHORT[:-1]]
    shown = ["trainer.num_env_steps=256", "trainer.progress_bar=auto"]
    assert main([*argv, *shown, "trainer.progress_interval_s=5"]) == 0
    assert "already complete" in capsys.readouterr().out
    # With a real change, only that change is recorded; config.yaml takes the new values.
    assert main([*argv, "trainer.num_env_steps=512", "--resume-with-changes"]) == 0
    [change] = (finished / "config_changes.jsonl").read_text().splitlines()
    assert list(json.loads(change)["changes"]) == ["trainer.num_env_steps"]
    assert "progress_bar: auto" in (finished / "config.yaml").read_text()
