"""Whole training runs with each CPU matmul backend: the evidence `trainer.cpu_matmul` is kept by.

Each named config trains a fixed number of env steps as a fresh ``cadence train``
process, as a user starts it, once per backend per round (``trainer.cpu_matmul=aten`` and
``onednn``; evaluation off, ``trainer.num_threads`` as given). The runs of a config share
one compile cache, warmed by an untimed run per backend first, so compiled configs load
their graphs and the timed runs measure training, not compiling. Within a round the
backends run one after another in a rotating order, so a machine whose load changes slows
them alike. The table gives each backend's median wall seconds, oneDNN's
speedup over ``aten`` (the median of the rounds' ratios) and the rounds' spread of that
ratio.

A fixed step count rather than time to solve: the backends round differently, so a seed's
runs part ways after the first update and the steps each needs to reach a bar differ by
chance, not by backend; the time per step is what the backend changes.

On an Intel processor MKL runs AVX-512 and the backends are about equal. MKL takes its
AVX2 code on AMD processors, where oneDNN's AVX-512 code runs about twice as fast;
``--mkl-avx2`` sets ``MKL_ENABLE_INSTRUCTIONS=AVX2`` for every run, which makes MKL on an
Intel processor with AVX-512 take the code path it takes on AMD ones.

    python benchmarks/cpu_matmul_runs.py --rounds 3
    python benchmarks/cpu_matmul_runs.py --mkl-avx2 --configs sac_pendulum dreamer_pendulum
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Per config: env steps per timed run, env steps of the warm-up run (past the first
# updates, so compiled configs have saved their graphs) and overrides. Enough steps that
# updates dominate, few enough for several rounds; HalfCheetah's 10,000 random steps before
# the first update are cut to 1,000.
RUNS = {
    "sac_pendulum": (4000, 1500, ()),
    "sac_halfcheetah": (3000, 1500, ("algorithm.off_policy.initial_collect_steps=1000",)),
    "ppo_cartpole": (40000, 5000, ()),
    "dreamer_pendulum": (4000, 0, ()),
    "denoised_mdp_pendulum_noisy": (3000, 0, ()),
}
BACKENDS = ("aten", "onednn")


def run_once(config: str, backend: str, steps: int, threads: int, cache: Path, env: dict) -> float:
    """Wall seconds of one ``cadence train`` of ``config`` on ``backend``."""
    with tempfile.TemporaryDirectory() as root:
        command = [
            sys.executable, "-m", "cadence", "train", config,
            f"trainer.num_env_steps={steps}",
            f"trainer.num_threads={threads}",
            f"trainer.cpu_matmul={backend}",
            "trainer.eval_interval=0",
            "trainer.num_eval_episodes=1",
            f"root_dir={root}/run",
            *RUNS[config][2],
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(
            command,
            check=True,
            env={**env, "CADENCE_COMPILE_CACHE": str(cache)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        return time.perf_counter() - started


def measure(
    config: str, steps: int, backends: list[str], rounds: int, threads: int, env: dict
) -> dict:
    """Per backend, the wall seconds of each round."""
    seconds: dict[str, list[float]] = {backend: [] for backend in backends}
    with tempfile.TemporaryDirectory() as cache:
        warm_up = RUNS[config][1]
        for backend in backends:  # untimed: compiles graphs, records choices
            run_once(config, backend, max(warm_up, 1), threads, Path(cache), env)
        for round_ in range(rounds):
            shift = round_ % len(backends)
            for backend in backends[shift:] + backends[:shift]:
                seconds[backend].append(run_once(config, backend, steps, threads, Path(cache), env))
                print(
                    f"  {config} round {round_} {backend}: {seconds[backend][-1]:.1f} s", flush=True
                )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="of each config's env steps")
    parser.add_argument("--mkl-avx2", action="store_true", help="MKL_ENABLE_INSTRUCTIONS=AVX2")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.mkl_avx2:
        env["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    if "aten" not in args.backends:
        parser.error("the table's ratios are to aten: name it among --backends")

    import torch  # noqa: PLC0415 - after argument errors, which need no torch

    from cadence.machine_record import machine_key  # noqa: PLC0415

    print(
        f"{machine_key()}, {os.cpu_count()} cores; torch {torch.__version__}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{args.threads} thread(s), MKL_ENABLE_INSTRUCTIONS={env.get('MKL_ENABLE_INSTRUCTIONS', '')}, "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )
    rows = []
    for config in args.configs:
        steps = int(RUNS[config][0] * args.scale)
        seconds = measure(config, steps, args.backends, args.rounds, args.threads, env)
        aten = seconds["aten"]
        for backend in args.backends:
            ratios = [a / b for a, b in zip(aten, seconds[backend], strict=True)]
            rows.append(
                f"| {config} ({steps:,} steps) | {backend} | "
                f"{statistics.median(seconds[backend]):.1f} | {statistics.median(ratios):.2f}x | "
                f"{min(ratios):.2f}-{max(ratios):.2f} |"
            )
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    print("| config | backend | median s | speedup over aten | rounds' range |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
