"""EnsembleLinear's compiled form (bmm + bias, width-1 as multiply-and-sum) matches its eager baddbmm."""

import pytest
import torch

from cadence.networks.ensemble import EnsembleLinear


@pytest.mark.parametrize("out_dim", [1, 5])
def test_compiled_forward_and_gradients_match_eager(out_dim):
    torch.manual_seed(0)
    layer = EnsembleLinear(7, out_dim, ensemble_size=3)
    x = torch.randn(3, 4, 6, 7, requires_grad=True)

    def run(fn):
        out = fn(x)
        grads = torch.autograd.grad((out * torch.arange(out.numel()).view_as(out)).sum(),
                                    [x, layer.weight, layer.bias])
        return out, grads

    eager_out, eager_grads = run(layer)
    compiled_out, compiled_grads = run(torch.compile(layer, backend="aot_eager", fullgraph=True))
    assert compiled_out.shape == (3, 4, 6, out_dim)
    torch.testing.assert_close(compiled_out, eager_out)
    for compiled, eager in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(compiled, eager)
