"""This machine's float32 matmul throughput on the CPU, and the FLOPs of one call.

A benchmark that knows the FLOPs of one update (``count_flops``) and its updates per
second can say what fraction of the machine's matmul peak it reaches::

    achieved = count_flops(update) * updates_per_s / 1e9      # GFLOP/s
    fraction = achieved / matmul_peak_gflops(threads)

The peak is the best rate over a few square sizes (small ones fit the caches, large ones
amortise the threading) and over the CPU backends cadence's layers can use
(`cadence.accel.cpu_matmul`): ``torch.mm`` (MKL) and oneDNN, the latter running AVX-512 code
on AMD processors where MKL runs AVX2. Each size is timed as the fastest of ``repeats``
calls after one untimed call, with ``threads`` intra-op threads. Run it to print the peaks::

    python benchmarks/matmul_peak.py --threads 1 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import torch

DEFAULT_SIZES = (256, 512, 1024, 2048)


def matmul_peak_gflops(
    threads: int, sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5
) -> float:
    """Best float32 ``n x n`` matmul rate over ``sizes`` and backends, GFLOP/s (2 n^3
    FLOPs a call).

    Args:
        threads: intra-op threads for the measurement; the caller's setting is restored.
        sizes: the square sizes ``n`` to try.
        repeats: timed calls per size; the fastest counts.

    Returns:
        The best rate, in GFLOP/s.
    """
    return max(matmul_peaks_gflops(threads, sizes, repeats).values())


def matmul_peaks_gflops(
    threads: int, sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5
) -> dict[str, float]:
    """`matmul_peak_gflops` per backend: ``aten`` and, where it runs, ``onednn``."""
    from cadence.accel.cpu_matmul import onednn_available, onednn_matmul

    multiplies = {"aten": lambda a, b: torch.mm(a, b)}
    if onednn_available():
        multiplies["onednn"] = lambda a, b: onednn_matmul(a, b, None)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            return {
                name: max(_mm_gflops(multiply, n, repeats) for n in sizes)
                for name, multiply in multiplies.items()
            }
    finally:
        torch.set_num_threads(previous)


def _mm_gflops(multiply: Callable, n: int, repeats: int) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    multiply(a, b)  # untimed: first-call allocation and kernel selection
    fastest = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        multiply(a, b)
        fastest = min(fastest, time.perf_counter() - begin)
    return 2 * n**3 / fastest / 1e9


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of ``fn`` (forward and backward, if it runs one), as counted by
    ``torch.utils.flop_counter.FlopCounterMode``: matmuls, convolutions and attention only,
    so elementwise work (activations, optimizer steps) is left out."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for threads in args.threads:
        peaks = matmul_peaks_gflops(threads, args.sizes, args.repeats)
        rates = ", ".join(f"{name} {rate:.1f}" for name, rate in peaks.items())
        print(f"threads={threads}: float32 matmul peak GFLOP/s: {rates}")


if __name__ == "__main__":
    main()
