"""A2CLoss against hand-computed values."""

import pytest
import torch

from cadence.algorithms.a2c import A2CConfig, A2CLoss


def test_policy_value_and_entropy_terms():
    info = {
        "log_prob": torch.tensor([-1.0, -2.0], requires_grad=True),
        "advantage": torch.tensor([2.0, -1.0]),
        "return": torch.tensor([1.0, 3.0]),
        "value": torch.tensor([0.0, 1.0], requires_grad=True),
        "entropy": torch.tensor([0.4, 0.6]),
    }
    result = A2CLoss(A2CConfig(vf_coef=0.25, ent_coef=0.01))(info)
    extra = result.extra
    assert extra["loss/policy"].item() == pytest.approx(-(2.0 * -1.0 + -1.0 * -2.0) / 2)
    assert extra["train/value_error"].item() == pytest.approx((1.0 + 4.0) / 2)
    assert extra["loss/value"].item() == pytest.approx(0.25 * 2.5)
    assert extra["loss/entropy"].item() == pytest.approx(-0.01 * 0.5)
    assert result.loss.item() == pytest.approx(
        sum(v.item() for k, v in extra.items() if k.startswith("loss/"))
    )
    result.loss.backward()
    # The advantage is a constant: d loss / d log_prob = -A / N.
    assert info["log_prob"].grad.tolist() == pytest.approx([-1.0, 0.5])
    assert info["value"].grad.tolist() == pytest.approx(
        [0.25 * 2 * (0.0 - 1.0) / 2, 0.25 * 2 * (1.0 - 3.0) / 2]
    )


def test_normalized_advantages_have_zero_mean():
    info = {
        "log_prob": torch.zeros(3, requires_grad=True),
        "advantage": torch.tensor([1.0, 2.0, 6.0]),
        "return": torch.zeros(3),
        "value": torch.zeros(3),
        "entropy": torch.zeros(3),
    }
    A2CLoss(A2CConfig(normalize_advantages=True))(info).loss.backward()
    assert info["log_prob"].grad.sum().item() == pytest.approx(0.0, abs=1e-6)
