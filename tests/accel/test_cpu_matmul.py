"""The CPU matmul backends of cadence's layers: oneDNN's multiplies and their gradients equal
ATen's, each multiply goes where its size says, ``auto`` follows the measurement, and a
compiled graph runs the same multiplies as eager."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cadence.accel import cpu_matmul as matmul
from cadence.accel.cpu_matmul import (
    ONEDNN_MIN_MACS,
    batched_linear,
    cpu_matmul,
    linear,
    measure_cpu_matmul,
    onednn_matmul,
    set_cpu_matmul,
    using_cpu_matmul,
)
from cadence.networks import linear as layers
from cadence.networks.ensemble import EnsembleMLP
from cadence.networks.linear import GRUCell
from cadence.networks.mlp import MLP
from cadence.trainer.config import CPU_MATMULS as TRAINER_CPU_MATMULS

needs_onednn = pytest.mark.skipif(
    not matmul.onednn_available(), reason="this torch build has no oneDNN"
)


class OpsCalled(TorchDispatchMode):
    """Records the name of every op dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def ops_called(fn) -> list[str]:
    with OpsCalled() as mode:
        fn()
    return mode.names


def loss_and_gradients(mlp):
    """A step to compile: ``mlp``'s loss on ``x`` and its parameters' gradients."""

    def step(x):
        loss = mlp(x).square().mean()
        return [loss.detach(), *torch.autograd.grad(loss, list(mlp.parameters()))]

    return step


def _values_and_grads(fn, *inputs):
    leaves = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    out = fn(*leaves)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), [x for x in leaves if x.requires_grad])
    return out.detach(), grads


@needs_onednn
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_a_onednn_multiply_and_its_gradients_equal_atens(bias, transposed):
    torch.manual_seed(0)
    a = torch.randn(48, 40, requires_grad=True)
    if transposed:  # a view with a column stride, as a backward passes in
        a = torch.randn(40, 48).t().requires_grad_(True)
    b = torch.randn(40, 24, requires_grad=True)
    c = torch.randn(24, requires_grad=True) if bias else None
    inputs = [a, b] + ([c] if bias else [])

    def reference(a, b, *c):
        return a @ b + c[0] if c else a @ b

    def by_onednn(a, b, *c):
        return onednn_matmul(a, b, c[0] if c else None)

    expected, expected_grads = _values_and_grads(reference, *inputs)
    got, got_grads = _values_and_grads(by_onednn, *inputs)
    torch.testing.assert_close(got, expected)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


@needs_onednn
def test_an_ensembles_onednn_multiply_and_its_gradients_equal_a_baddbmm():
    torch.manual_seed(1)
    x = torch.randn(3, 32, 20, requires_grad=True)
    w = torch.randn(3, 20, 16, requires_grad=True)
    bias = torch.randn(3, 1, 16, requires_grad=True)
    expected, expected_grads = _values_and_grads(torch.baddbmm, bias, x, w)
    got, got_grads = _values_and_grads(lambda b, x, w: onednn_matmul(x, w, b), bias, x, w)
    torch.testing.assert_close(got, expected)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


@needs_onednn
def test_only_multiplies_large_enough_to_gain_go_to_onednn():
    set_cpu_matmul("onednn")
    weight, bias = torch.randn(128, 64), torch.randn(128)
    rows = ONEDNN_MIN_MACS // (64 * 128)
    assert "cadence.onednn_matmul" in ops_called(
        lambda: linear(torch.randn(rows, 64), weight, bias)
    )
    small = ops_called(lambda: linear(torch.randn(rows - 1, 64), weight, bias))
    assert "cadence.onednn_matmul" not in small and "aten.addmm" in small
    # Leading dims count as rows.
    stacked = torch.randn(2, rows // 2, 64)
    assert linear(stacked, weight, bias).shape == (2, rows // 2, 128)
    assert "cadence.onednn_matmul" in ops_called(lambda: linear(stacked, weight, bias))
    # Other dtypes and ATen's backend never do.
    assert "cadence.onednn_matmul" not in ops_called(
        lambda: linear(torch.randn(rows, 64).double(), weight.double(), bias.double())
    )
    set_cpu_matmul("aten")
    assert "cadence.onednn_matmul" not in ops_called(
        lambda: linear(torch.randn(rows, 64), weight, bias)
    )
    ensemble = torch.randn(2, rows, 64), torch.randn(2, 64, 128)
    assert batched_linear(*ensemble) is None
    set_cpu_matmul("onednn")
    assert batched_linear(*ensemble).shape == (2, rows, 128)


@needs_onednn
@pytest.mark.parametrize(("aten_us", "expected"), [(200.0, "onednn"), (110.0, "aten")])
def test_auto_keeps_onednn_only_where_it_measures_faster(
    monkeypatch, unmeasured_machine, aten_us, expected
):
    times = {"aten": aten_us, "onednn": 100.0}
    monkeypatch.setattr(matmul, "measure_cpu_matmul", lambda shape=matmul.CUBE: times)
    assert set_cpu_matmul("auto") == expected == cpu_matmul()
    assert os.environ[matmul.ENV_VAR] == expected  # what child processes start with


def test_a_child_process_takes_its_parents_backend_without_measuring(monkeypatch):
    def no_measuring():
        raise AssertionError("measured although the parent had decided")

    monkeypatch.setattr(matmul, "measure_cpu_matmul", no_measuring)
    monkeypatch.setattr(matmul, "_backend", None)
    monkeypatch.setenv(matmul.ENV_VAR, "aten")
    assert cpu_matmul() == "aten"


@needs_onednn
def test_auto_measures_once_per_machine_and_thread_count(monkeypatch, unmeasured_machine):
    measured = []

    def measure(shape=matmul.CUBE):
        measured.append(torch.get_num_threads())
        # One thread: oneDNN faster. Two: ATen, as a busy machine could measure.
        aten_us = 200.0 if torch.get_num_threads() == 1 else 100.0
        return {"aten": aten_us, "onednn": 100.0}

    monkeypatch.setattr(matmul, "measure_cpu_matmul", measure)
    torch.set_num_threads(1)  # the fixture restores the session's count
    assert set_cpu_matmul("auto") == "onednn"
    assert measured == [1]
    # A later process on the machine (nothing in it, nothing inherited) reads the record.
    monkeypatch.setattr(matmul, "_backend", None)
    monkeypatch.delenv(matmul.ENV_VAR)
    assert set_cpu_matmul("auto") == "onednn" == cpu_matmul()
    assert measured == [1]
    # Another thread count is measured for itself, and both are kept.
    torch.set_num_threads(2)
    assert set_cpu_matmul("auto") == "aten"
    assert measured == [1, 2]
    torch.set_num_threads(1)
    assert set_cpu_matmul("auto") == "onednn"
    record = matmul.machine_record()
    assert sorted(json.loads(record.read_text()).values()) == ["aten", "onednn"]


def test_a_damaged_or_unusable_record_is_measured_again(monkeypatch, unmeasured_machine):
    monkeypatch.setattr(matmul, "measure_cpu_matmul", lambda shape=matmul.CUBE: {"aten": 1.0})
    record = matmul.machine_record()
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert set_cpu_matmul("auto") == "aten"
    assert json.loads(record.read_text()) == {matmul.record_key(): "aten"}
    # The removed AVX-512 kernel, recorded by an earlier version: measured again.
    record.write_text(json.dumps({matmul.record_key(): "avx512"}))
    assert set_cpu_matmul("auto") == "aten"
    assert json.loads(record.read_text()) == {matmul.record_key(): "aten"}


def test_the_measurement_times_each_backend_and_draws_no_random_numbers():
    state = torch.get_rng_state()
    times = measure_cpu_matmul((32, 16, 8), repeats=2)
    assert set(times) == ({"aten", "onednn"} if matmul.onednn_available() else {"aten"})
    assert all(t > 0 for t in times.values())
    assert torch.equal(torch.get_rng_state(), state)


def test_unknown_backends_are_rejected_with_the_accepted_ones():
    with pytest.raises(ValueError, match="'fast' is not one of auto, aten, onednn$"):
        set_cpu_matmul("fast")
    # The trainer's config accepts the same settings.
    assert TRAINER_CPU_MATMULS == matmul.CPU_MATMULS


def test_the_removed_avx512_kernel_is_refused_with_what_to_use_instead(monkeypatch):
    with pytest.raises(ValueError, match="kernel .* was removed.*use auto, aten or onednn"):
        set_cpu_matmul("avx512")
    # Inherited from the environment, as a parent of an earlier version would leave it.
    monkeypatch.setattr(matmul, "_backend", None)
    monkeypatch.setenv(matmul.ENV_VAR, "avx512")
    with pytest.raises(ValueError, match="CADENCE_CPU_MATMUL=avx512 .* was removed"):
        cpu_matmul()


@needs_onednn
def test_using_a_backend_restores_the_previous_one():
    set_cpu_matmul("onednn")
    with using_cpu_matmul("aten") as inside:
        assert inside == cpu_matmul() == "aten"
    assert cpu_matmul() == "onednn"


@needs_onednn
def test_networks_give_the_same_values_and_gradients_on_either_backend():
    torch.manual_seed(2)
    mlp = MLP(17, (256, 256), out_dim=6, activation="relu")
    critics = EnsembleMLP(23, (256, 256), 1, ensemble_size=2)
    x = torch.randn(256, 17)
    pairs = torch.randn(2, 256, 23)

    def run():
        loss = mlp(x).square().mean() + critics(pairs).square().mean()
        params = [*mlp.parameters(), *critics.parameters()]
        return [loss.detach(), *torch.autograd.grad(loss, params)]

    with using_cpu_matmul("aten"):
        expected = run()
    with using_cpu_matmul("onednn"):
        calls = ops_called(run)
        got = run()
    assert calls.count("cadence.onednn_matmul") >= 2 + 2 * 2  # forward and backward
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@needs_onednn
@pytest.mark.compile
@pytest.mark.skipif(sys.platform == "win32", reason="inductor needs a C++ compiler")
def test_a_compiled_graph_runs_the_onednn_multiplies_as_eager_does():
    torch.manual_seed(3)
    set_cpu_matmul("onednn")
    mlp = MLP(17, (256, 256), out_dim=1, activation="relu")
    x = torch.randn(256, 17)

    step = loss_and_gradients(mlp)
    expected = step(x)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(step, fullgraph=True)
        compiled(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            got = compiled(x)
    # The 256 x 256 layer's forward and two backward multiplies (the others are smaller
    # than ONEDNN_MIN_MACS).
    multiplies = [e for e in prof.events() if e.name == "cadence::onednn_matmul"]
    assert len(multiplies) == 3
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


@needs_onednn
def test_the_flop_counter_counts_onednn_multiplies():
    from torch.utils.flop_counter import FlopCounterMode

    a, b = torch.randn(2, 64, 32, requires_grad=True), torch.randn(2, 32, 16, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        onednn_matmul(a, b, None).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * (2 * 64 * 32 * 16)  # forward, two backward


@needs_onednn
def test_a_gru_cell_on_onednn_equals_torchs_cell():
    torch.manual_seed(4)
    cell = GRUCell(96, 128)
    x, h = torch.randn(64, 96), torch.randn(64, 128)
    params = list(cell.parameters())

    def run():
        out = cell(x, h)
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        return [out.detach(), *torch.autograd.grad((out * weights).sum(), params)]

    with using_cpu_matmul("aten"):
        expected = run()
    with using_cpu_matmul("onednn"):
        assert "cadence.onednn_matmul" in ops_called(run)
        got = run()
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    assert list(cell.state_dict()) == list(torch.nn.GRUCell(96, 128).state_dict())


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
    set_cpu_matmul("aten")
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
    set_cpu_matmul("aten")
    assert layers.Linear(3, 256).narrow_input
    assert not layers.Linear(64, 64).narrow_input
    assert not layers.Linear(64, 2).narrow_input
    assert not layers.Linear(layers.NARROW_INPUT_MAX + 1, 256).narrow_input


@pytest.mark.parametrize(
    ("vendor", "capability", "mkl_limit", "can_win"),
    [
        ("AuthenticAMD", "AVX512", "", True),  # MKL takes its AVX2 code on AMD processors
        ("GenuineIntel", "AVX512", "", False),  # MKL runs AVX-512 itself
        ("GenuineIntel", "AVX512", "AVX2", True),  # held below AVX-512
        ("GenuineIntel", "AVX512", "AVX512_E1", False),
        ("AuthenticAMD", "AVX2", "", False),  # oneDNN has no wider code either
    ],
)
def test_onednn_can_win_only_where_mkl_runs_narrower_code_than_the_processor_has(
    monkeypatch, vendor, capability, mkl_limit, can_win
):
    monkeypatch.setattr(matmul, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", mkl_limit)
    assert matmul.onednn_can_win() is can_win


def test_auto_keeps_aten_without_measuring_where_onednn_cannot_win(monkeypatch, unmeasured_machine):
    def no_measuring(shape=matmul.CUBE):
        raise AssertionError("measured where oneDNN cannot win")

    monkeypatch.setattr(matmul, "onednn_can_win", lambda: False)
    monkeypatch.setattr(matmul, "measure_cpu_matmul", no_measuring)
    assert set_cpu_matmul("auto") == "aten"
    assert json.loads(matmul.machine_record().read_text()) == {matmul.record_key(): "aten"}
