"""cadence's own C++ kernels, built on this machine at first use.

One kernel so far: ``torch.ops.cadence_native.mm`` (``kernels/matmul_avx512.cpp``), a
float32 matrix multiply with AVX-512 for the mid-sized multiplies of small networks, which
MKL runs with AVX2 on AMD processors (see `cadence.accel.cpu_matmul`).

It is compiled with ``torch.utils.cpp_extension`` (the C++ compiler that ``torch.compile``
also needs) into ``<compile cache>/native`` (``$CADENCE_COMPILE_CACHE``, else
``~/.cache/cadence/torch-compile``): about 13 s on two cores the first time on a machine
(logged), then a library load. A lock among processes lets a sweep's runs share one build.
Where the CPU lacks AVX-512, or nothing can build it, `load_native_kernels` says why and
cadence keeps to ATen and oneDNN (`cadence.accel.cpu_matmul.avx512_unavailable`, which
calls it once per process).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import time
from pathlib import Path

import torch

from cadence.machine_record import compile_cache_dir, exclusive

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels") / "matmul_avx512.cpp"


class NativeKernelsUnavailable(RuntimeError):
    """The kernels cannot run here; the message says why."""


FLAGS = ("-O3", "-mavx512f", "-mfma", "-fopenmp")  # OpenMP: at::parallel_for's threads


def build_directory() -> Path:
    """Where the kernels build and load from: ``<compile cache>/native/<key>``, keyed by
    the source, the torch version and `FLAGS`."""
    key = [SOURCE.read_bytes(), torch.__version__.encode(), " ".join(FLAGS).encode()]
    return compile_cache_dir() / "native" / hashlib.sha256(b"\0".join(key)).hexdigest()[:16]


def load_native_kernels() -> None:
    """Builds (the first time on a machine) and loads ``torch.ops.cadence_native``.

    Raises:
        NativeKernelsUnavailable: the CPU has no AVX-512, or the build failed (the
            compiler's last lines are in the message).
    """
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "AVX512":  # ATen's own kernel choice for this CPU
        raise NativeKernelsUnavailable(
            f"this CPU has no AVX-512 (torch reports {capability!r}), which the kernel needs"
        )
    from torch.utils import cpp_extension

    directory = build_directory()
    directory.mkdir(parents=True, exist_ok=True)
    name = f"cadence_native_{directory.name}"
    log = io.StringIO()
    with exclusive(directory / "cadence.lock"):
        # torch's own lock file, which a build killed outright (SIGKILL, out of memory)
        # leaves behind and every later load would wait on forever; a live build holds
        # the lock above.
        (directory / "lock").unlink(missing_ok=True)
        building = not (directory / f"{name}.so").exists()
        if building:  # the one wait a machine pays, said before it starts
            logger.info(
                "building cadence's AVX-512 matmul kernel in %s (once per machine)", directory
            )
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                cpp_extension.load(
                    name=name,
                    sources=[str(SOURCE)],
                    extra_cflags=list(FLAGS),
                    extra_ldflags=["-fopenmp"],
                    build_directory=str(directory),
                    is_python_module=False,
                )
        except Exception as error:  # a missing compiler, a failed build: say what it said
            tail = "\n".join((log.getvalue() + str(error)).strip().splitlines()[-15:])
            raise NativeKernelsUnavailable(
                f"building {SOURCE.name} in {directory} failed (a C++ compiler is needed, as "
                f"for torch.compile):\n{tail}"
            ) from error
    if building:
        logger.info("built the kernel in %.1f s", time.perf_counter() - start)
