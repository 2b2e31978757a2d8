"""`Linear`: ``nn.Linear``'s numbers, and a narrow-input layer's weight gradient taken in
the layout MKL multiplies fastest (`narrow_input_linear`)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cadence.networks import linear as layers


class MultiplyShapes(TorchDispatchMode):
    """Records the output shape of every matrix multiply dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            self.shapes.append(tuple(out.shape))
        return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [(), (5,), (3, 7)])
def test_a_narrow_input_layer_equals_nn_linear_and_takes_its_weight_gradient_transposed(
    bias, batch
):
    torch.manual_seed(0)
    layer = layers.Linear(4, 64, bias=bias)
    reference = torch.nn.Linear(4, 64, bias=bias)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(*batch, 4)
    weights = torch.linspace(-1, 1, 64)
    with MultiplyShapes() as mode:
        out = layer(x)
        grads = torch.autograd.grad((out * weights).sum(), list(layer.parameters()))
    expected_out = reference(x)
    expected = torch.autograd.grad((expected_out * weights).sum(), list(reference.parameters()))
    torch.testing.assert_close(out, expected_out)
    for grad, expected_grad in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, expected_grad)
    # The weight's gradient was multiplied as x.T @ grad ([in, out]), not grad.T @ x.
    assert (4, 64) in mode.shapes and (64, 4) not in mode.shapes
    # Without gradients (acting) the layer is nn.Linear's multiply.
    with torch.no_grad(), MultiplyShapes() as mode:
        layer(torch.randn(8, 4))
    assert mode.shapes == [(8, 64)]


def test_only_layers_with_few_inputs_and_more_outputs_multiply_transposed():
    assert layers.Linear(3, 256).narrow_input
    assert not layers.Linear(64, 64).narrow_input
    assert not layers.Linear(64, 2).narrow_input
    assert not layers.Linear(layers.NARROW_INPUT_MAX + 1, 256).narrow_input
