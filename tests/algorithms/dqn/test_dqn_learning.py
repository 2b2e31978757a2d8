"""DQN learning tests (slow): dqn_cartpole reaches an eval return of 475 within 100k env steps.

``-k ci_budget`` selects the one seed CI runs on every submission.
"""

from __future__ import annotations

import pytest

from cadence.config import load_config
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

pytestmark = pytest.mark.slow

BAR = 475.0
BUDGET = 100_000


def _env_steps_to_bar(tmp_path, seed: int) -> int | None:
    """Trains dqn_cartpole until an evaluation reaches the bar; the env steps it took."""
    overrides = [
        f"seed={seed}",
        f"trainer.num_env_steps={BUDGET}",
        f"trainer.stop_at_eval_return={BAR}",
        "trainer.progress_bar=off",
        f"root_dir={tmp_path / 'run'}",
    ]
    train(load_config("dqn_cartpole", overrides))
    evaluations = [r for r in read_metrics(tmp_path / "run") if r.get("eval/episode_return")]
    assert evaluations, "no evaluation was logged"
    solved = [r["env_steps"] for r in evaluations if r["eval/episode_return"] >= BAR]
    return solved[0] if solved else None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_cartpole_reaches_475_within_100k_env_steps(tmp_path, seed):
    env_steps = _env_steps_to_bar(tmp_path, seed)
    assert env_steps is not None and env_steps <= BUDGET, f"seed {seed} did not reach {BAR}"


def test_ci_budget_dqn_cartpole_reaches_475(tmp_path):
    env_steps = _env_steps_to_bar(tmp_path, seed=0)
    assert env_steps is not None and env_steps <= BUDGET
