"""SAC learning tests (slow): sac_pendulum reaches an eval return of -200 within its
20k-step budget for seeds 0, 1 and 2 (about 4-5k env steps each).

``-k ci_budget`` selects the one-seed variant CI runs on every submission.
"""

import pytest

from cadence.testing.learning import train_to_bar

pytestmark = pytest.mark.slow


def _best_eval_return(tmp_path, seed: int) -> float:
    """Trains sac_pendulum with its 20k-step budget until an evaluation reaches -200."""
    curve = train_to_bar("sac_pendulum", tmp_path / "run", -200, [f"seed={seed}"])
    assert curve.budget == 20_000
    return curve.best_return


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_pendulum_reaches_minus_200_within_20k_steps(tmp_path, seed):
    assert _best_eval_return(tmp_path, seed) >= -200


def test_ci_budget_sac_pendulum_reaches_minus_200(tmp_path):
    assert _best_eval_return(tmp_path, seed=0) >= -200
