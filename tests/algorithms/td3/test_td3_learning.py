"""TD3 learning tests (slow): td3_pendulum reaches an eval return of -200 within 20k env steps.

``-k ci_budget`` selects the single-seed run CI affords on every submission.
"""

from __future__ import annotations

import pytest

from cadence.testing.learning import train_to_bar

# A single run takes 1-3 minutes on a free CPU core; the limit leaves room for a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

BAR = -200.0
BUDGET = 20_000


def first_env_steps_at_bar(name: str, tmp_path, seed: int) -> int | None:
    """Trains ``name`` for ``BUDGET`` env steps (stopping at ``BAR``); the env steps of the
    first evaluation at or above ``BAR``, or None."""
    overrides = [f"seed={seed}", f"trainer.num_env_steps={BUDGET}"]
    return train_to_bar(name, tmp_path / "run", BAR, overrides).env_steps_to(BAR)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_td3_pendulum_reaches_minus_200_within_20k_steps(tmp_path, seed):
    env_steps = first_env_steps_at_bar("td3_pendulum", tmp_path, seed)
    assert env_steps is not None and env_steps <= BUDGET


def test_ci_budget_td3_pendulum_reaches_minus_200(tmp_path):
    env_steps = first_env_steps_at_bar("td3_pendulum", tmp_path, seed=0)
    assert env_steps is not None and env_steps <= BUDGET
