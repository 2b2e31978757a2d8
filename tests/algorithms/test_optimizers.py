"""`make_adam`, the one way cadence builds Adam: the fused kernel by default, torch's default
implementation on request."""

from __future__ import annotations

import torch

from cadence.algorithms.optimizers import make_adam


def _params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]


def test_the_default_is_the_fused_kernel_with_the_given_rate_and_eps():
    optimizer = make_adam(iter(_params()), 3e-4, eps=1e-5)  # a generator, as .parameters() is
    assert optimizer.defaults["fused"] is True
    group = optimizer.param_groups[0]
    assert len(group["params"]) == 2
    assert (group["lr"], group["eps"], group["betas"]) == (3e-4, 1e-5, (0.9, 0.999))


def test_unfused_is_torchs_default_adam_and_steps_as_it_does():
    params, reference = _params(), _params()
    optimizer = make_adam(params, 0.1, eps=1e-6, fused=False)
    expected = torch.optim.Adam(reference, 0.1, eps=1e-6)
    assert optimizer.defaults == expected.defaults
    for _ in range(3):
        for p, q in zip(params, reference, strict=True):
            p.grad, q.grad = torch.full_like(p, 0.5), torch.full_like(q, 0.5)
        optimizer.step()
        expected.step()
    assert all(torch.equal(p, q) for p, q in zip(params, reference, strict=True))
