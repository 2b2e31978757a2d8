"""The shim of private torch symbols (`cadence.accel.torch_private`): each wrapper gives the
symbol's result, and where torch lacks the symbol (hidden here) its fallback gives the same
result or leaves torch at its default; and no private symbol appears outside the shim."""

from __future__ import annotations

import collections
import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import torch
import torch._dynamo.config
import torch._functorch.config
import torch._inductor
import torch._inductor.config
import torch._inductor.cpu_vec_isa
import torch._inductor.runtime.cache_dir_utils
import torch.fx.experimental._config
import torch.utils._pytree

import cadence
from cadence.accel import torch_private as tp
from cadence.accel.joint_adam import JointAdamStep

PRIVATE = re.compile(
    r"torch\._[a-z]|torch\.ops\.\w+\._|torch\.utils\._|_global_optimizer_pre_hooks"
    r"|torch\._\w+\.config|torch\.fx\.experimental\._"
)
"""A private torch symbol as the issue defines them (a ``torch._*.config`` key is reached
through its module, so the module's name is what shows)."""

SHIM = Path(tp.__file__)


def _inputs() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    return [torch.rand(3) + 0.5, torch.rand(2, 2) + 0.5], [torch.rand(3) + 0.5, torch.rand(2, 2)]


CALLS = {
    "add": lambda f, a, b: f(a, b),
    "add_": lambda f, a, b: f(a, b) or a,
    "sub": lambda f, a, b: f(a, b),
    "mul": lambda f, a, b: f(a, torch.tensor(0.3)),
    "mul_": lambda f, a, b: f(a, 0.3) or a,
    "div": lambda f, a, b: f(a, b),
    "pow": lambda f, a, b: f([torch.tensor(0.9)] * len(b), b),
    "sqrt": lambda f, a, b: f(a),
    "neg": lambda f, a, b: f(a),
    "copy_": lambda f, a, b: f(a, b) or a,
}


@pytest.mark.parametrize("name", tp.FOREACH_OPS)
def test_each_foreach_op_falls_back_to_its_per_tensor_form(name, monkeypatch):
    wrapper = getattr(tp, f"foreach_{name}")
    expected = CALLS[name](wrapper, *_inputs())
    assert hasattr(torch, f"_foreach_{name}")
    monkeypatch.delattr(torch, f"_foreach_{name}")
    got = CALLS[name](wrapper, *_inputs())
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)


def _adam_run(wrap=lambda optimizer: None, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3))]
    optimizers = [torch.optim.Adam([p], lr=0.1, fused=True) for p in params]
    for optimizer in optimizers:
        wrap(optimizer)
    joint = JointAdamStep(optimizers)
    for _ in range(steps):
        joint.zero_grad()
        sum((p**2).sum() for p in params).backward()
        joint.step()
    return [p.detach().clone() for p in params]


def test_without_fused_adam_the_joint_step_is_each_optimizers_own(monkeypatch):
    expected = _adam_run()  # joint from the second step on
    real = torch._fused_adam_
    monkeypatch.delattr(torch, "_fused_adam_")
    assert not tp.fused_adam_available()
    with pytest.raises(RuntimeError, match="no torch._fused_adam_"):
        tp.fused_adam_()
    own_steps = []

    def wrap(optimizer):  # its own step, which a torch without the kernel would run unfused
        step = optimizer.step

        def own_step(*args, **kwargs):
            own_steps.append(optimizer)
            with monkeypatch.context() as patch:
                patch.setattr(torch, "_fused_adam_", real, raising=False)
                return step(*args, **kwargs)

        optimizer.step = own_step

    got = _adam_run(wrap)
    assert len(own_steps) == 2 * 3  # every step of both optimizers their own
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)


@pytest.mark.parametrize("name", ["_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"])
def test_without_the_global_hook_registry_hooks_count_as_registered(name, monkeypatch):
    assert not tp.optimizer_hooks_registered()  # none registered in the test session
    optimizer_module = importlib.import_module("torch.optim.optimizer")
    handle = optimizer_module.register_optimizer_step_pre_hook(lambda *args: None)
    try:
        assert tp.optimizer_hooks_registered()
    finally:
        handle.remove()
    monkeypatch.delattr(optimizer_module, name)
    assert tp.optimizer_hooks_registered()  # unknown: the caller keeps to step()


Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Holder:
    value: torch.Tensor
    rest: tuple


def _tree():
    return {"a": [torch.ones(1), (torch.zeros(2), None)], "b": Pair(torch.ones(3), 2.0)}


def test_tree_flatten_and_unflatten_fall_back_to_pure_python(monkeypatch):
    leaves, spec = tp.tree_flatten(_tree())
    monkeypatch.delattr(torch.utils._pytree, "tree_flatten")
    fallback_leaves, fallback_spec = tp.tree_flatten(_tree())
    assert len(fallback_leaves) == len(leaves)
    for got, want in zip(fallback_leaves, leaves, strict=True):
        assert got is want or (isinstance(got, torch.Tensor) and torch.equal(got, want))
    rebuilt = tp.tree_unflatten(
        [2 * x if isinstance(x, torch.Tensor) else x for x in fallback_leaves], fallback_spec
    )
    assert isinstance(rebuilt["b"], Pair) and rebuilt["b"].second == 2.0
    assert torch.equal(rebuilt["a"][1][0], torch.zeros(2)) and rebuilt["a"][1][1] is None
    assert torch.equal(rebuilt["b"].first, 2 * torch.ones(3))
    holder = tp.tree_unflatten(*tp.tree_flatten(Holder(torch.ones(2), (torch.zeros(1),)))[::1])
    assert isinstance(holder, Holder) and torch.equal(holder.rest[0], torch.zeros(1))


def test_tree_unflatten_falls_back_for_the_fallbacks_spec(monkeypatch):
    monkeypatch.delattr(torch.utils._pytree, "tree_flatten")
    leaves, spec = tp.tree_flatten([torch.ones(1), {"x": torch.zeros(1)}])
    monkeypatch.delattr(torch.utils._pytree, "tree_unflatten")
    rebuilt = tp.tree_unflatten(leaves, spec)
    assert torch.equal(rebuilt[1]["x"], torch.zeros(1))


def test_supported_nodes_fall_back_to_none(monkeypatch):
    assert tuple in tp.supported_nodes()
    monkeypatch.delattr(torch.utils._pytree, "SUPPORTED_NODES")
    assert tp.supported_nodes() == {}


@pytest.mark.parametrize(
    ("hide", "context"),
    [
        ((torch._dynamo.config, "trace_autograd_ops"), tp.trace_autograd_ops),
        ((torch.fx.experimental._config, "use_duck_shape"), tp.own_size_symbols),
    ],
)
def test_a_missing_trace_setting_leaves_tracing_as_it_is(hide, context, monkeypatch):
    module, key = hide
    before = getattr(module, key)
    with context():
        assert getattr(module, key) != before  # the wrapper sets it
    assert getattr(module, key) == before
    monkeypatch.delattr(module, key)
    with context():  # nothing to set: a no-op, not an error
        assert not hasattr(module, key)


def test_mode_options_fall_back_to_none(monkeypatch):
    assert tp.mode_options("max-autotune-no-cudagraphs", None)["max_autotune"]
    monkeypatch.delattr(torch._inductor, "list_mode_options")
    assert tp.mode_options("max-autotune-no-cudagraphs", None) == {}


def test_default_cache_dir_falls_back_to_inductors_documented_default(monkeypatch):
    expected = torch._inductor.runtime.cache_dir_utils.default_cache_dir()
    monkeypatch.delattr(torch._inductor.runtime.cache_dir_utils, "default_cache_dir")
    assert tp.default_inductor_cache_dir() == expected


def test_valid_vec_isa_list_falls_back_to_none(monkeypatch):
    monkeypatch.setattr(torch._inductor.cpu_vec_isa, "valid_vec_isa_list", lambda: ["avx"])
    assert tp.valid_vec_isa_list() == ["avx"]
    monkeypatch.delattr(torch._inductor.cpu_vec_isa, "valid_vec_isa_list")
    assert tp.valid_vec_isa_list() == []


CONFIG_KEYS = [
    (tp.INDUCTOR_CONFIG, "fx_graph_cache"),
    (tp.INDUCTOR_CONFIG, "fallback_random"),
    (tp.INDUCTOR_CONFIG, "size_asserts"),
    (tp.INDUCTOR_CONFIG, "cpp__use_decompose_tanh"),
    (tp.INDUCTOR_CONFIG, "cpp__vec_isa_ok"),
    (tp.INDUCTOR_CONFIG, "cpp__cxx"),
    (tp.FUNCTORCH_CONFIG, "enable_autograd_cache"),
]


@pytest.mark.parametrize(("module", "key"), CONFIG_KEYS)
def test_a_missing_config_key_is_left_out(module, key, monkeypatch):
    *path, name = key.split("__")
    owner = {
        tp.INDUCTOR_CONFIG: torch._inductor.config,
        tp.FUNCTORCH_CONFIG: torch._functorch.config,
    }[module]
    for part in path:
        owner = getattr(owner, part)
    value = getattr(owner, name)
    assert tp.config_value(module, key, "absent") == value
    monkeypatch.setattr(owner, name, "set by the test")  # restored afterwards
    assert tp.configure(module, **{key: value}) == [] and getattr(owner, name) == value
    monkeypatch.delattr(owner, name)
    assert tp.config_value(module, key, "absent") == "absent"
    assert tp.configure(module, **{key: value}) == [key]
    assert not hasattr(owner, name)


def test_the_report_names_every_symbol_and_whether_torch_has_it(monkeypatch):
    assert all(tp.available().values())  # the torch this suite pins has them all
    monkeypatch.delattr(torch, "_foreach_neg")
    report = tp.report()
    assert "MISSING torch._foreach_neg" in report
    assert report.count("\n") == len(tp.SYMBOLS)


def test_no_private_torch_symbol_outside_the_shim():
    root = Path(cadence.__file__).parent
    offenders: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path == SHIM:
            continue
        lines = [
            f"{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if PRIVATE.search(line)
        ]
        if lines:
            offenders[str(path.relative_to(root.parent))] = lines
    assert not offenders, (
        "private torch symbols outside cadence/accel/torch_private.py (use a public API, or "
        f"add a wrapper with a fallback and a test to the shim): {offenders}"
    )
