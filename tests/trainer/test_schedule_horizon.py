"""The schedules keep the horizon of a run's first start across an extension of its budget
(docs/resume.md): ``--resume-with-changes trainer.num_env_steps=...`` does not rescale them."""

from __future__ import annotations

import pytest

from cadence.config import load_config
from cadence.testing.resume import assert_equal_nests, final_state, train_named
from cadence.trainer.run import train
from cadence.trainer.run_config import config_changes, first_budget

TINY = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    "trainer.eval_interval=0",
    "trainer.num_eval_episodes=1",
    "trainer.checkpoint_interval=1",
    "trainer.progress_bar=off",
    "algorithm.lr_schedule=linear",
    "algorithm.num_updates_per_train_iter=1",
]
BUDGET = 64  # two iterations of 2 envs x 16 steps


def _learning_rates(state):
    return [
        group["lr"]
        for key, value in state["algorithm"].items()
        if key.startswith("optim")
        for group in value["param_groups"]
    ]


def _extend(run_dir, overrides):
    config = load_config("ppo_cartpole", [*overrides, f"root_dir={run_dir}"])
    assert train(config, resume_with_changes=True) == "complete"


def test_an_extension_keeps_the_first_starts_horizon_and_a_decayed_rate_stays_decayed(
    tmp_path, caplog
):
    extended, reference = tmp_path / "extended", tmp_path / "reference"
    train_named("ppo_cartpole", extended, [*TINY, f"trainer.num_env_steps={BUDGET}"])
    with caplog.at_level("INFO", logger="cadence.trainer.run"):
        _extend(extended, [*TINY, f"trainer.num_env_steps={2 * BUDGET}"])
    assert any("run over 64 env steps" in r.getMessage() for r in caplog.records)
    assert first_budget(extended) == BUDGET
    # Uninterrupted with the same horizon from the start: the same run, bit for bit.
    train_named(
        "ppo_cartpole",
        reference,
        [*TINY, f"trainer.num_env_steps={2 * BUDGET}", f"trainer.schedule_horizon={BUDGET}"],
    )
    state, reference_state = final_state(extended), final_state(reference)
    assert_equal_nests(state["algorithm"], reference_state["algorithm"], "algorithm")
    # The linear rate reached 0 at the first budget and stays there (it jumped back up
    # to a quarter of its start when the budget was the horizon).
    assert _learning_rates(state) and all(lr == 0.0 for lr in _learning_rates(state))


def test_an_explicit_schedule_horizon_stretches_the_schedules(tmp_path):
    run_dir = tmp_path / "run"
    train_named("ppo_cartpole", run_dir, [*TINY, f"trainer.num_env_steps={BUDGET}"])
    overrides = [
        *TINY,
        f"trainer.num_env_steps={2 * BUDGET}",
        f"trainer.schedule_horizon={4 * BUDGET}",
    ]
    _extend(run_dir, overrides)
    # The last iteration (the 4th) starts at 96 env steps of a horizon of 256.
    learning_rate = load_config("ppo_cartpole", TINY).algorithm.learning_rate
    rates = _learning_rates(final_state(run_dir))
    assert rates and all(lr == pytest.approx(learning_rate * (1 - 96 / 256)) for lr in rates)


def test_runs_recorded_before_the_key_resume_and_keep_their_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    current = load_config("ppo_cartpole").to_yaml()
    older = current.replace("  schedule_horizon: 0\n", "")
    assert older != current and config_changes(older, current) == {}
    # The horizon goes with the budget: neither is in the default directory's digest.
    stretched = load_config("ppo_cartpole", ["trainer.schedule_horizon=5"])
    assert stretched.root_dir == load_config("ppo_cartpole").root_dir
