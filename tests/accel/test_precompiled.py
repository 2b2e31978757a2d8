"""Compiled methods saved whole (`cadence.accel.precompiled`): a later start loads the
traced graph instead of tracing it, and only where it still fits."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from torch import nn

from cadence.accel import compile_cache, compiled_function, precompiled
from cadence.accel.compiled_function import CompiledWithFallback

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(
        not precompiled.saves_whole(), reason="this torch does not save compiled graphs whole"
    ),
]


class Scaled(nn.Module):
    """A method whose graph holds a parameter and a Python-number hyperparameter."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.arange(1.0, 5.0))

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.weight).tanh() * self.scale


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty compile cache of this test's own (restored afterwards)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    compile_cache.configure_inductor()
    return tmp_path / "cadence" / "graphs"


def _run(
    fn: CompiledWithFallback, x: torch.Tensor, calls: int = compiled_function.GUARDED_CALLS + 2
):
    for _ in range(calls):
        result = fn(x)
    return result


def _no_tracing(monkeypatch) -> None:
    """Makes any trace of a method fail the test: a loaded graph is not traced again."""

    def traced(*args, **kwargs):
        raise AssertionError("traced although a saved graph fits")

    monkeypatch.setattr(torch, "compile", traced)


def test_a_later_start_loads_the_saved_graph_without_tracing(cache, monkeypatch):
    x = torch.linspace(-1, 1, 4)
    first = CompiledWithFallback(Scaled(2.0).step, "default")
    expected = _run(first, x)
    assert first.is_compiled and first.precompile
    assert len(list(cache.glob("step-*.bin"))) == 1

    _no_tracing(monkeypatch)
    module = Scaled(2.0)
    with torch.no_grad():
        module.weight.mul_(-1)  # the loaded graph reads this module's live parameters
    later = CompiledWithFallback(module.step, "default")
    torch.testing.assert_close(_run(later, x), module.step(x))
    torch.testing.assert_close(_run(later, x), -expected)
    assert later.is_compiled and later.compiled is None  # nothing went through dynamo


def test_a_graph_whose_guards_reject_the_inputs_is_compiled_anew_beside_it(cache):
    x = torch.linspace(-1, 1, 4)
    _run(CompiledWithFallback(Scaled(2.0).step, "default"), x)
    other = CompiledWithFallback(Scaled(3.0).step, "default")  # another constant in the graph
    torch.testing.assert_close(_run(other, x), Scaled(3.0).step(x))
    assert len(list(cache.glob("step-*.bin"))) == 2
    # Each loads its own from now on.
    for scale in (2.0, 3.0):
        fn = CompiledWithFallback(Scaled(scale).step, "default")
        torch.testing.assert_close(_run(fn, x), Scaled(scale).step(x))
    assert len(list(cache.glob("step-*.bin"))) == 2


def test_a_changed_source_is_traced_again(cache, tmp_path, monkeypatch):
    source = tmp_path / "user_policy.py"
    body = (
        "import torch\n\nclass Policy(torch.nn.Module):\n"
        "    def step(self, x):\n        return x * {}\n"
    )
    source.write_text(body.format(2))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("user_policy")
    x = torch.ones(3)
    _run(CompiledWithFallback(module.Policy().step, "default"), x)

    source.write_text(body.format(5))  # the user edits the method between two runs
    module = importlib.reload(module)
    try:
        fn = CompiledWithFallback(module.Policy().step, "default")
        torch.testing.assert_close(_run(fn, x), 5 * x)
    finally:
        sys.modules.pop("user_policy", None)


def test_a_method_with_a_graph_break_is_marked_and_compiled_the_usual_way(cache, monkeypatch):
    class Breaks(nn.Module):
        def step(self, x: torch.Tensor) -> torch.Tensor:
            torch._dynamo.graph_break()
            return x + 1

    x = torch.zeros(2)
    fn = CompiledWithFallback(Breaks().step, "default")
    torch.testing.assert_close(_run(fn, x), x + 1)
    assert fn.is_compiled and fn.compiled is not None
    assert len(list(cache.glob("step-*.unsupported"))) == 1

    tried = []
    real = precompiled.Precompiled
    monkeypatch.setattr(precompiled, "Precompiled", lambda *a: tried.append(a) or real(*a))
    again = CompiledWithFallback(Breaks().step, "default")
    torch.testing.assert_close(_run(again, x), x + 1)
    assert not tried  # the marker spared it the trace that would fail again


@pytest.mark.parametrize("dynamic", [True, None])
def test_steady_state_calls_check_guards_only_for_sizes_the_signature_hides(
    cache, monkeypatch, dynamic
):
    # A dynamic graph's signature shows each size only as 0, 1 or more, while the graph
    # may depend on more (here a size-1 slice when x has 3 elements), so steady-state calls
    # check its guards once for each set of exact sizes; a static signature shows every
    # size, so steady-state calls never check them.
    class Pairs(nn.Module):
        def step(self, x: torch.Tensor) -> torch.Tensor:
            return x[2:] * x[1:2]

    checks = []
    check = precompiled.Precompiled.check
    monkeypatch.setattr(
        precompiled.Precompiled, "check", lambda self, *a: checks.append(1) or check(self, *a)
    )
    fn = CompiledWithFallback(Pairs().step, "default", dynamic=dynamic)
    fn(torch.arange(1.0, 6.0))  # compiles, saves, and checks that the file loads back
    checks.clear()
    calls = compiled_function.GUARDED_CALLS + 3
    for _ in range(calls):
        torch.testing.assert_close(fn(torch.arange(1.0, 6.0)), torch.tensor([6.0, 8.0, 10.0]))
    assert len(checks) == compiled_function.GUARDED_CALLS - 1 + (1 if dynamic else 0)
    checks.clear()
    for _ in range(calls):
        torch.testing.assert_close(fn(torch.arange(1.0, 7.0)), torch.tensor([6.0, 8.0, 10.0, 12.0]))
    # Another size: a dynamic graph checks its guards once more; a static one compiles a
    # graph for it, checks that its file loads back, and checks it in its guarded calls.
    assert len(checks) == (1 if dynamic else 1 + compiled_function.GUARDED_CALLS)
    torch.testing.assert_close(fn(torch.arange(1.0, 4.0)), torch.tensor([6.0]))
    torch.testing.assert_close(fn(torch.arange(1.0, 6.0)), torch.tensor([6.0, 8.0, 10.0]))
    assert fn.is_compiled


class Activated(nn.Module):
    """A method whose graph holds a string (always a constant of the graph, where a number
    that changes becomes an input of one graph for all its values)."""

    def __init__(self, activation: str):
        super().__init__()
        self.activation = activation

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch, self.activation)(x)


def test_a_name_keeps_its_newest_files(cache, monkeypatch):
    monkeypatch.setattr(precompiled, "MAX_FILES_PER_NAME", 2)
    x = torch.linspace(-1, 1, 4)
    names = ("tanh", "sigmoid", "relu")  # three graphs of one name: the oldest is removed
    for name in names:
        _run(CompiledWithFallback(Activated(name).step, "default"), x)
    assert len(list(cache.glob("step-*.bin"))) == 2
    _no_tracing(monkeypatch)
    for name in names[1:]:
        module = Activated(name)
        torch.testing.assert_close(
            _run(CompiledWithFallback(module.step, "default"), x), module.step(x)
        )


def test_precompiling_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setenv("CADENCE_PRECOMPILE", "0")
    fn = CompiledWithFallback(Scaled(2.0).step, "default")
    _run(fn, torch.ones(4))
    assert not fn.precompile and fn.compiled is not None
    assert not cache.exists() or not list(cache.iterdir())


class _WithOptimizers(nn.Module):
    """Keeps a stepped optimizer in a plain dict: a trace through this module pickles it
    without its state tensors, and such a file does not load."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)
        self.optimizers = {"layer": torch.optim.Adam(self.layer.parameters())}
        self.layer(torch.ones(4)).sum().backward()
        self.optimizers["layer"].step()


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _WithOptimizers()

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.layer(x).tanh()


def test_a_saved_graph_that_does_not_load_back_is_marked_and_removed(cache):
    x = torch.linspace(-1, 1, 4)
    fn = CompiledWithFallback(_Outer().step, "default")
    with torch.no_grad():
        _run(fn, x)
        assert fn.is_compiled  # this start runs it compiled all the same
        assert not list(cache.glob("step-*.bin"))
        assert len(list(cache.glob("step-*.unsupported"))) == 1
