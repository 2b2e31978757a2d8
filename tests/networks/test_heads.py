import math

import pytest
import torch
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from cadence.data.specs import BoundedTensorSpec, CompositeSpec, DiscreteTensorSpec, TensorSpec
from cadence.networks.distributions import TanhNormal
from cadence.networks.heads import (
    CategoricalHead,
    CompositeHead,
    MultiCategoricalHead,
    NormalHead,
    TanhNormalHead,
    make_action_head,
)

LOW = torch.tensor([-2.0, 0.0], dtype=torch.float64)
HIGH = torch.tensor([3.0, 0.5], dtype=torch.float64)


def tanh_normal(batch: int = 6, seed: int = 0) -> TanhNormal:
    generator = torch.Generator().manual_seed(seed)
    loc = torch.randn(batch, 2, generator=generator, dtype=torch.float64)
    scale = torch.rand(batch, 2, generator=generator, dtype=torch.float64) + 0.2
    return TanhNormal(loc, scale, LOW, HIGH)


def test_categorical_head_mode_is_argmax():
    head = CategoricalHead(8, 5)
    features = torch.randn(10, 8)
    distribution = head(features)
    assert torch.equal(distribution.mode, head.logits(features).argmax(-1))
    assert distribution.log_prob(distribution.sample()).shape == (10,)


def test_normal_head_sums_log_probs_over_action_dims_and_mode_is_mean():
    head = NormalHead(8, 3, init_log_std=-0.5)
    features, action = torch.randn(4, 8), torch.randn(4, 3)
    distribution = head(features)
    mean = head.mean(features)
    expected = Normal(mean, math.exp(-0.5)).log_prob(action).sum(-1)
    torch.testing.assert_close(distribution.log_prob(action), expected)
    torch.testing.assert_close(distribution.mode, mean)
    assert distribution.entropy().shape == (4,)


def test_state_dependent_std_starts_at_init_log_std_and_depends_on_state():
    head = NormalHead(8, 3, state_dependent_std=True, init_log_std=-1.0)
    std = head(torch.zeros(2, 8)).base_dist.stddev
    torch.testing.assert_close(std, torch.full((2, 3), math.exp(-1.0)))
    stds = head(torch.randn(2, 8) * 100).base_dist.stddev
    assert not torch.allclose(stds[0], stds[1])


def test_tanh_normal_log_prob_by_change_of_variables():
    distribution = tanh_normal()
    action = distribution.sample().clone()  # a new tensor: the inverse path, not the cache
    half = (HIGH - LOW) / 2
    pre_tanh = torch.atanh((action - (HIGH + LOW) / 2) / half)
    reference = Normal(distribution.normal.loc, distribution.normal.scale).log_prob(pre_tanh)
    reference = (reference - torch.log(half * (1 - torch.tanh(pre_tanh) ** 2))).sum(-1)
    torch.testing.assert_close(distribution.log_prob(action), reference)
    torch_reference = TransformedDistribution(
        Independent(distribution.normal, 1),
        [TanhTransform(), AffineTransform((HIGH + LOW) / 2, half, event_dim=1)],
    )
    torch.testing.assert_close(distribution.log_prob(action), torch_reference.log_prob(action))


def test_tanh_normal_density_integrates_to_one_and_matches_samples():
    distribution = TanhNormal(
        torch.tensor([[0.7]], dtype=torch.float64),
        torch.tensor([[1.5]], dtype=torch.float64),
        torch.tensor([-1.0], dtype=torch.float64),
        torch.tensor([2.0], dtype=torch.float64),
    )
    edges = torch.linspace(-1, 2, 31, dtype=torch.float64)
    fine = torch.linspace(-1, 2, 300_001, dtype=torch.float64)[1:-1]
    density = distribution.log_prob(fine.view(-1, 1, 1)).exp().squeeze(-1)
    width = fine[1] - fine[0]
    assert abs(float(density.sum() * width) - 1) < 1e-3
    bin_of = torch.bucketize(fine, edges) - 1
    expected_mass = torch.zeros(30, dtype=torch.float64).index_add_(0, bin_of, density * width)
    torch.manual_seed(0)
    samples = distribution.sample((200_000,)).flatten()
    observed_mass = torch.histc(samples, 30, -1, 2) / samples.numel()
    torch.testing.assert_close(observed_mass, expected_mass, atol=4e-3, rtol=0)


def test_tanh_normal_saturated_samples_keep_an_exact_log_prob():
    loc = torch.full((3, 2), 12.0)
    distribution = TanhNormal(loc, torch.full((3, 2), 0.1), LOW.float(), HIGH.float())
    action, log_prob = distribution.rsample_with_log_prob()
    assert torch.equal(action, HIGH.float().expand(3, 2))  # tanh(12) rounds to 1 in float32
    assert torch.isfinite(log_prob).all()
    torch.testing.assert_close(distribution.log_prob(action), log_prob)  # from the cache
    assert torch.isfinite(distribution.log_prob(action.clone())).all()  # clamped inverse


def test_tanh_normal_mode_rsample_and_entropy():
    distribution = tanh_normal()
    expected_mode = LOW + (torch.tanh(distribution.normal.loc) + 1) * (HIGH - LOW) / 2
    torch.testing.assert_close(distribution.mode, expected_mode)
    samples = distribution.sample((100,))
    assert samples.shape == (100, 6, 2)
    assert ((samples >= LOW) & (samples <= HIGH)).all()
    assert distribution.entropy().shape == (6,)
    loc = torch.zeros(4, 2, requires_grad=True)
    TanhNormal(loc, torch.ones(4, 2), LOW.float(), HIGH.float()).rsample().sum().backward()
    assert loc.grad is not None and (loc.grad != 0).all()


def test_tanh_normal_head_scales_to_the_spec():
    spec = BoundedTensorSpec((2,), minimum=[-2.0, 0.0], maximum=[3.0, 0.5])
    head = TanhNormalHead(8, spec, init_log_std=-1.0)
    distribution = head(torch.zeros(5, 8))
    torch.testing.assert_close(distribution.normal.scale, torch.full((5, 2), math.exp(-1.0)))
    torch.testing.assert_close(distribution.mode, torch.tensor([0.5, 0.25]).expand(5, 2))


def test_make_action_head_chooses_by_spec():
    bounded = BoundedTensorSpec((2,), minimum=-1.0, maximum=1.0)
    assert isinstance(make_action_head(8, DiscreteTensorSpec((), nvec=4)), CategoricalHead)
    assert isinstance(make_action_head(8, bounded), NormalHead)
    assert isinstance(make_action_head(8, TensorSpec((2,))), NormalHead)
    assert isinstance(make_action_head(8, bounded, "tanh_normal"), TanhNormalHead)
    assert make_action_head(8, bounded, state_dependent_std=True).state_dependent_std


@pytest.mark.parametrize(
    "spec, kind",
    [
        (DiscreteTensorSpec((2, 2), nvec=3), "normal"),
        (CompositeSpec({"a.b": TensorSpec((2,))}), "normal"),  # a key no ModuleDict takes
        (CompositeSpec({}), "normal"),
        (CompositeSpec({"a": TensorSpec((2, 2))}), "normal"),  # an entry no head takes
        (TensorSpec((2, 2)), "normal"),
        (TensorSpec((2,)), "tanh_normal"),
        (BoundedTensorSpec((2,), minimum=0.0, maximum=float("inf")), "tanh_normal"),
    ],
)
def test_make_action_head_refuses_unsupported_specs(spec, kind):
    with pytest.raises(TypeError):
        make_action_head(8, spec, kind)


def test_a_multi_discrete_action_gets_one_categorical_per_dimension():
    """MultiDiscrete [3, 2]: the 2-valued dimension never samples a third value, and the
    log-probability and entropy are the sums of the dimensions' own."""
    head = make_action_head(8, DiscreteTensorSpec((2,), nvec=[3, 2]))
    assert isinstance(head, MultiCategoricalHead)
    distribution = head(torch.randn(4000, 8))
    actions = distribution.sample()
    assert actions.shape == (4000, 2)
    assert set(actions[:, 0].tolist()) == {0, 1, 2} and set(actions[:, 1].tolist()) == {0, 1}
    logits = head.logits(torch.zeros(1, 8)).reshape(2, 3)
    first, second = logits[0].log_softmax(-1), logits[1, :2].log_softmax(-1)
    at_zero = head(torch.zeros(1, 8))
    expected = first[2] + second[1]
    assert torch.allclose(at_zero.log_prob(torch.tensor([[2, 1]])), expected)
    entropy = -(first.exp() * first).sum() - (second.exp() * second).sum()
    assert torch.allclose(at_zero.entropy(), entropy)
    assert at_zero.mode.tolist() == [[int(first.argmax()), int(second.argmax())]]


def test_a_dict_action_gets_one_head_per_entry_and_sums_their_log_probs():
    """Dict {"move": Discrete(3), "aim": {"force": Box(2)}} (nested, as a Tuple's entries
    "0", "1"... would be): a sample and the mode are dicts of the entries', the
    log-probability and entropy the sums of the entries' own."""
    spec = CompositeSpec(
        {
            "move": DiscreteTensorSpec((), nvec=3),
            "aim": CompositeSpec({"force": BoundedTensorSpec((2,), minimum=-1.0, maximum=1.0)}),
        }
    )
    head = make_action_head(8, spec, init_log_std=-1.0)
    assert isinstance(head, CompositeHead)
    assert isinstance(head.parts["move"], CategoricalHead)
    assert isinstance(head.parts["aim"].parts["force"], NormalHead)
    features = torch.randn(5, 8)
    distribution = head(features)
    action = distribution.sample()
    assert action["move"].shape == (5,) and action["aim"]["force"].shape == (5, 2)
    move, force = head.parts["move"](features), head.parts["aim"].parts["force"](features)
    expected = move.log_prob(action["move"]) + force.log_prob(action["aim"]["force"])
    assert torch.allclose(distribution.log_prob(action), expected)
    assert torch.allclose(distribution.entropy(), move.entropy() + force.entropy())
    assert torch.equal(distribution.mode["move"], move.mode)
    assert torch.equal(distribution.mode["aim"]["force"], force.mean)
