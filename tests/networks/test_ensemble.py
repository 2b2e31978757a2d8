"""EnsembleLinear's compiled form (bmm + bias, width-1 as multiply-and-sum) matches its eager baddbmm."""

import pytest
import torch

from cadence.networks.ensemble import EnsembleLinear


@pytest.mark.compile
@pytest.mark.parametrize("out_dim", [1, 5])
def test_compiled_forward_and_gradients_match_eager(out_dim):
    torch.manual_seed(0)
    layer = EnsembleLinear(7, out_dim, ensemble_size=3)
    x = torch.randn(3, 4, 6, 7, requires_grad=True)

    def run(fn):
        out = fn(x)
        grads = torch.autograd.grad(
            (out * torch.arange(out.numel()).view_as(out)).sum(), [x, layer.weight, layer.bias]
        )
        return out, grads

    eager_out, eager_grads = run(layer)
    compiled_out, compiled_grads = run(torch.compile(layer, backend="aot_eager", fullgraph=True))
    assert compiled_out.shape == (3, 4, 6, out_dim)
    torch.testing.assert_close(compiled_out, eager_out)
    for compiled, eager in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(compiled, eager)


def test_detached_parameters_pass_the_gradient_to_the_input_only():
    from cadence.networks.ensemble import EnsembleMLP

    torch.manual_seed(0)
    mlp = EnsembleMLP(5, (8,), 1, ensemble_size=2, layer_norm=True)
    x = torch.randn(2, 4, 5, requires_grad=True)
    frozen = mlp(x, detach_parameters=True)
    torch.testing.assert_close(frozen, mlp(x), rtol=0, atol=0)
    frozen.min(0).values.sum().backward()
    assert all(p.grad is None for p in mlp.parameters())
    assert x.grad is not None and x.grad.abs().sum() > 0
    # Each sample's gradient comes from the member at the minimum only.
    winner = mlp(x).squeeze(-1).argmin(0)
    assert bool((x.grad[1 - winner, torch.arange(4)] == 0).all())
