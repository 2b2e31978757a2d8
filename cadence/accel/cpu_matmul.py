"""The CPU matrix multiplies of linear layers, run by ATen's BLAS or by oneDNN, whichever is
fastest on the user's machine.

PyTorch's CPU builds multiply float32 matrices with Intel's MKL. On AMD processors MKL
takes its AVX2 code path even where the core has AVX-512, so a network's matmuls run at
half the arithmetic the machine has: on a 2-core AMD EPYC (Zen 5), 110
GFLOP/s against 240 for oneDNN (the library torch ships for its CPU convolutions), and a
256-wide SAC update's forward and backward multiplies take 1.9x as long. oneDNN costs
about 10 us per call, though, as much as a 256 x 64 by 64 x 64 multiply (PPO's layers).
On Intel processors both are about equal.

`set_cpu_matmul` picks the backend for the layers of `cadence.networks.linear` (`Linear`,
which `MLP` uses, `GRUCell`) and `EnsembleLinear`, by installing its `BackendRoute` as their
matmul route (none for ``aten``):

- ``aten``: ``torch.nn.functional.linear`` and ``torch.bmm``, as plain PyTorch;
- ``onednn``: multiplies with at least `ONEDNN_MIN_MACS` multiply-adds per matrix go to
  oneDNN (`onednn_matmul`, a custom op with its own backward, so eager and compiled
  graphs both use it); smaller ones, where oneDNN's fixed cost per call outweighs its
  speed (a policy acting on 8 environments), stay with ATen;
- ``auto``: ATen, unless oneDNN can win here (`onednn_can_win`: a processor with AVX-512
  whose MKL runs AVX2 code, as on AMD processors); there it times both on a 256 x 256 x
  256 multiply and its two backward multiplies (`measure_cpu_matmul`), and leaves ATen for
  oneDNN when it is at least `MIN_SPEEDUP` faster. Decided once per machine and thread
  count, by the first process that needs it, and recorded in the compile cache
  (`MACHINE_RECORD`): later processes read it there.

Only CPU float32 tensors are affected; CUDA tensors always use ATen. The choice is
process-wide, and children started afterwards inherit it (``CADENCE_CPU_MATMUL``). The
backends round differently, so a run's numbers depend on the choice: the trainer records
it (``trainer.cpu_matmul``, in the run's ``placement.json``) and a resume reuses it, and
``auto`` reads the machine's record rather than measuring again, so that a seed gives the
same numbers in every run on a machine however busy it is.

cadence's own AVX-512 matmul kernel (``avx512``) was removed: no whole run gained the 1.3x
that kept it (docs/compile.md). Asking for it (`set_cpu_matmul`, ``CADENCE_CPU_MATMUL``)
fails with `REMOVED_AVX512`; a record of it is decided again (the machine's is measured
anew, a run's resumes on ``auto``'s choice with a warning, in the trainer's placement).
"""

from __future__ import annotations

import contextlib
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
from cadence.machine_record import cpu_vendor, machine_key, record_directory, recorded
from cadence.networks.linear import CPU_MATMUL_ENV_VAR, set_matmul_route

logger = logging.getLogger(__name__)

CPU_MATMULS = ("auto", "aten", "onednn")

REMOVED_AVX512 = (
    "cadence's AVX-512 matmul kernel (cpu_matmul=avx512) was removed, as no whole run gained "
    "1.3x from it (docs/compile.md); use auto, aten or onednn"
)

ENV_VAR = CPU_MATMUL_ENV_VAR
"""Holds the process's resolved backend (``aten`` or ``onednn``), for its child processes."""

ONEDNN_MIN_MACS = 1 << 21
"""A multiply goes to oneDNN from this many multiply-adds per matrix (rows x in x out), e.g.
256 x 64 x 128. Measured on the AMD machine above (forward and both backward multiplies):
256 x 64 x 64 ran 0.74x as fast as ATen, 256 x 64 x 256 1.36x, 256 x 256 x 256 1.9x;
8 x 256 x 256 0.55x."""

MIN_SPEEDUP = 1.25
"""``auto`` leaves ATen for another backend when ATen takes at least this many times as
long."""

_backend: str | None = None


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear kernel."""
    return onednn_linear_available()


def set_cpu_matmul(name: str) -> str:
    """Sets the backend of CPU float32 matmuls: ``aten``, ``onednn`` or ``auto`` (measured).

    Returns:
        The backend in effect: ``aten`` or ``onednn``.

    Raises:
        ValueError: an unknown name, the removed ``avx512`` (`REMOVED_AVX512`), or
            ``onednn`` on a torch build without it.
    """
    global _backend
    if name == "avx512":
        raise ValueError(REMOVED_AVX512)
    if name not in CPU_MATMULS:
        raise ValueError(f"cpu_matmul={name!r} is not one of {', '.join(CPU_MATMULS)}")
    if name == "onednn" and not onednn_available():
        raise ValueError(
            f"cpu_matmul=onednn but this torch build ({torch.__version__}) has no oneDNN "
            "(torch.backends.mkldnn.is_available() is False); use aten or auto"
        )
    if name == "auto":
        name = _fastest_backend()
    _backend = name
    set_matmul_route(BackendRoute(name) if name == "onednn" else None)
    os.environ[ENV_VAR] = name
    return name


def inherit_cpu_matmul() -> str:
    """Sets and returns the backend this process or its parent decided
    (``CADENCE_CPU_MATMUL``), measuring where none did.

    Raises:
        ValueError: ``CADENCE_CPU_MATMUL`` holds the removed ``avx512`` (`REMOVED_AVX512`).
    """
    inherited = os.environ.get(ENV_VAR, "auto")
    if inherited == "avx512":  # set by hand, or by a process of a cadence that had it
        raise ValueError(f"{ENV_VAR}=avx512 in the environment: {REMOVED_AVX512}")
    return set_cpu_matmul(inherited if inherited in CPU_MATMULS else "auto")


def cpu_matmul() -> str:
    """The backend in effect (``aten`` or ``onednn``), decided on first use
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


def measure_cpu_matmul(shape: tuple[int, int, int] = CUBE, repeats: int = 10) -> dict[str, float]:
    """The median microseconds of a layer's three multiplies at ``shape`` (rows, inputs,
    outputs: ``x @ w``, ``g @ w.T``, ``x.T @ g``), by backend, at the current thread count.

    Uses no random numbers. ``onednn`` where this torch has oneDNN.
    """
    rows, inputs, outputs = shape
    x = torch.linspace(-1, 1, rows * inputs).reshape(rows, inputs)
    w = torch.linspace(1, -1, inputs * outputs).reshape(inputs, outputs)
    g = torch.linspace(-1, 1, rows * outputs).reshape(outputs, rows).t()
    multiplies = {"aten": lambda a, b: a @ b}
    if onednn_available():
        multiplies["onednn"] = lambda a, b: _onednn_2d(a, b, None)
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
    run took ATen where it took another backend alone, and reached another return. Read
    from the record, a seed gives the same numbers in every run on the machine, sweeps
    and test sessions included. Delete the record to measure again.
    """
    return recorded(MACHINE_RECORD, record_key(), _measured_fastest_backend, _usable)


MACHINE_RECORD = "cpu_matmul.json"
"""``auto``'s choices by machine and thread count, in the compile cache folder."""


def record_key() -> str:
    """What ``auto``'s measurement depends on, and what its choice is recorded under in
    `machine_record`: the processor, torch, the thread count (and a limit on MKL's
    instructions)."""
    limit = f" MKL {limit}" if (limit := _mkl_instructions()) else ""
    return f"{machine_key()} torch {torch.__version__} threads {torch.get_num_threads()}{limit}"


def machine_record() -> Path:
    """Where ``auto``'s choices are recorded: `MACHINE_RECORD` in the compile cache folder
    (``$CADENCE_COMPILE_CACHE``, else ``~/.cache/cadence/torch-compile``)."""
    return record_directory() / MACHINE_RECORD


def _usable(backend: Any) -> bool:
    """Whether this process can run a recorded ``backend``: not oneDNN where this torch lacks
    it, nor the removed ``avx512``, whose record is measured again."""
    return backend == "aten" or (backend == "onednn" and onednn_available())


def onednn_can_win() -> bool:
    """Whether oneDNN may multiply faster than ATen here, so that ``auto`` measures: the
    processor has AVX-512 and MKL runs narrower code on it, which it does on AMD
    processors and where ``MKL_ENABLE_INSTRUCTIONS`` holds it below AVX-512. On Intel
    processors MKL runs AVX-512 itself and the two are about equal; elsewhere torch does
    not multiply with MKL."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    return bool(_mkl_instructions()) or cpu_vendor() == "AuthenticAMD"


def _mkl_instructions() -> str:
    """``MKL_ENABLE_INSTRUCTIONS`` where it holds MKL below AVX-512, else empty."""
    limit = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper()
    return limit if limit and not limit.startswith("AVX512") else ""


def _measured_fastest_backend() -> str:
    """ATen unless oneDNN can win here and is `MIN_SPEEDUP` faster on a `CUBE`."""
    if not onednn_can_win():
        return "aten"
    times = measure_cpu_matmul()
    faster = "onednn" in times and times["aten"] >= MIN_SPEEDUP * times["onednn"]
    return "onednn" if faster else "aten"


def _routed(x: torch.Tensor) -> str | None:
    """The backend ``x``'s multiplies may leave ATen for (then their size decides), or
    None. Reads the backend the layers decided when they were built, before any size
    arithmetic: this runs for every layer of every acting step."""
    if _backend == "onednn" and x.dtype == torch.float32 and x.device.type == "cpu":
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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (``x`` ``[*B, in]``, ``weight`` ``[out, in]``) on the
    backend `cpu_matmul` picks for its size."""
    if _routed(x) is None:
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    if rows * in_features * out_features < ONEDNN_MIN_MACS:
        return F.linear(x, weight, bias)
    flat = onednn_matmul(x.reshape(rows, in_features), weight.t(), bias)
    return flat.reshape(*x.shape[:-1], out_features)


def batched_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``x @ weight + bias`` per ensemble member (``[E, N, K] @ [E, K, M] + [E, 1, M]``) by
    oneDNN when `cpu_matmul` picks it for the size, else None (the caller's ATen path)."""
    if _routed(x) is None or x.shape[1] * x.shape[2] * weight.shape[2] < ONEDNN_MIN_MACS:
        return None
    return onednn_matmul(x, weight, bias)


class BackendRoute:
    """The `cadence.networks.linear.MatmulRoute` of a backend other than ATen: what
    `set_cpu_matmul` installs for the layers.

    Args:
        backend: ``onednn``.
    """

    def __init__(self, backend: str):
        self.backend = backend
        self.min_macs = ONEDNN_MIN_MACS

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
