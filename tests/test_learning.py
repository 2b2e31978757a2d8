"""Learning tests: named configs reach their bars within their budgets (marked slow).

``-k ci_budget`` selects the subset CI runs on every submission.
"""

import pytest

from cadence.testing.learning import train_to_bar

pytestmark = pytest.mark.slow


def _best_eval_return(name: str, tmp_path, bar: float, overrides: list[str]) -> float:
    return train_to_bar(name, tmp_path / "run", bar, overrides).best_return


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_cartpole_solves_within_its_default_budget(tmp_path, seed):
    assert _best_eval_return("ppo_cartpole", tmp_path, 475, [f"seed={seed}"]) >= 475


def test_ci_budget_ppo_cartpole_solves(tmp_path):
    assert _best_eval_return("ppo_cartpole", tmp_path, 475, ["seed=0"]) >= 475


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a2c_cartpole_solves_within_its_default_budget(tmp_path, seed):
    assert _best_eval_return("a2c_cartpole", tmp_path, 475, [f"seed={seed}"]) >= 475


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_pendulum_reaches_minus_300_within_200k_steps(tmp_path, seed):
    overrides = [f"seed={seed}", "trainer.num_env_steps=200000"]
    assert _best_eval_return("ppo_pendulum", tmp_path, -300, overrides) >= -300


def test_ppo_cartpole_pixels_solves_within_its_default_budget(tmp_path):
    # CPU-heavy: seeds 0-2 reached 475 at 20k, 72k and 51k env steps (2-5 min each).
    assert _best_eval_return("ppo_cartpole_pixels", tmp_path, 475, ["seed=0"]) >= 475
