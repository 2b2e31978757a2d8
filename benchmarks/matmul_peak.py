"""This machine's float32 matmul throughput on the CPU, and the FLOPs of one call.

A benchmark that knows the FLOPs of one update (``count_flops``) and its updates per
second can say what fraction of the machine's matmul peak it reaches::

    achieved = count_flops(update) * updates_per_s / 1e9      # GFLOP/s
    fraction = achieved / matmul_peak_gflops(threads)

The peak is the best rate over a few square sizes (small ones fit the caches, large ones
amortise the threading) of ``torch.mm``, torch's BLAS (MKL on x86), which multiplies
cadence's layers. Each size is timed as the fastest of ``repeats`` calls after one untimed
call, with ``threads`` intra-op threads. Run it to print the peaks::

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
    """Best float32 ``n x n`` ``torch.mm`` rate over ``sizes``, GFLOP/s (2 n^3 FLOPs a
    call).

    Args:
        threads: intra-op threads for the measurement; the caller's setting is restored.
        sizes: the square sizes ``n`` to try.
        repeats: timed calls per size; the fastest counts.

    Returns:
        The best rate, in GFLOP/s.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            return max(_mm_gflops(torch.mm, n, repeats) for n in sizes)
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
        peak = matmul_peak_gflops(threads, args.sizes, args.repeats)
        print(f"threads={threads}: float32 matmul peak (torch.mm): {peak:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
