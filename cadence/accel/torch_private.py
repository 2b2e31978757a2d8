"""The shim: every private torch symbol cadence uses, each behind a wrapper with a fallback.

A private symbol (``torch._*``, ``torch.ops.*._*``, ``torch.utils._*``, a key of a
``torch._*.config``) may change or go in any torch release. Only the optional fast path
(`cadence.accel`) needs the ones here, so an eager run never touches them. Each wrapper
looks its symbol up when called and, where this torch lacks it, takes a fallback that
gives the same result (the per-tensor form of a ``_foreach`` op, the optimizers' own
steps, a pure-Python pytree) or gives up only speed (a compile option left at torch's
default). `available` reports which symbols the installed torch has and
`report` says so in words, as CI prints it, so that the upper bound on
torch in ``pyproject.toml`` can be raised with evidence. A test greps the package so that no
private symbol appears outside this module.

Why each is used, and what is public instead:

- ``torch._foreach_*``: a dozen traced ops per parameter group instead of a dozen per
  parameter in the compiled optimizer step (`GraphOptimizer`), and one copy of a CUDA graph's
  inputs; no public API (``torch.optim`` uses them internally).
- ``torch._fused_adam_``: several fused Adams stepped in one kernel call (`JointAdamStep`);
  the public ``Adam(fused=True).step()`` is the per-optimizer fallback, the same numbers.
- ``torch.optim.optimizer._global_optimizer_pre_hooks`` (and ``_post_hooks``): whether a
  global step hook would be skipped by the joint step.
- ``torch.utils._pytree``: flattening nests of tensors (no public module in torch 2.13).
- ``torch._dynamo.config`` ``trace_autograd_ops``, ``torch.fx.experimental._config``
  ``use_duck_shape``, ``torch._inductor.config`` and ``torch._functorch.config`` keys,
  ``torch._inductor.list_mode_options``, ``torch._inductor.cpu_vec_isa`` and
  ``torch._inductor.runtime.cache_dir_utils``: compile settings with no public form.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import importlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

Tensors = Sequence[torch.Tensor]

INDUCTOR_CONFIG = "torch._inductor.config"
"""Inductor's config module, for `configure` and `config_value`."""

FUNCTORCH_CONFIG = "torch._functorch.config"
"""AOTAutograd's config module, for `configure`."""


def _attribute(module: str, name: str) -> Any:
    """``module.name`` (imported), or None where torch has neither."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


# ------------------------------------------------------------------ foreach ops
def _foreach(name: str, each: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of ``torch._foreach_<name>``: the op where torch has it, else ``each``
    (the same arithmetic one tensor at a time)."""

    def call(*args: Any) -> Any:
        op = getattr(torch, f"_foreach_{name}", None)
        return each(*args) if op is None else op(*args)

    call.__name__ = call.__qualname__ = f"foreach_{name}"
    call.__doc__ = f"``torch._foreach_{name}``, or its per-tensor form where torch lacks it."
    return call


def _pairs(a: Tensors, b: Any) -> Iterator[tuple[torch.Tensor, Any]]:
    """Each tensor of ``a`` with its partner: ``b``'s element (a list) or ``b`` itself."""
    return zip(a, b, strict=True) if isinstance(b, (list, tuple)) else ((x, b) for x in a)


def _in_place(method: str) -> Callable[[Tensors, Any], None]:
    def each(a: Tensors, b: Any) -> None:
        for x, y in _pairs(a, b):
            getattr(x, method)(y)

    return each


foreach_add = _foreach("add", lambda a, b: [x + y for x, y in _pairs(a, b)])
foreach_add_ = _foreach("add_", _in_place("add_"))
foreach_sub = _foreach("sub", lambda a, b: [x - y for x, y in _pairs(a, b)])
foreach_mul = _foreach("mul", lambda a, b: [x * y for x, y in _pairs(a, b)])
foreach_mul_ = _foreach("mul_", _in_place("mul_"))
foreach_div = _foreach("div", lambda a, b: [x / y for x, y in _pairs(a, b)])
foreach_pow = _foreach("pow", lambda a, b: [torch.pow(x, y) for x, y in _pairs(a, b)])
foreach_sqrt = _foreach("sqrt", lambda a: [torch.sqrt(x) for x in a])
foreach_neg = _foreach("neg", lambda a: [torch.neg(x) for x in a])
foreach_copy_ = _foreach("copy_", _in_place("copy_"))

FOREACH_OPS = ("add", "add_", "sub", "mul", "mul_", "div", "pow", "sqrt", "neg", "copy_")
"""The ``torch._foreach_*`` ops wrapped here."""


# -------------------------------------------------------------------- optimizers
def fused_adam_available() -> bool:
    """Whether ``torch._fused_adam_`` exists (else `JointAdamStep` steps each optimizer)."""
    return getattr(torch, "_fused_adam_", None) is not None


def fused_adam_(*args: Any, **kwargs: Any) -> None:
    """``torch._fused_adam_`` (the kernel ``torch.optim.Adam(fused=True)`` calls).

    Raises:
        RuntimeError: this torch has none; check `fused_adam_available` first and step
            the optimizers themselves instead.
    """
    op = getattr(torch, "_fused_adam_", None)
    if op is None:
        raise RuntimeError(
            f"torch {torch.__version__} has no torch._fused_adam_; step each optimizer itself"
        )
    op(*args, **kwargs)


def optimizer_hooks_registered() -> bool:
    """Whether a global optimizer step hook is registered
    (``torch.optim.optimizer._global_optimizer_pre_hooks`` or ``_post_hooks``); True where
    torch no longer says, so that a caller that would skip them keeps to ``step()``."""
    pre = _attribute("torch.optim.optimizer", "_global_optimizer_pre_hooks")
    post = _attribute("torch.optim.optimizer", "_global_optimizer_post_hooks")
    if pre is None or post is None:
        return True
    return bool(pre or post)


# ------------------------------------------------------------------------ pytree
@dataclasses.dataclass(frozen=True)
class _Spec:
    """The fallback pytree's structure of one node: its type, keys and children's specs
    (None: a leaf)."""

    kind: type | None
    keys: tuple[Any, ...] = ()
    children: tuple[_Spec, ...] = ()


def _children(tree: Any) -> tuple[tuple[Any, ...], list[Any]] | None:
    """A container's keys and children (lists, tuples, named tuples, dicts, dataclasses);
    None for a leaf."""
    if isinstance(tree, (list, tuple)):
        return tuple(range(len(tree))), list(tree)
    if isinstance(tree, dict):
        return tuple(tree), list(tree.values())
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        names = tuple(field.name for field in dataclasses.fields(tree))
        return names, [getattr(tree, name) for name in names]
    return None


def _fallback_flatten(tree: Any) -> tuple[list[Any], _Spec]:
    parts = _children(tree)
    if parts is None:
        return [tree], _Spec(None)
    keys, children = parts
    leaves, specs = [], []
    for child in children:
        child_leaves, spec = _fallback_flatten(child)
        leaves += child_leaves
        specs.append(spec)
    return leaves, _Spec(type(tree), keys, tuple(specs))


def _fallback_unflatten(leaves: Iterator[Any], spec: _Spec) -> Any:
    if spec.kind is None:
        return next(leaves)
    children = [_fallback_unflatten(leaves, child) for child in spec.children]
    if issubclass(spec.kind, dict):
        return spec.kind(zip(spec.keys, children, strict=True))
    if dataclasses.is_dataclass(spec.kind):
        return spec.kind(**dict(zip(spec.keys, children, strict=True)))
    if hasattr(spec.kind, "_fields"):  # a named tuple
        return spec.kind(*children)
    return spec.kind(children)


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """``torch.utils._pytree.tree_flatten``: ``tree``'s leaves and structure; where torch
    has no such module, the same for lists, tuples, dicts and dataclasses."""
    flatten = _attribute("torch.utils._pytree", "tree_flatten")
    return _fallback_flatten(tree) if flatten is None else flatten(tree)


def tree_unflatten(leaves: Sequence[Any], spec: Any) -> Any:
    """``torch.utils._pytree.tree_unflatten``: the inverse of `tree_flatten`."""
    if isinstance(spec, _Spec):
        return _fallback_unflatten(iter(leaves), spec)
    return _attribute("torch.utils._pytree", "tree_unflatten")(leaves, spec)


def supported_nodes() -> dict[type, Any]:
    """``torch.utils._pytree.SUPPORTED_NODES``: the registered node types, each with its
    ``flatten_fn``; empty where torch has none (its nodes are then described whole)."""
    nodes = _attribute("torch.utils._pytree", "SUPPORTED_NODES")
    return {} if nodes is None else nodes


# ---------------------------------------------------------------- compile config
def _config(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def configure(module: str, **values: Any) -> list[str]:
    """Sets keys of a torch config module (``"torch._inductor.config"``; a dotted key such
    as ``cpp__vec_isa_ok`` for ``cpp.vec_isa_ok``, with ``__`` for the dot). A key this torch
    does not have is left out and logged: it costs speed, not correctness.

    Returns:
        The keys that were not set.
    """
    missing = []
    config = _config(module)
    for key, value in values.items():
        *path, name = key.split("__")
        target = config
        for part in path:
            target = getattr(target, part, None)
        if target is None or not hasattr(target, name):
            missing.append(key)
            continue
        setattr(target, name, value)
    if missing:
        logger.info("torch %s has no %s in %s", torch.__version__, ", ".join(missing), module)
    return missing


def config_value(module: str, key: str, default: Any = None) -> Any:
    """A key of a torch config module (``__`` for a dot), or ``default`` where it has none."""
    target = _config(module)
    for part in key.split("__"):
        if target is None or not hasattr(target, part):
            return default
        target = getattr(target, part)
    return target


def _patch(module: str, key: str, value: Any) -> contextlib.AbstractContextManager:
    config = _config(module)
    if config is None or not hasattr(config, key):
        return contextlib.nullcontext()
    return config.patch(**{key: value})


def trace_autograd_ops() -> contextlib.AbstractContextManager:
    """Dynamo traces ``torch.autograd.grad`` into the graph (``torch._dynamo.config``'s
    ``trace_autograd_ops``); where torch lacks the key, nothing changes (a compiled update
    then breaks its graph at the gradient: slower, the same numbers)."""
    return _patch("torch._dynamo.config", "trace_autograd_ops", True)


def own_size_symbols() -> contextlib.AbstractContextManager:
    """Each input size gets a symbol of its own while tracing
    (``torch.fx.experimental._config``'s ``use_duck_shape`` off); nothing where torch lacks it."""
    return _patch("torch.fx.experimental._config", "use_duck_shape", False)


def mode_options(mode: str, dynamic: bool | None) -> dict[str, Any]:
    """``torch._inductor.list_mode_options``: a ``torch.compile`` mode's inductor options;
    none where torch lacks it (the default mode's)."""
    list_options = _attribute("torch._inductor", "list_mode_options")
    return {} if list_options is None else dict(list_options(mode, dynamic))


def default_inductor_cache_dir() -> str:
    """``torch._inductor.runtime.cache_dir_utils.default_cache_dir``: inductor's own cache
    folder; where torch lacks it, its documented default under the temporary folder."""
    default = _attribute("torch._inductor.runtime.cache_dir_utils", "default_cache_dir")
    if default is not None:
        return default()
    user = "".join(c if c.isalnum() else "_" for c in getpass.getuser())
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


def valid_vec_isa_list() -> list[Any]:
    """``torch._inductor.cpu_vec_isa.valid_vec_isa_list``: the SIMD instruction sets
    inductor may use here; empty where torch lacks it (inductor then checks by itself)."""
    valid = _attribute("torch._inductor.cpu_vec_isa", "valid_vec_isa_list")
    return [] if valid is None else list(valid())


# ------------------------------------------------------------------------ report
SYMBOLS: dict[str, Callable[[], bool]] = {
    **{
        f"torch._foreach_{name}": (lambda name=name: hasattr(torch, f"_foreach_{name}"))
        for name in FOREACH_OPS
    },
    "torch._fused_adam_": fused_adam_available,
    "torch.optim.optimizer._global_optimizer_pre_hooks": lambda: (
        _attribute("torch.optim.optimizer", "_global_optimizer_pre_hooks") is not None
    ),
    "torch.optim.optimizer._global_optimizer_post_hooks": lambda: (
        _attribute("torch.optim.optimizer", "_global_optimizer_post_hooks") is not None
    ),
    "torch.utils._pytree.tree_flatten": lambda: (
        _attribute("torch.utils._pytree", "tree_flatten") is not None
    ),
    "torch.utils._pytree.tree_unflatten": lambda: (
        _attribute("torch.utils._pytree", "tree_unflatten") is not None
    ),
    "torch.utils._pytree.SUPPORTED_NODES": lambda: (
        _attribute("torch.utils._pytree", "SUPPORTED_NODES") is not None
    ),
    "torch._dynamo.config.trace_autograd_ops": lambda: hasattr(
        _config("torch._dynamo.config"), "trace_autograd_ops"
    ),
    "torch.fx.experimental._config.use_duck_shape": lambda: hasattr(
        _config("torch.fx.experimental._config"), "use_duck_shape"
    ),
    "torch._inductor.list_mode_options": lambda: (
        _attribute("torch._inductor", "list_mode_options") is not None
    ),
    "torch._inductor.runtime.cache_dir_utils.default_cache_dir": lambda: (
        _attribute("torch._inductor.runtime.cache_dir_utils", "default_cache_dir") is not None
    ),
    "torch._inductor.cpu_vec_isa.valid_vec_isa_list": lambda: (
        _attribute("torch._inductor.cpu_vec_isa", "valid_vec_isa_list") is not None
    ),
    **{
        f"torch._inductor.config.{key.replace('__', '.')}": (
            lambda key=key: config_value("torch._inductor.config", key, _MISSING) is not _MISSING
        )
        for key in (
            "fx_graph_cache",
            "fallback_random",
            "size_asserts",
            "cpp__use_decompose_tanh",
            "cpp__vec_isa_ok",
            "cpp__cxx",
        )
    },
    "torch._functorch.config.enable_autograd_cache": lambda: hasattr(
        _config("torch._functorch.config"), "enable_autograd_cache"
    ),
}
"""Every private symbol of this module, with whether the installed torch has it."""

_MISSING = object()


def available() -> dict[str, bool]:
    """Which of `SYMBOLS` the installed torch has."""
    return {name: bool(has()) for name, has in SYMBOLS.items()}


def report() -> str:
    """Which of `SYMBOLS` the installed torch has, a line each (CI prints it)."""
    found = available()
    lines = [f"torch {torch.__version__}: {sum(found.values())} of {len(found)} private symbols"]
    lines += [f"  {'ok     ' if present else 'MISSING'} {name}" for name, present in found.items()]
    return "\n".join(lines)
