"""Learning tests of the data transformers (slow).

- dqn_her_bitflip: with 15 bits, DQN with hindsight relabelling reaches a success rate of
  at least 0.9 while the same config without it stays at or below 0.1, at the same budget;
- ppo_cartpole_normalized: PPO with observation normalization reaches an eval return of 475;
- sac_her_fetchreach (the robotics extra, which the test extra installs): SAC + HER reaches
  a success rate of 0.9 on FetchReach within 5k env steps.

``-k ci_budget`` selects the runs CI affords on every submission.
"""

from __future__ import annotations

import pytest

from cadence.config import load_config
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

pytestmark = pytest.mark.slow


def _evaluations(name: str, root, overrides: list[str], key: str) -> list[float]:
    config = load_config(name, [f"root_dir={root}", "trainer.progress_bar=off", *overrides])
    train(config)
    values = [r[key] for r in read_metrics(root) if r.get(key) is not None]
    assert values, f"no {key} was logged"
    return values


def _her_vs_no_her(tmp_path, seed: int) -> tuple[list[float], list[float]]:
    budget = load_config("dqn_her_bitflip").trainer.num_env_steps
    her = _evaluations("dqn_her_bitflip", tmp_path / "her", [f"seed={seed}"], "eval/success_rate")
    no_her = _evaluations(
        "dqn_her_bitflip",
        tmp_path / "no_her",
        [f"seed={seed}", "data_transformers.names=[]", f"trainer.num_env_steps={budget}"],
        "eval/success_rate",
    )
    return her, no_her


def test_ci_budget_her_solves_15_bit_flipping_where_dqn_alone_fails(tmp_path):
    her, no_her = _her_vs_no_her(tmp_path, seed=0)
    assert her[-1] >= 0.9, f"success rates with HER: {her}"
    assert max(no_her) <= 0.1, f"success rates without HER: {no_her}"


@pytest.mark.parametrize("seed", [1, 2])
def test_her_solves_15_bit_flipping_for_other_seeds(tmp_path, seed):
    her, no_her = _her_vs_no_her(tmp_path, seed)
    assert her[-1] >= 0.9, f"success rates with HER: {her}"
    assert max(no_her) <= 0.1, f"success rates without HER: {no_her}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_cartpole_normalized_reaches_475_within_its_budget(tmp_path, seed):
    overrides = [f"seed={seed}", "trainer.stop_at_eval_return=475"]
    returns = _evaluations("ppo_cartpole_normalized", tmp_path, overrides, "eval/episode_return")
    assert max(returns) >= 475, f"eval returns: {returns}"


@pytest.mark.ci_budget  # half a minute; the one FetchReach learning test
def test_sac_her_fetchreach_reaches_a_success_rate_of_0_9_within_5k_steps(tmp_path):
    pytest.importorskip("gymnasium_robotics", reason="the robotics extra is not installed")
    overrides = ["seed=0", "trainer.num_env_steps=5000", "trainer.eval_interval=10"]
    rates = _evaluations("sac_her_fetchreach", tmp_path, overrides, "eval/success_rate")
    assert max(rates) >= 0.9, f"success rates: {rates}"
