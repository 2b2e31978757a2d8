"""`CompiledWithFallback`: guards skipped only for signatures already run with them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cadence.accel import compile_cache, compiled_function
from cadence.accel.compiled_function import CompiledWithFallback


def _affine(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + 1


@pytest.mark.compile
def test_steady_state_calls_match_eager_and_a_new_shape_is_guarded_again():
    fn = CompiledWithFallback(_affine, "default")
    x = torch.arange(4.0)
    for _ in range(compiled_function.GUARDED_CALLS + 2):
        torch.testing.assert_close(fn(x, 2.0), _affine(x, 2.0))
    # A shape never seen must not run the graph compiled for the old one unguarded.
    y = torch.arange(6.0)
    torch.testing.assert_close(fn(y, 2.0), _affine(y, 2.0))
    assert fn.compiled is not None
    counts = sorted(fn.guarded_calls.values())
    assert counts == [1, compiled_function.GUARDED_CALLS]


@pytest.mark.compile
def test_torch_compile_runs_inside_the_first_calls_compile_bracket():
    # The first torch.compile of a process loads inductor (seconds): compile time, which
    # the progress bar shows and perf/compile_s counts, so it happens in on_compile's bracket.
    seen = []
    fn = CompiledWithFallback(
        _affine, "default", on_compile=lambda started: seen.append((started, fn.compiled))
    )
    assert fn.compiled is None and not seen
    fn(torch.ones(2), 3.0)
    (opened, before), (closed, after) = seen
    assert opened and before is None and not closed and after is not None


@pytest.mark.compile
def test_state_key_separates_signatures():
    flag = {"training": True}
    fn = CompiledWithFallback(_affine, "default", state_key=lambda: flag["training"])
    x = torch.ones(3)
    for _ in range(3):
        fn(x, 1.0)
    flag["training"] = False
    fn(x, 1.0)
    assert len(fn.guarded_calls) == 2
    with pytest.raises(TypeError):  # read-only
        fn.guarded_calls[next(iter(fn.guarded_calls))] = 0


def test_a_compile_failure_falls_back_to_eager(caplog):
    def fails_to_compile(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    fn = CompiledWithFallback(fails_to_compile, "default")

    def broken(*args):
        raise RuntimeError("backend exploded")

    fn.compiled = broken
    torch.testing.assert_close(fn(torch.zeros(2)), torch.ones(2))
    assert fn.compiled is None and fn.failed
    assert "running it eagerly" in caplog.text


@pytest.mark.compile
def test_a_call_that_would_compile_while_a_cuda_graph_records_raises():
    """`CompiledWithFallback.forbid_compile` (set while a CUDA graph records a call, when
    a compile would launch CUDA work of its own): inputs of a new layout raise rather
    than compile or fall back to eager, and a signature already run still runs."""
    fn = CompiledWithFallback(
        _affine, "default", options=compile_cache.graph_options(torch.device("cpu"))
    )
    x = torch.arange(8.0).reshape(4, 2)
    for _ in range(compiled_function.GUARDED_CALLS + 1):
        fn(x, 2.0)
    fn.forbid_compile = True
    try:
        torch.testing.assert_close(fn(x, 2.0), _affine(x, 2.0))
        strided = x[:, 0]  # another layout: the graph's guards reject it
        with pytest.raises(RuntimeError):
            fn(strided, 2.0)
        assert not fn.failed and fn.compiled is not None
    finally:
        fn.forbid_compile = False
    torch.testing.assert_close(fn(x[:, 0], 2.0), _affine(x[:, 0], 2.0))


@pytest.mark.compile
def test_a_graph_the_signature_does_not_show_compiles_with_guards(caplog):
    # A dynamic graph specialises on a derived size of 1 (here x[2:] broadcast against
    # x[1:2]), which the signature (each size only as 0, 1 or more) does not show: the
    # steady-state call without guards finds no graph, and the call runs guarded instead
    # of giving up compiling.
    fn = CompiledWithFallback(lambda x: x[2:] * x[1:2], "default", dynamic=True)
    for _ in range(3):
        torch.testing.assert_close(fn(torch.arange(1.0, 6.0)), torch.tensor([6.0, 8.0, 10.0]))
    torch.testing.assert_close(fn(torch.arange(1.0, 4.0)), torch.tensor([6.0]))
    torch.testing.assert_close(fn(torch.arange(1.0, 6.0)), torch.tensor([6.0, 8.0, 10.0]))
    assert fn.compiled is not None
    assert "running it eagerly" not in caplog.text


@pytest.mark.compile
def test_options_reach_inductor_on_top_of_the_mode(monkeypatch):
    calls = []
    real_compile = torch.compile

    def recording_compile(fn, **kwargs):
        calls.append(kwargs)
        return real_compile(fn, **kwargs)

    monkeypatch.setattr(torch, "compile", recording_compile)
    x = torch.arange(4.0)
    for mode, options in [("default", None), ("max-autotune-no-cudagraphs", {"cpp_wrapper": True})]:
        fn = CompiledWithFallback(_affine, mode, options=options)
        torch.testing.assert_close(fn(x, 2.0), _affine(x, 2.0))
    assert calls[0] == {"mode": "default", "dynamic": None}
    assert calls[1]["options"] == {
        "max_autotune": True,
        "coordinate_descent_tuning": True,
        "cpp_wrapper": True,
    }
    assert "mode" not in calls[1]


def test_the_signature_tells_structures_apart_and_not_values():
    from collections import namedtuple

    from cadence.data.time_step import TimeStep

    fn = CompiledWithFallback(_affine, "default")
    pair = namedtuple("pair", "a b")

    def time_step(rows=3, untransformed=None):
        zeros = torch.zeros(rows)
        return TimeStep(zeros.long(), zeros, zeros, zeros, zeros, zeros.long(), {}, untransformed)

    def args(keys=("x", "y"), rows=3, untransformed=None):
        step = time_step(rows, untransformed)
        nest = {key: torch.randn(rows) for key in keys}
        return (nest, pair(torch.ones(rows), [torch.zeros(2), 1]), step, 0.5)

    signature = fn.signature(args())
    assert fn.signature(args()) == signature  # new tensors, same shapes: the same graph
    hash(signature)
    assert fn.signature(args(keys=("x", "z"))) != signature
    assert fn.signature(args(rows=4)) != signature
    assert fn.signature(args(untransformed=time_step())) != signature
    assert fn.signature((*args()[:3], 0.25)) != signature  # a Python number is a constant
    step = time_step()
    for other in (  # a time step's every field counts: its env info, observation nest, ...
        dataclasses.replace(step, env_info={"lives": torch.zeros(3)}),
        dataclasses.replace(step, observation={"x": torch.zeros(3)}),
        dataclasses.replace(step, prev_action=torch.zeros(3, 2)),
    ):
        assert fn.signature((*args()[:2], other, 0.5)) != signature
