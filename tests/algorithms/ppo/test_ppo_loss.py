"""PPOLoss against hand-computed values: the clipped surrogate, value clipping, entropy."""

import math

import pytest
import torch

from cadence.algorithms.ppo import PPOConfig, PPOLoss


def _info(log_ratio, advantage, **extra):
    log_ratio = torch.tensor(log_ratio, dtype=torch.float32)
    n = log_ratio.numel()
    info = {
        "log_prob": log_ratio.clone().requires_grad_(True),
        "old_log_prob": torch.zeros(n),
        "advantage": torch.tensor(advantage, dtype=torch.float32),
        "value": torch.zeros(n, requires_grad=True),
        "old_value": torch.zeros(n),
        "return": torch.zeros(n),
        "entropy": torch.zeros(n),
    }
    info.update({k: torch.tensor(v, dtype=torch.float32) for k, v in extra.items()})
    return info


def _loss(info, **config):
    config = {"normalize_advantages": False, "vf_coef": 0.5, "ent_coef": 0.0, **config}
    return PPOLoss(PPOConfig(**config))(info)


def test_policy_loss_takes_the_pessimistic_side_of_the_clip():
    # ratio 1.5 and 0.5, each with advantage +1 and -1; clip_coef 0.2.
    info = _info([math.log(1.5)] * 2 + [math.log(0.5)] * 2, [1.0, -1.0, 1.0, -1.0])
    terms = _loss(info, clip_coef=0.2).extra
    # Per sample: max(-A r, -A clip(r)) = -1.2, 1.5, -0.5, 0.8.
    assert terms["loss/policy"].item() == pytest.approx((-1.2 + 1.5 - 0.5 + 0.8) / 4)
    assert terms["train/clip_fraction"].item() == 1.0


def test_clipped_samples_give_no_policy_gradient():
    info = _info([math.log(1.5), math.log(1.1)], [1.0, 1.0])
    _loss(info, clip_coef=0.2).loss.backward()
    grad = info["log_prob"].grad
    assert grad[0].item() == 0.0  # ratio 1.5 > 1.2 with A > 0: clipped
    assert grad[1].item() == pytest.approx(-1.1 / 2)  # d(-A r)/dlogp = -A r, mean over 2


def test_advantage_normalization_makes_the_loss_scale_free():
    info = _info([0.1, -0.2, 0.3], [1.0, 2.0, 4.0])
    scaled = _info([0.1, -0.2, 0.3], [10.0, 20.0, 40.0])
    a = _loss(info, normalize_advantages=True).extra["loss/policy"]
    b = _loss(scaled, normalize_advantages=True).extra["loss/policy"]
    c = _loss(scaled, normalize_advantages=False).extra["loss/policy"]
    assert a.item() == pytest.approx(b.item(), abs=1e-6)
    assert c.item() != pytest.approx(b.item())


def test_value_loss_unclipped_and_clipped():
    # value moved from old 0 to 1 (target 2) and to -1 (target 0); clip_coef 0.2.
    info = _info(
        [0.0, 0.0], [0.0, 0.0], value=[1.0, -1.0], old_value=[0.0, 0.0], **{"return": [2.0, 0.0]}
    )
    unclipped = _loss(info, vf_coef=1.0).extra
    assert unclipped["train/value_error"].item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    clipped = _loss(info, vf_coef=1.0, clip_value_loss=True, clip_coef=0.2).extra
    # Clipped values 0.2 and -0.2: max((1-2)^2, (0.2-2)^2) = 3.24, max(1, 0.04) = 1.
    assert clipped["train/value_error"].item() == pytest.approx(0.5 * (3.24 + 1.0) / 2)
    assert clipped["loss/value"].item() == pytest.approx(clipped["train/value_error"].item())


def test_entropy_bonus_and_total():
    info = _info([0.0, 0.0], [1.0, -1.0], entropy=[0.5, 1.5], value=[1.0, 1.0])
    result = _loss(info, ent_coef=0.1, vf_coef=0.5)
    extra = result.extra
    assert extra["loss/entropy"].item() == pytest.approx(-0.1 * 1.0)
    assert extra["train/entropy"].item() == pytest.approx(1.0)
    assert extra["loss/value"].item() == pytest.approx(0.5 * 0.5 * 1.0)
    total = sum(v for k, v in extra.items() if k.startswith("loss/"))
    assert result.loss.item() == pytest.approx(total.item())
    assert extra["train/approx_kl"].item() == 0.0  # ratio 1 everywhere


def test_approx_kl_is_the_low_variance_estimator():
    log_ratio = [0.1, -0.3]
    extra = _loss(_info(log_ratio, [0.0, 0.0])).extra
    expected = sum(math.exp(x) - 1 - x for x in log_ratio) / 2
    assert extra["train/approx_kl"].item() == pytest.approx(expected, rel=1e-5)
