"""The terms A2C and PPO share (`cadence.algorithms.actor_critic_loss`) against hand values."""

import pytest
import torch

from cadence.algorithms.a2c import A2CConfig, A2CLoss
from cadence.algorithms.actor_critic_loss import normalize_advantages, weighted_terms
from cadence.algorithms.ppo import PPOConfig, PPOLoss


def test_normalized_advantages_have_mean_zero_and_bessel_std_one():
    # mean 3, squared deviations 4 + 0 + 4 over N - 1 = 2: std 2.
    normalized = normalize_advantages(torch.tensor([1.0, 3.0, 5.0]), None)
    assert normalized.tolist() == pytest.approx([-1.0, 0.0, 1.0])


@pytest.mark.parametrize("count", [None, 1])
def test_a_single_sample_is_left_as_it_is(count):
    advantage = torch.tensor([2.5])
    assert normalize_advantages(advantage, count) is advantage


def test_weighted_terms_weigh_value_and_subtract_the_entropy_bonus():
    terms = weighted_terms(torch.tensor(1.5), torch.tensor(2.0), torch.tensor(0.5), 0.25, 0.1)
    assert list(terms) == ["loss/policy", "loss/value", "loss/entropy"]
    assert terms["loss/policy"].item() == 1.5
    assert terms["loss/value"].item() == 0.5
    assert terms["loss/entropy"].item() == pytest.approx(-0.05)


def _info(n: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    names = ("log_prob", "old_log_prob", "advantage", "return", "value", "old_value", "entropy")
    return {name: torch.randn(n, generator=generator) for name in names}


@pytest.mark.parametrize(
    "loss", [A2CLoss(A2CConfig(normalize_advantages=True)), PPOLoss(PPOConfig())]
)
def test_a2c_and_ppo_total_is_the_sum_of_the_shared_terms(loss):
    result = loss(_info(8))
    terms = [result.extra[k] for k in ("loss/policy", "loss/value", "loss/entropy")]
    assert torch.equal(result.loss, sum(terms))
