"""cadence's AVX-512 multiply (``cpu_matmul=avx512``): its values and gradients equal ATen's
for every shape class the kernel blocks differently, layers send it what their size says,
compiled graphs call it, and where it cannot run the backend says why."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from cadence.accel import cpu_matmul as matmul
from cadence.accel import native
from cadence.accel.cpu_matmul import (
    AVX512_MIN_MACS,
    NARROW,
    avx512_matmul,
    avx512_unavailable,
    set_cpu_matmul,
    using_cpu_matmul,
)
from cadence.networks.ensemble import EnsembleMLP
from cadence.networks.linear import GRUCell, Linear
from cadence.networks.mlp import MLP
from tests.accel.test_cpu_matmul import _values_and_grads, loss_and_gradients, ops_called

needs_kernel = pytest.mark.skipif(
    sys.platform == "win32" or avx512_unavailable() is not None,
    reason=f"the AVX-512 kernel cannot run here: {avx512_unavailable()}",
)


def _reference(a, b, *bias):
    return torch.addmm(bias[0], a, b) if bias else a @ b


def _by_kernel(a, b, *bias):
    return avx512_matmul(a, b, bias[0] if bias else None)


@needs_kernel
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    ("rows", "inner", "columns"),
    [
        (256, 64, 64),  # PPO's hidden layer: full row blocks of 6, four vectors
        (37, 70, 130),  # ragged rows and a 2-column last panel
        (29, 3, 1),  # one column, masked
        (50, 17, 33),  # three vectors, the last with one column
        (13, 8, 48),
        (7, 5, 20),  # fewer rows than any block
        (100, 1, 16),
    ],
)
def test_the_kernel_and_its_gradients_equal_atens(rows, inner, columns, bias):
    torch.manual_seed(rows + inner + columns)
    a = torch.randn(rows, inner, requires_grad=True)
    b = torch.randn(columns, inner).t().requires_grad_(True)  # a weight's transpose, as layers
    inputs = [a, b] + ([torch.randn(columns, requires_grad=True)] if bias else [])
    expected, expected_grads = _values_and_grads(_reference, *inputs)
    got, got_grads = _values_and_grads(_by_kernel, *inputs)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_the_kernel_takes_any_strides_and_empty_shapes():
    torch.manual_seed(0)
    base = torch.randn(40, 90)
    a = base[::2, 5:69]  # row stride 180, 64 columns
    at = torch.randn(64, 20).t()  # column stride 20
    b = torch.randn(64, 100)[:, ::3]  # column stride 3: copied
    for left in (a, at):
        torch.testing.assert_close(avx512_matmul(left, b, None), left @ b, rtol=1e-5, atol=1e-5)
    bias = torch.randn(7)
    torch.testing.assert_close(
        avx512_matmul(torch.randn(5, 0), torch.randn(0, 7), bias), bias.expand(5, 7)
    )
    assert avx512_matmul(torch.randn(0, 4), torch.randn(4, 7), None).shape == (0, 7)
    with pytest.raises(RuntimeError, match="a's columns must equal b's rows"):
        avx512_matmul(torch.randn(3, 4), torch.randn(5, 6), None)
    with pytest.raises(RuntimeError, match="float32 only"):
        avx512_matmul(torch.randn(3, 4).double(), torch.randn(4, 6).double(), None)


@needs_kernel
def test_a_weights_gradient_keeps_the_weights_layout():
    weight = torch.randn(64, 48, requires_grad=True)
    x = torch.randn(256, 48)
    avx512_matmul(x, weight.t(), None).sum().backward()
    assert weight.grad.is_contiguous()
    torch.testing.assert_close(weight.grad, torch.ones(256, 64).t() @ x, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_two_threads_split_the_rows_and_give_the_same_numbers():
    torch.manual_seed(1)
    a, b = torch.randn(1000, 64), torch.randn(64, 64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = avx512_matmul(a, b, None)
        torch.set_num_threads(2)
        two = avx512_matmul(a, b, None)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)  # each row's sums run in the same order
    torch.testing.assert_close(one, a @ b, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_the_flop_counter_counts_the_kernels_multiplies():
    from torch.utils.flop_counter import FlopCounterMode

    a = torch.randn(64, 32, requires_grad=True)
    b = torch.randn(16, 32).t().requires_grad_(True)
    bias = torch.randn(16, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        avx512_matmul(a, b, bias).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * (64 * 32 * 16)  # forward, two backward


@needs_kernel
def test_layers_send_the_kernel_what_is_large_enough_to_gain():
    set_cpu_matmul("avx512")
    layer = Linear(64, 64)
    rows = AVX512_MIN_MACS // (64 * 64)
    assert "cadence_native.mm" in ops_called(lambda: layer(torch.randn(rows, 64)))
    assert "cadence_native.mm" not in ops_called(lambda: layer(torch.randn(rows - 1, 64)))
    double = Linear(64, 64).double()
    assert "cadence_native.mm" not in ops_called(lambda: double(torch.randn(rows, 64).double()))
    with using_cpu_matmul("aten"):
        assert "cadence_native.mm" not in ops_called(lambda: layer(torch.randn(rows, 64)))
    # An ensemble's batched multiplies are the kernel's only by way of oneDNN.
    assert matmul.batched_linear(torch.randn(2, 8, 64), torch.randn(2, 64, 64)) is None


@needs_kernel
def test_networks_give_the_same_values_and_gradients_as_on_aten():
    torch.manual_seed(2)
    mlp = MLP(4, (64, 64), out_dim=2)
    cell = GRUCell(96, 128)
    critics = EnsembleMLP(23, (256, 256), 1, ensemble_size=2)
    x, inputs, h = torch.randn(256, 4), torch.randn(64, 96), torch.randn(64, 128)
    pairs = torch.randn(2, 256, 23)
    params = [*mlp.parameters(), *cell.parameters(), *critics.parameters()]

    def run():
        loss = mlp(x).square().mean() + cell(inputs, h).square().mean()
        loss = loss + critics(pairs).square().mean()
        return [loss.detach(), *torch.autograd.grad(loss, params)]

    with using_cpu_matmul("aten"):
        expected = run()
    with using_cpu_matmul("avx512"):
        calls = ops_called(run)
        got = run()
    # MLP: the 64 x 64 layer, forward and two backward; GRU cell: two multiplies, each
    # forward and the weight's gradient (its inputs take none).
    assert calls.count("cadence_native.mm") == 3 + 2 * 2
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@needs_kernel
@pytest.mark.compile
def test_a_compiled_graph_calls_the_kernel_and_gives_eagers_numbers():
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(3)
    set_cpu_matmul("avx512")
    mlp = MLP(17, (64, 64), out_dim=1)
    x = torch.randn(256, 17)

    step = loss_and_gradients(mlp)
    expected = step(x)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        got, code = run_and_get_code(torch.compile(step, fullgraph=True), x)
    # The 64 x 64 layer's forward and its two backward multiplies, from the graph.
    assert sum(text.count("cadence_native") for text in code) >= 3
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("cube", "narrow", "expected"),
    [
        (
            {"aten": 300.0, "onednn": 150.0, "avx512": 140.0},
            {"aten": 60.0, "avx512": 30.0},
            "avx512",
        ),
        # The kernel no faster on PPO-sized layers: oneDNN for the large ones.
        (
            {"aten": 300.0, "onednn": 150.0, "avx512": 140.0},
            {"aten": 60.0, "avx512": 55.0},
            "onednn",
        ),
        # An Intel processor, where MKL runs AVX-512 too.
        ({"aten": 150.0, "onednn": 140.0, "avx512": 140.0}, {"aten": 30.0, "avx512": 29.0}, "aten"),
        # No kernel (no AVX-512 or no compiler).
        ({"aten": 300.0, "onednn": 150.0}, {"aten": 60.0}, "onednn"),
    ],
)
def test_auto_picks_the_kernel_only_where_it_gains_on_both_sizes(
    monkeypatch, unmeasured_machine, cube, narrow, expected
):
    monkeypatch.setattr(
        matmul, "measure_cpu_matmul", lambda shape=matmul.CUBE: narrow if shape == NARROW else cube
    )
    assert set_cpu_matmul("auto") == expected == matmul.cpu_matmul()
    assert os.environ[matmul.ENV_VAR] == expected


def test_the_backend_says_why_where_the_kernel_cannot_run(monkeypatch):
    monkeypatch.setattr(matmul, "avx512_unavailable", lambda: "this CPU has no AVX-512")
    with pytest.raises(ValueError, match="avx512 cannot run here: this CPU has no AVX-512"):
        set_cpu_matmul("avx512")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    with pytest.raises(native.NativeKernelsUnavailable, match="no AVX-512.*'AVX2'"):
        native.load_native_kernels()


@pytest.mark.skipif(sys.platform == "win32", reason="needs a C++ compiler")
def test_a_failed_build_reports_the_compilers_words(monkeypatch, tmp_path):
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("the build is only tried on AVX-512 CPUs")
    broken = tmp_path / "matmul_avx512.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(native, "SOURCE", broken)
    monkeypatch.setenv("CADENCE_COMPILE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(native.NativeKernelsUnavailable, match="(?s)failed.*error"):
        native.load_native_kernels()


@needs_kernel
@pytest.mark.timeout(120)
def test_a_build_killed_outright_does_not_block_later_loads():
    directory = native.build_directory()
    (directory / "lock").touch()  # torch's lock file, as a SIGKILLed build leaves it
    native.load_native_kernels()  # would wait on it forever
    assert not (directory / "lock").exists()
