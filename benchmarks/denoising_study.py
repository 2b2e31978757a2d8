"""Denoised MDP's claim, measured on cadence/NoisyPendulum-v0: does x keep the pendulum and
leave the distractors out, and does the policy learned on it do at least as well?

For each config and seed it trains a run (``cadence train CONFIG seed=S``; runs already
complete are reused), then reports

- the final return: the mean of the run's last 3 evaluations;
- a ridge-regression probe (`cadence.latent_probe.probe_noisy_pendulum`) from the x latent
  (posterior belief and state concatenated, the policy filtering) to each observed signal,
  fit on the steps of 8 evaluation episodes and scored on 4 held-out ones: R² of cos θ,
  sin θ and θ̇ of the pendulum, and the largest R² over the coordinates of the
  reward-relevant (y-type) and of the other (z-type) distractors.

    python benchmarks/denoising_study.py --seeds 0 1 2 --parallel 2

Each run takes about 8 minutes on one core of a 2-core machine. ``--every-checkpoint``
also probes every checkpoint the runs kept, to see when x takes a signal in or lets it
go (add ``--overrides trainer.checkpoint_interval=2 trainer.keep_checkpoints=10`` for a
finer trace).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CONFIGS = ("dreamer_pendulum", "dreamer_pendulum_noisy", "denoised_mdp_pendulum_noisy")


def train(config: str, seed: int, root: Path, overrides: list[str]) -> Path:
    run_dir = root / f"{config}-seed{seed}"
    command = [
        sys.executable, "-m", "cadence", "train", config, f"seed={seed}", f"root_dir={run_dir}",
        "trainer.progress_bar=off", "trainer.num_threads=1", *overrides,
    ]  # fmt: skip
    log = (root / f"{config}-seed{seed}.log").open("w")
    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return run_dir


def final_return(run_dir: Path, last: int = 3) -> float:
    from cadence.trainer.metrics import read_metrics

    returns = [
        r["eval/episode_return"] for r in read_metrics(run_dir) if "eval/episode_return" in r
    ]
    return statistics.mean(returns[-last:])


def checkpoint_iterations(run_dir: Path) -> list[int]:
    """The iterations of the checkpoints a run kept, oldest first."""
    directory = run_dir / "checkpoints"
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("runs/denoising_study"))
    parser.add_argument("--overrides", nargs="*", default=[])
    parser.add_argument(
        "--every-checkpoint",
        action="store_true",
        help="also probe every checkpoint each run kept (the probe's trace over training)",
    )
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    jobs = [(config, seed) for seed in args.seeds for config in args.configs]
    with ThreadPoolExecutor(args.parallel) as pool:
        runs = list(pool.map(lambda job: train(*job, args.root, args.overrides), jobs))
    from cadence.latent_probe import probe_noisy_pendulum

    rows = []
    for (config, seed), run_dir in zip(jobs, runs, strict=True):
        if args.every_checkpoint:
            for iteration in checkpoint_iterations(run_dir):
                trace = {"config": config, "seed": seed, "checkpoint": iteration}
                trace.update(probe_noisy_pendulum(run_dir, str(iteration)))
                print(json.dumps(trace), flush=True)
        row = {
            "config": config,
            "seed": seed,
            "final_return": final_return(run_dir),
            **probe_noisy_pendulum(run_dir),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    header = f"{'config':<30} {'seed':>4} {'return':>8} {'cos':>6} {'sin':>6} {'θ̇':>6} {'y max':>6} {'z max':>6}"
    print(header)
    for row in rows:
        print(
            f"{row['config']:<30} {row['seed']:>4} {row['final_return']:>8.1f} {row['cos']:>6.2f} "
            f"{row['sin']:>6.2f} {row['velocity']:>6.2f} {row.get('y_max', float('nan')):>6.2f} "
            f"{row.get('z_max', float('nan')):>6.2f}"
        )
    for config in args.configs:
        returns = [r["final_return"] for r in rows if r["config"] == config]
        print(
            f"{config}: median final return {statistics.median(returns):.1f} over {len(returns)} seeds"
        )


if __name__ == "__main__":
    main()
