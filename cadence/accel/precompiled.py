"""Compiled updates saved whole: a warm start loads the traced graph instead of tracing it.

PyTorch's compile caches keep a graph's kernels, but every process still traces the Python
update with dynamo to find out which graph it is: in a warm start of compiled SAC on
Pendulum that trace took about a second of 2.7 s. `load_or_compile` saves the traced result
as well (``torch.compile(...).aot_compile``: the graph, its guards and the bytecode that
calls it) and a later process loads it, checks its guards against the first call's inputs
and calls it directly.

What may load, and when:

- the compiled function is a method of an ``nn.Module`` (an algorithm's update, a
  collector's unroll steps), which is kept out of the file and bound again at load;
  anything else compiles as usual;
- the file is found by the call's signature (`CompiledWithFallback.signature`), the
  method's class and name, its module's tensor shapes and repr, the compile mode and the
  torch version; several may share one name (e.g. configs that differ in a hyperparameter the
  graph holds as a constant): the newest whose guards pass is taken;
- every module whose code the trace went through (cadence's, a user's subclass, torch's)
  must read as it did at save time, or the file is skipped;
- a file that does not load is skipped, a failure to save only logs.

Guards on module-level globals are not saved (PyTorch's AOT compile leaves them out): the
ones cadence's updates read are fixed by their source, which is checked, except the CPU
matmul backend, which is part of the signature.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import logging
import os
import re
import uuid
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import torch

from cadence.accel.torch_private import trace_autograd_ops
from cadence.machine_record import machine

logger = logging.getLogger(__name__)

MAX_FILES_PER_NAME = 4
"""Saved graphs kept per file name (configs whose graphs differ only in what the guards
check, e.g. a Python-number hyperparameter); the oldest beyond it are removed when another
is saved. A start tries them newest first, each load costing a fraction of a second."""


def precompilable(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` can be saved whole: a method of an ``nn.Module``, on a torch with AOT
    compile."""
    return inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module) and saves_whole()


@functools.cache
def saves_whole() -> bool:
    """Whether this torch saves and loads compiled graphs whole (``aot_compile`` and
    ``load_compiled_function``; torch 2.11 has the second only)."""
    loads = hasattr(torch.compiler, "load_compiled_function")
    return loads and hasattr(torch.compile(lambda x: x), "aot_compile")


class Precompiled:
    """A loaded or freshly compiled graph of a module's method: call it like the method."""

    def __init__(self, compiled: Any, owner: torch.nn.Module):
        self.compiled = compiled
        self.owner = owner
        self.run = compiled.fn

    def check(self, *args: Any) -> bool:
        """Whether the graph's guards pass for these inputs (and the owner's state)."""
        try:
            return bool(self.compiled.guard_check(self.owner, *args))
        except Exception:  # noqa: BLE001 - e.g. an attribute the guards read is gone
            return False

    def __call__(self, *args: Any) -> Any:
        return self.run(self.owner, *args)


def load_or_compile(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    signature: Hashable,
    directory: Path,
    compile_kwargs: dict[str, Any],
) -> Precompiled:
    """The graph of the method ``fn`` for inputs like ``args``: loaded from ``directory``
    if a saved one fits, else traced and compiled (``torch.compile(fn, fullgraph=True,
    **compile_kwargs)``) and saved there; None where it cannot be compiled whole (a graph
    break, a guard that does not save), which a marker file remembers so that later
    starts do not trace in vain (the caller then compiles with ``torch.compile``)."""
    stem = file_stem(fn, signature, compile_kwargs)
    unsupported = directory / f"{stem}.unsupported"
    if unsupported.exists():
        return None
    files = sorted(directory.glob(f"{stem}-*.bin"), key=_mtime, reverse=True)
    for path in files:
        loaded = _load(path, fn)
        if loaded is not None and loaded.check(*args):
            return loaded
    try:
        compiled = torch.compile(fn, fullgraph=True, **compile_kwargs)
        with trace_autograd_ops():
            result = Precompiled(compiled.aot_compile((args, {})), fn.__self__)
    except Exception as error:  # noqa: BLE001 - torch.compile's own way follows
        logger.info("%s is not compiled whole (%s)", fn.__qualname__, error)
        with contextlib.suppress(OSError):
            directory.mkdir(parents=True, exist_ok=True)
            unsupported.touch()
        return None
    # A name of its own: an object's id is reused once it is freed, and a second graph of
    # the name saved by one process would overwrite the first one's file.
    path = directory / f"{stem}-{os.getpid()}-{uuid.uuid4().hex[:12]}.bin"
    if not _save(result, path):
        return result
    if _loads_back(path, fn, args):
        for old in files[MAX_FILES_PER_NAME - 1 :]:  # room for it among its name's files
            old.unlink(missing_ok=True)
    else:
        # E.g. an object that pickles without the state it needs to load (an optimizer
        # in a plain dict beside the traced modules): a later start would try in vain.
        logger.info("%s does not load back; later starts compile it the usual way", path.name)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            unsupported.touch()
    return result


def file_stem(fn: Callable[..., Any], signature: Hashable, compile_kwargs: dict) -> str:
    """The saved graphs' name: the method, its module's tensors (names, shapes, dtypes,
    devices: a sweep over network sizes does not try each other's files) and structure
    (its repr, object addresses left out: e.g. which activation), the call's signature,
    the compile options, the torch version and the processor."""
    owner = fn.__self__
    tensors = [
        (name, tuple(t.shape), t.dtype, t.device)
        for name, t in [*owner.named_parameters(), *owner.named_buffers()]
    ]
    key = "|".join(
        (
            torch.__version__,
            machine(),
            f"{type(owner).__module__}.{type(owner).__qualname__}.{fn.__name__}",
            repr(tensors),
            re.sub(r"0x[0-9a-fA-F]+", "0x", repr(owner)),
            repr(sorted(compile_kwargs.items())),
            repr(signature),
        )
    )
    return f"{fn.__name__.strip('_')}-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


@functools.cache
def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _load(path: Path, fn: Callable[..., Any]) -> Precompiled | None:
    """The graph saved at ``path``, or None where it does not load or its sources changed."""
    owner, globals_of = fn.__self__, fn.__func__.__globals__
    try:
        with open(path, "rb") as file:
            compiled = torch.compiler.load_compiled_function(
                file, f_globals=globals_of, external_data={"owner": owner}
            )
        if not _sources_unchanged(compiled):
            logger.info("%s: the code it was traced from changed; compiling anew", path.name)
            return None
        return Precompiled(compiled, owner)
    except Exception as error:  # noqa: BLE001 - a stale or foreign file: compile instead
        logger.info("%s did not load (%s); compiling anew", path.name, error)
        return None


def _sources_unchanged(compiled: Any) -> bool:
    """Whether every module the graph was traced through reads as it did at save time."""
    for source in compiled.source_info().inlined_sources:
        try:
            module = importlib.import_module(source.module)
            if inspect.getsource(module) != source.content:
                return False
        except (ImportError, OSError, TypeError):
            return False
    return True


def _save(result: Precompiled, path: Path) -> bool:
    """Writes the graph (atomically, so runs sharing the folder never read half a file);
    whether it was written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        result.compiled.save_compiled_function(str(path), external_data={"owner": result.owner})
    except Exception as error:  # noqa: BLE001 - only a shortcut for the next start
        logger.info("could not save the compiled graph (%s); the next start traces it", error)
        return False
    return True


def _loads_back(path: Path, fn: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether the graph just saved at ``path`` loads and takes the inputs it was traced
    for, as a later start would load it (a fraction of a second, on a cold compile)."""
    loaded = _load(path, fn)
    return loaded is not None and loaded.check(*args)
