"""SAC learning tests (slow): sac_pendulum reaches an eval return of -200 within its
20k-step budget for seeds 0, 1 and 2 (about 4-5k env steps each).

``-k ci_budget`` selects the one-seed variant CI runs on every submission.
"""

import pytest

from cadence.config import load_config
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

pytestmark = pytest.mark.slow


def _best_eval_return(name: str, tmp_path, overrides: list[str]) -> float:
    config = load_config(name, [f"root_dir={tmp_path / 'run'}", "trainer.progress_bar=off", *overrides])
    assert config.trainer.num_env_steps == 20_000
    train(config)
    records = read_metrics(tmp_path / "run")
    returns = [r["eval/episode_return"] for r in records if r.get("eval/episode_return") is not None]
    assert returns, "no evaluation was logged"
    return max(returns)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_pendulum_reaches_minus_200_within_20k_steps(tmp_path, seed):
    overrides = [f"seed={seed}", "trainer.stop_at_eval_return=-200"]
    assert _best_eval_return("sac_pendulum", tmp_path, overrides) >= -200


def test_ci_budget_sac_pendulum_reaches_minus_200(tmp_path):
    overrides = ["seed=0", "trainer.stop_at_eval_return=-200"]
    assert _best_eval_return("sac_pendulum", tmp_path, overrides) >= -200
