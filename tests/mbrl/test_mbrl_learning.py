"""Model-based learning tests (slow): dreamer_pendulum reaches -250 within its 20k env steps.

``-k ci_budget`` selects the run CI affords: one seed, stopped once it reaches the bar.
The denoising claims on cadence/NoisyPendulum-v0 (Denoised MDP >= Dreamer, and what the
x latent knows) are measured by ``benchmarks/denoising_study.py``: 3 seeds of two
algorithms take too long for a test.
"""

from __future__ import annotations

import pytest

from cadence.testing.learning import train_to_bar

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dreamer_pendulum_reaches_minus_250_within_20k_env_steps(tmp_path, seed):
    curve = train_to_bar("dreamer_pendulum", tmp_path / "run", -250, [f"seed={seed}"])
    assert curve.best_return >= -250


def test_ci_budget_dreamer_pendulum_reaches_minus_250(tmp_path):
    curve = train_to_bar("dreamer_pendulum", tmp_path / "run", -250, ["seed=0"])
    assert curve.best_return >= -250
