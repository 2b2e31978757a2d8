"""`LeanCategorical` gives torch's `Categorical` numbers for less per-call work."""

import torch
from torch.distributions import Categorical

from cadence.networks.distributions import LeanCategorical


def test_lean_categorical_draws_and_scores_as_torchs_categorical():
    logits = torch.randn(6, 4) * 3
    lean, full = LeanCategorical(logits), Categorical(logits=logits, validate_args=False)
    torch.manual_seed(7)
    drawn = lean.sample()
    torch.manual_seed(7)
    torch.testing.assert_close(drawn, full.sample(), rtol=0, atol=0)
    torch.testing.assert_close(lean.log_prob(drawn), full.log_prob(drawn))
    torch.testing.assert_close(lean.entropy(), full.entropy())
    torch.testing.assert_close(lean.mode, full.mode, rtol=0, atol=0)
    assert lean.sample((3,)).shape == (3, 6)
    # A value broadcast against the batch takes torch's general path.
    torch.testing.assert_close(lean.log_prob(torch.tensor(1)), full.log_prob(torch.tensor(1)))
    assert lean.batch_shape == full.batch_shape and lean.event_shape == full.event_shape


def test_lean_categorical_log_prob_has_gradients_to_the_logits():
    logits = torch.randn(5, 3, requires_grad=True)
    LeanCategorical(logits).log_prob(torch.tensor([0, 1, 2, 0, 1])).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
