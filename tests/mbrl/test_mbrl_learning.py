"""Model-based learning tests (slow).

- dreamer_pendulum reaches -250 within its 20k env steps (``-k ci_budget`` selects the run
  CI affords: one seed, stopped once it reaches the bar).
- Denoised MDP's representation claim on cadence/NoisyPendulum-v0, on the held-out seeds
  3-7 (the configs were tuned on seeds 0-2), as ``benchmarks/denoising_study.py`` measures
  it and docs/model-based.md reports it: Dreamer's x holds the distractors in every seed;
  Denoised MDP's y holds them in every seed, and its x keeps the pendulum and leaves every
  distractor out in most seeds (3 of 5 when measured). The return claim did not hold on
  these seeds (Denoised MDP's mean final return was below Dreamer's on the noisy task),
  so no test asserts it. Each run takes about 8 minutes on one core; the two configs
  these tests train (2 x 5 seeds) about 80: ``pytest -m slow -k denoising``.
"""

from __future__ import annotations

import pytest

from cadence.testing.learning import train_to_bar

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)
HELD_OUT_SEEDS = (3, 4, 5, 6, 7)
LEFT_OUT = 0.2  # a distractor whose probe R² is at most this is not in the latent
HELD = 0.5  # one at least this is


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
    study does, so the numbers are the study's), returning its run directory."""
    root = tmp_path_factory.mktemp("denoising")
    runs: dict[tuple[str, int], object] = {}

    def run(config: str, seed: int):
        if (config, seed) not in runs:
            run_dir = root / f"{config}-seed{seed}"
            overrides = [f"seed={seed}", "trainer.num_threads=1"]
            train_to_bar(config, run_dir, None, overrides)
            runs[config, seed] = run_dir
        return runs[config, seed]

    return run


def _probe(run_dir, group: str) -> dict[str, float]:
    from cadence.latent_probe import probe_noisy_pendulum

    return probe_noisy_pendulum(run_dir, groups=(group,))


def _pendulum(r2: dict[str, float]) -> float:
    return min(r2["cos"], r2["sin"], r2["velocity"])


@pytest.mark.timeout(1800)  # trains one run (about 8 minutes) unless an earlier test did
@pytest.mark.parametrize("seed", HELD_OUT_SEEDS)
def test_denoising_dreamers_x_holds_the_distractors(study, seed):
    """The contrast that makes the probe mean something: it finds distractors in x."""
    r2 = _probe(study("dreamer_pendulum_noisy", seed), "x")
    assert _pendulum(r2) >= 0.9, r2
    assert max(r2["y_max"], r2["z_max"]) >= HELD, r2


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", HELD_OUT_SEEDS)
def test_denoising_y_holds_the_distractors(study, seed):
    r2 = _probe(study("denoised_mdp_pendulum_noisy", seed), "y")
    assert min(r2["y_max"], r2["z_max"]) >= 0.9, r2


@pytest.mark.timeout(5 * 1800)  # up to 5 runs, when it runs alone
def test_denoising_x_keeps_the_pendulum_and_leaves_the_distractors_out_in_most_seeds(study):
    probes = {
        seed: _probe(study("denoised_mdp_pendulum_noisy", seed), "x") for seed in HELD_OUT_SEEDS
    }
    clean = [
        seed
        for seed, r2 in probes.items()
        if _pendulum(r2) >= 0.9 and max(r2["y_max"], r2["z_max"]) <= LEFT_OUT
    ]
    assert len(clean) > len(HELD_OUT_SEEDS) / 2, probes
