"""DQN learning tests (slow): dqn_cartpole reaches an eval return of 475 within 100k env steps.

``-k ci_budget`` selects the one seed CI runs on every submission.
"""

from __future__ import annotations

import pytest

from cadence.testing.learning import train_to_bar

pytestmark = pytest.mark.slow

BAR = 475.0
BUDGET = 100_000


def _env_steps_to_bar(tmp_path, seed: int) -> int | None:
    """Trains dqn_cartpole until an evaluation reaches the bar; the env steps it took."""
    overrides = [f"seed={seed}", f"trainer.num_env_steps={BUDGET}"]
    return train_to_bar("dqn_cartpole", tmp_path / "run", BAR, overrides).env_steps_to(BAR)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_cartpole_reaches_475_within_100k_env_steps(tmp_path, seed):
    env_steps = _env_steps_to_bar(tmp_path, seed)
    assert env_steps is not None and env_steps <= BUDGET, f"seed {seed} did not reach {BAR}"


def test_ci_budget_dqn_cartpole_reaches_475(tmp_path):
    env_steps = _env_steps_to_bar(tmp_path, seed=0)
    assert env_steps is not None and env_steps <= BUDGET
