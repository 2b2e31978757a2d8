"""`LeanCategorical` scores as torch's `Categorical` and draws from the same distribution
for less per-call work; `LeanNormal` draws torch's `Normal`'s very numbers, compiled too."""

import pytest
import torch
from torch.distributions import Categorical, Normal

from cadence.networks.distributions import LeanCategorical, LeanNormal


def test_lean_categorical_scores_as_torchs_categorical():
    logits = torch.randn(6, 4) * 3
    lean, full = LeanCategorical(logits), Categorical(logits=logits, validate_args=False)
    drawn = lean.sample()
    assert drawn.shape == (6,) and drawn.dtype == torch.long
    torch.testing.assert_close(lean.log_prob(drawn), full.log_prob(drawn))
    torch.testing.assert_close(lean.entropy(), full.entropy())
    torch.testing.assert_close(lean.mode, full.mode, rtol=0, atol=0)
    assert lean.sample((3,)).shape == (3, 6)
    # A value broadcast against the batch takes torch's general path.
    torch.testing.assert_close(lean.log_prob(torch.tensor(1)), full.log_prob(torch.tensor(1)))
    assert lean.batch_shape == full.batch_shape and lean.event_shape == full.event_shape


def test_lean_categorical_draws_each_category_at_its_probability():
    """200k draws of each row against its probabilities (a zero one never drawn): the
    largest deviation allowed is 5 standard errors, which a draw that ignores the
    probabilities (e.g. the argmax of the noise alone) misses by far."""
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.01, 0.01, 0.01, 0.97], [0.25] * 4])
    lean = LeanCategorical(probs.clamp_min(1e-30).log().expand(200_000, 3, 4))
    torch.manual_seed(0)
    draws = lean.sample()
    counts = torch.nn.functional.one_hot(draws, 4).sum(0).double() / draws.shape[0]
    standard_error = (probs * (1 - probs) / draws.shape[0]).sqrt().double()
    assert counts[0, 3] == 0
    assert ((counts - probs.double()).abs() <= 5 * standard_error + 1e-12).all(), counts


@pytest.mark.compile
def test_lean_categorical_draws_are_seeded_and_compile_to_the_same_draws():
    import torch._inductor.config as inductor_config

    logits = torch.randn(8, 2)

    def draw() -> torch.Tensor:
        return LeanCategorical(logits).sample()

    with inductor_config.patch(fallback_random=True):  # as cadence's compiled graphs run
        compiled = torch.compile(draw, fullgraph=True)
        for seed in range(5):
            torch.manual_seed(seed)
            eager = draw()
            torch.manual_seed(seed)
            assert torch.equal(compiled(), eager)
            torch.manual_seed(seed)
            assert torch.equal(draw(), eager)


def test_lean_categorical_log_prob_has_gradients_to_the_logits():
    logits = torch.randn(5, 3, requires_grad=True)
    LeanCategorical(logits).log_prob(torch.tensor([0, 1, 2, 0, 1])).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


@pytest.mark.compile
@pytest.mark.parametrize(("batch", "sample_shape"), [((3,), ()), ((8, 6), ()), ((2, 5, 7), (4,))])
def test_lean_normal_draws_torchs_numbers_eagerly_and_compiled(batch, sample_shape):
    import torch._inductor.config as inductor_config

    loc, scale = torch.randn(batch), torch.rand(batch) + 0.1
    lean, full = LeanNormal(loc, scale), Normal(loc, scale, validate_args=False)

    def draw() -> torch.Tensor:
        return LeanNormal(loc, scale).sample(sample_shape)

    with inductor_config.patch(fallback_random=True):  # as cadence's compiled graphs run
        compiled = torch.compile(draw, fullgraph=True)
        for seed in range(3):
            torch.manual_seed(seed)
            expected = full.sample(sample_shape)
            torch.manual_seed(seed)
            assert torch.equal(draw(), expected)
            torch.manual_seed(seed)
            assert torch.equal(compiled(), expected)
    value = lean.sample()
    torch.testing.assert_close(lean.log_prob(value), full.log_prob(value), rtol=0, atol=0)
