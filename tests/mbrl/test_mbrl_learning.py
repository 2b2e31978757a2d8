"""Model-based learning tests (slow).

- dreamer_pendulum reaches -250 within its 20k env steps (``-k ci_budget`` selects the run
  CI affords: one seed, stopped once it reaches the bar).
- Denoised MDP's claim on cadence/NoisyPendulum-v0, as ``benchmarks/denoising_study.py``
  measures it: the distractors cost Dreamer return, Denoised MDP's median final return is
  at least Dreamer's, and a ridge probe from x recovers the pendulum and none of the
  distractors, while Dreamer's x holds them. Each run takes about 8 minutes on one core;
  all of them (3 configs x 3 seeds) about 70: ``pytest -m slow -k denoising``.
"""

from __future__ import annotations

import statistics

import pytest

from cadence.testing.learning import EvalCurve, train_to_bar

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_dreamer_pendulum_reaches_minus_250_within_20k_env_steps(tmp_path, seed):
    curve = train_to_bar("dreamer_pendulum", tmp_path / "run", -250, [f"seed={seed}"])
    assert curve.best_return >= -250


def test_ci_budget_dreamer_pendulum_reaches_minus_250(tmp_path):
    curve = train_to_bar("dreamer_pendulum", tmp_path / "run", -250, ["seed=0"])
    assert curve.best_return >= -250


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Trains ``(config, seed)`` for its whole budget on first use (one thread, as the
    study does, so the numbers are the study's), returning its run directory and curve."""
    root = tmp_path_factory.mktemp("denoising")
    runs: dict[tuple[str, int], tuple] = {}

    def run(config: str, seed: int):
        if (config, seed) not in runs:
            run_dir = root / f"{config}-seed{seed}"
            overrides = [f"seed={seed}", "trainer.num_threads=1"]
            runs[config, seed] = run_dir, train_to_bar(config, run_dir, None, overrides)
        return runs[config, seed]

    return run


def _median_final(study, config: str) -> float:
    curves: list[EvalCurve] = [study(config, seed)[1] for seed in SEEDS]
    return statistics.median(curve.final_return() for curve in curves)


@pytest.mark.timeout(1800)  # trains one run (about 8 minutes) unless an earlier test did
@pytest.mark.parametrize("seed", SEEDS)
def test_denoising_x_keeps_the_pendulum_and_leaves_out_every_distractor(study, seed):
    from cadence.latent_probe import probe_noisy_pendulum

    r2 = probe_noisy_pendulum(study("denoised_mdp_pendulum_noisy", seed)[0])
    assert min(r2["cos"], r2["sin"], r2["velocity"]) >= 0.9, r2
    assert max(r2["y_max"], r2["z_max"]) <= 0.2, r2


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", SEEDS)
def test_denoising_dreamers_x_holds_the_distractors(study, seed):
    """The contrast that makes the probe mean something: it finds distractors in x."""
    from cadence.latent_probe import probe_noisy_pendulum

    r2 = probe_noisy_pendulum(study("dreamer_pendulum_noisy", seed)[0])
    assert min(r2["cos"], r2["sin"], r2["velocity"]) >= 0.9, r2
    assert max(r2["y_max"], r2["z_max"]) >= 0.5, r2


@pytest.mark.timeout(3 * 3600)  # up to 9 runs, when it runs alone
def test_denoising_distractors_cost_dreamer_and_denoised_mdp_does_at_least_as_well(study):
    plain = _median_final(study, "dreamer_pendulum")
    noisy = _median_final(study, "dreamer_pendulum_noisy")
    denoised = _median_final(study, "denoised_mdp_pendulum_noisy")
    assert noisy < plain - 25, (plain, noisy)
    assert denoised >= noisy, (denoised, noisy)
