"""The CPU matrix multiplies of linear layers, run by ATen's BLAS, by oneDNN or by cadence's
own AVX-512 kernel, whichever is fastest here.

PyTorch's CPU builds multiply float32 matrices with Intel's MKL. On AMD processors MKL
takes its AVX2 code path even where the core has AVX-512, so a network's matmuls run at
half the arithmetic the machine has: on a 2-core AMD EPYC (Zen 5), 110
GFLOP/s against 240 for oneDNN (the library torch ships for its CPU convolutions), and a
256-wide SAC update's forward and backward multiplies take 1.9x as long. oneDNN costs
about 10 us per call, though, as much as a 256 x 64 by 64 x 64 multiply (PPO's layers);
cadence's own kernel (`cadence.accel.native`, ``torch.ops.cadence_native.mm``) runs that
one in about 10 us where MKL takes 22. On Intel processors all are about equal.

`set_cpu_matmul` picks the backend for the layers of `cadence.networks.linear` (`Linear`,
which `MLP` uses, `GRUCell`) and `EnsembleLinear`, by installing its `BackendRoute` as their
matmul route (none for ``aten``):

- ``aten``: ``torch.nn.functional.linear`` and ``torch.bmm``, as plain PyTorch;
- ``onednn``: multiplies with at least `ONEDNN_MIN_MACS` multiply-adds per matrix go to
  oneDNN (`onednn_matmul`, a custom op with its own backward, so eager and compiled
  graphs both use it); smaller ones, where oneDNN's fixed cost per call outweighs its
  speed (a policy acting on 8 environments), stay with ATen;
- ``avx512``: a layer's multiplies from `AVX512_MIN_MACS` multiply-adds go to cadence's
  kernel (`avx512_matmul`, forward and backward, eager and compiled), an ensemble's as
  ``onednn`` sends them; built on this machine at first use (a C++ compiler and an
  AVX-512 CPU are needed);
- ``auto``: times them on a 256 x 256 x 256 multiply and its two backward multiplies
  (`measure_cpu_matmul`), and the kernel also at 256 x 64 x 64, and leaves ATen for the
  fastest when it is at least `MIN_SPEEDUP` faster. Measured once per machine and thread
  count, by the first process that needs it, and recorded in the compile cache
  (`MACHINE_RECORD`): later processes read it there.

Only CPU float32 tensors are affected; CUDA tensors always use ATen. The choice is
process-wide, and children started afterwards inherit it (``CADENCE_CPU_MATMUL``). The
backends round differently, so a run's numbers depend on the choice: the trainer records
it (``trainer.cpu_matmul``, in the run's ``placement.json``) and a resume reuses it, and
``auto`` reads the machine's record rather than measuring again, so that a seed gives the
same numbers in every run on a machine however busy it is.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from cadence.accel.torch_private import onednn_linear, onednn_linear_available
from cadence.machine_record import machine_key, record_directory, recorded
from cadence.networks.linear import CPU_MATMUL_ENV_VAR, set_matmul_route

logger = logging.getLogger(__name__)

CPU_MATMULS = ("auto", "aten", "onednn", "avx512")

ENV_VAR = CPU_MATMUL_ENV_VAR
"""Holds the process's resolved backend (``aten``, ``onednn`` or ``avx512``), for its child
processes."""

ONEDNN_MIN_MACS = 1 << 21
"""A multiply goes to oneDNN from this many multiply-adds per matrix (rows x in x out), e.g.
256 x 64 x 128. Measured on the AMD machine above (forward and both backward multiplies):
256 x 64 x 64 ran 0.74x as fast as ATen, 256 x 64 x 256 1.36x, 256 x 256 x 256 1.9x;
8 x 256 x 256 0.55x."""

AVX512_MIN_MACS = 1 << 17
"""Under ``avx512``, a layer's multiplies go to the kernel from this many multiply-adds (256
x 64 x 8). Below it the custom op's call costs more than it saves: 8 x 64 x 64 (acting on
8 envs) takes 3.9 us against ATen's 3.3."""

MIN_SPEEDUP = 1.25
"""``auto`` leaves ATen for another backend when ATen takes at least this many times as
long."""

_MIN_MACS = {"onednn": ONEDNN_MIN_MACS, "avx512": AVX512_MIN_MACS}
"""A layer's multiplies leave ATen from this size, by backend."""

_backend: str | None = None


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear kernel."""
    return onednn_linear_available()


def set_cpu_matmul(name: str) -> str:
    """Sets the backend of CPU float32 matmuls: ``aten``, ``onednn``, ``avx512`` or
    ``auto`` (measured).

    Returns:
        The backend in effect: ``aten``, ``onednn`` or ``avx512``.

    Raises:
        ValueError: an unknown name, ``onednn`` on a torch build without it, or ``avx512``
            where the kernel cannot run (the reason is in the message).
    """
    global _backend
    if name not in CPU_MATMULS:
        raise ValueError(f"cpu_matmul={name!r} is not one of {', '.join(CPU_MATMULS)}")
    if name == "onednn" and not onednn_available():
        raise ValueError(
            f"cpu_matmul=onednn but this torch build ({torch.__version__}) has no oneDNN "
            "(torch.backends.mkldnn.is_available() is False); use aten or auto"
        )
    if name == "avx512" and (reason := avx512_unavailable()) is not None:
        raise ValueError(f"cpu_matmul=avx512 cannot run here: {reason}; use aten or auto")
    if name == "auto":
        name = _fastest_backend()
    _backend = name
    set_matmul_route(BackendRoute(name) if name in _MIN_MACS else None)
    os.environ[ENV_VAR] = name
    return name


def inherit_cpu_matmul() -> str:
    """Sets and returns the backend this process or its parent decided
    (``CADENCE_CPU_MATMUL``), measuring where none did."""
    inherited = os.environ.get(ENV_VAR, "auto")
    return set_cpu_matmul(inherited if inherited in CPU_MATMULS else "auto")


def cpu_matmul() -> str:
    """The backend in effect (``aten``, ``onednn`` or ``avx512``), decided on first use
    (`inherit_cpu_matmul`)."""
    return _backend if _backend is not None else inherit_cpu_matmul()


@contextlib.contextmanager
def using_cpu_matmul(name: str) -> Iterator[str]:
    """Runs the block with another backend (e.g. ``aten`` for an export, which must not
    contain the custom op), restoring the previous one after."""
    previous = cpu_matmul()
    try:
        yield set_cpu_matmul(name)
    finally:
        set_cpu_matmul(previous)


CUBE = (256, 256, 256)
"""`measure_cpu_matmul`'s default shape (rows, inputs, outputs): a 256-wide SAC layer."""

NARROW = (256, 64, 64)
"""The second shape ``auto`` times the kernel at: a 64-wide PPO layer, where oneDNN loses."""


def measure_cpu_matmul(shape: tuple[int, int, int] = CUBE, repeats: int = 10) -> dict[str, float]:
    """The median microseconds of a layer's three multiplies at ``shape`` (rows, inputs,
    outputs: ``x @ w``, ``g @ w.T``, ``x.T @ g``), by backend, at the current thread count.

    Uses no random numbers. ``onednn`` where this torch has oneDNN, ``avx512`` where the
    kernel runs (building it the first time on a machine).
    """
    rows, inputs, outputs = shape
    x = torch.linspace(-1, 1, rows * inputs).reshape(rows, inputs)
    w = torch.linspace(1, -1, inputs * outputs).reshape(inputs, outputs)
    g = torch.linspace(-1, 1, rows * outputs).reshape(outputs, rows).t()
    multiplies = {"aten": lambda a, b: a @ b}
    if onednn_available():
        multiplies["onednn"] = lambda a, b: _onednn_2d(a, b, None)
    if avx512_unavailable() is None:
        multiplies["avx512"] = lambda a, b: torch.ops.cadence_native.mm(a, b, None)
    times = {}
    with torch.no_grad():
        for name, multiply in multiplies.items():
            samples = []
            for index in range(repeats + 3):
                start = time.perf_counter()
                multiply(x, w), multiply(g, w.t()), multiply(x.t(), g)
                if index >= 3:
                    samples.append(time.perf_counter() - start)
            times[name] = statistics.median(samples) * 1e6
    return times


def _fastest_backend() -> str:
    """``auto``'s choice for this machine and thread count: measured by the first process
    that needs it, which records it in the compile cache (`MACHINE_RECORD`); every later
    process reads it there (`cadence.machine_record`).

    The backends round differently, so the choice decides a run's numbers. Measured in
    every process, it followed the machine's load: with another run beside it, a seed's
    PPO run took ATen where it took the kernel alone, and reached another return. Read
    from the record, a seed gives the same numbers in every run on the machine, sweeps
    and test sessions included. Delete the record to measure again.
    """
    return recorded(MACHINE_RECORD, record_key(), _measured_fastest_backend, _usable)


MACHINE_RECORD = "cpu_matmul.json"
"""``auto``'s choices by machine and thread count, in the compile cache folder."""


def record_key() -> str:
    """What ``auto``'s measurement depends on, and what its choice is recorded under in
    `machine_record`: the processor, torch and the thread count."""
    return f"{machine_key()} torch {torch.__version__} threads {torch.get_num_threads()}"


def machine_record() -> Path:
    """Where ``auto``'s choices are recorded: `MACHINE_RECORD` in the compile cache folder
    (``$CADENCE_COMPILE_CACHE``, else ``~/.cache/cadence/torch-compile``)."""
    return record_directory() / MACHINE_RECORD


def _usable(backend: Any) -> bool:
    """Whether this process can run a recorded ``backend`` (the kernel needs to load)."""
    if backend == "avx512":
        return avx512_unavailable() is None
    return backend == "aten" or (backend == "onednn" and onednn_available())


def _measured_fastest_backend() -> str:
    """ATen unless oneDNN or the kernel is `MIN_SPEEDUP` faster on a `CUBE`; the kernel
    over oneDNN when it also is on a `NARROW` layer."""
    cube = measure_cpu_matmul()

    def faster(times: dict[str, float], name: str) -> bool:
        return name in times and times["aten"] >= MIN_SPEEDUP * times[name]

    if faster(cube, "avx512") and faster(measure_cpu_matmul(NARROW), "avx512"):
        return "avx512"
    return "onednn" if faster(cube, "onednn") else "aten"


def _routed(x: torch.Tensor) -> str | None:
    """The backend ``x``'s multiplies may leave ATen for (then their size decides), or
    None. Reads the backend the layers decided when they were built, before any size
    arithmetic: this runs for every layer of every acting step."""
    if _backend in _MIN_MACS and x.dtype == torch.float32 and x.device.type == "cpu":
        return _backend
    return None


def _onednn_2d(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``a @ b + bias`` for ``[N, K]``, ``[K, M]``, ``[M]`` by oneDNN (which takes the
    weight as ``[M, K]``; transposed views go in without a copy)."""
    return onednn_linear(a, b.t(), bias)


@torch.library.custom_op("cadence::onednn_matmul", mutates_args=())
def onednn_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``a @ b + bias`` by oneDNN: ``[N, K] @ [K, M] + [M]``, or per member of an ensemble,
    ``[E, N, K] @ [E, K, M] + [E, 1, M]``. CPU float32; differentiable in all three."""
    if a.dim() == 2:
        return _onednn_2d(a, b, bias)
    members = [
        _onednn_2d(a[e], b[e], None if bias is None else bias[e].reshape(-1))
        for e in range(a.shape[0])
    ]
    return torch.stack(members)


@onednn_matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _save_for_backward(ctx, inputs, output) -> None:
    a, b, bias = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape = None if bias is None else bias.shape


def _backward(ctx, grad: torch.Tensor):
    a, b = ctx.saved_tensors
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_a = onednn_matmul(grad, b.transpose(-1, -2), None)
    if ctx.needs_input_grad[1]:
        grad_b = onednn_matmul(a.transpose(-1, -2), grad, None)
    if ctx.bias_shape is not None and ctx.needs_input_grad[2]:
        grad_bias = grad.sum(-2).reshape(ctx.bias_shape)
    return grad_a, grad_b, grad_bias


onednn_matmul.register_autograd(_backward, setup_context=_save_for_backward)


def _matmul_flops(a_shape, b_shape, *args, **kwargs) -> int:
    """For ``torch.utils.flop_counter.FlopCounterMode``, which counts ATen's matmuls. Each
    op registers this function itself: `register_flop_formula` returns its shape-taking
    wrapper, which registered again would be wrapped twice."""
    return 2 * math.prod(a_shape) * b_shape[-1]


register_flop_formula(torch.ops.cadence.onednn_matmul)(_matmul_flops)


@functools.cache
def avx512_unavailable() -> str | None:
    """None where cadence's AVX-512 kernel runs (built, loaded and registered at the first
    call of the process), else why not."""
    from cadence.accel.native import NativeKernelsUnavailable, load_native_kernels

    try:
        load_native_kernels()
    except NativeKernelsUnavailable as error:
        return str(error)
    _register_avx512()
    return None


def avx512_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``a @ b + bias`` (``[N, K] @ [K, M] + [M]``, CPU float32) by cadence's AVX-512
    kernel, differentiable in all three; `avx512_unavailable` must have returned None."""
    return torch.ops.cadence_native.mm(a, b, bias)


def _register_avx512() -> None:
    """The kernel's shape function, for compiled graphs (its backward is in C++), and its
    FLOP count."""
    torch.library.register_fake("cadence_native::mm")(
        lambda a, b, bias: a.new_empty((a.shape[0], b.shape[1]))
    )
    register_flop_formula(torch.ops.cadence_native.mm)(_matmul_flops)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (``x`` ``[*B, in]``, ``weight`` ``[out, in]``) on the
    backend `cpu_matmul` picks for its size."""
    backend = _routed(x)
    if backend is None:
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    if rows * in_features * out_features < _MIN_MACS[backend]:
        return F.linear(x, weight, bias)
    multiply = avx512_matmul if backend == "avx512" else onednn_matmul
    flat = multiply(x.reshape(rows, in_features), weight.t(), bias)
    return flat.reshape(*x.shape[:-1], out_features)


def batched_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``x @ weight + bias`` per ensemble member (``[E, N, K] @ [E, K, M] + [E, 1, M]``) by
    oneDNN when `cpu_matmul` picks it or the kernel (which multiplies one matrix at a time)
    for the size, else None (the caller's ATen path)."""
    if _routed(x) is None or x.shape[1] * x.shape[2] * weight.shape[2] < ONEDNN_MIN_MACS:
        return None
    if _backend == "avx512" and not onednn_available():  # a torch without oneDNN: ATen's
        return None
    return onednn_matmul(x, weight, bias)


class BackendRoute:
    """The `cadence.networks.linear.MatmulRoute` of a backend other than ATen: what
    `set_cpu_matmul` installs for the layers.

    Args:
        backend: ``onednn`` or ``avx512``.
    """

    def __init__(self, backend: str):
        self.backend = backend
        self.min_macs = _MIN_MACS[backend]

    def takes(self, x: torch.Tensor) -> bool:
        """Whether ``x``'s multiplies may leave ATen: CPU float32 under this backend."""
        return _routed(x) is not None

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """`linear`."""
        return linear(x, weight, bias)

    def batched(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor | None:
        """`batched_linear`."""
        return batched_linear(x, weight, bias)

    def __repr__(self) -> str:
        return f"BackendRoute({self.backend!r})"
