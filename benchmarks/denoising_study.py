"""Denoised MDP's claim, measured on cadence/NoisyPendulum-v0: does x keep the pendulum and
leave the distractors out, and does the policy learned on it do at least as well?

For each config and seed it trains a run (``cadence train CONFIG seed=S``; a run already
complete is resumed, which ends at once), then reports

- the final return: the mean of the run's last 3 evaluations;
- ridge-regression probes (`cadence.latent_probe.probe_noisy_pendulum`) from each latent
  group the model has (x, and y and z when on; posterior belief and state concatenated,
  the policy filtering) to each observed signal, fit on the steps of 8 evaluation
  episodes and scored on 4 held-out ones: R² of cos θ, sin θ and θ̇ of the pendulum, and
  the largest R² over the coordinates of the reward-relevant (y-type) and of the other
  (z-type) distractors;
- per config, the mean final return over the seeds with a 95% percentile-bootstrap
  interval, and the per-seed difference of each config from ``--baseline`` (the same seed:
  the same env seeds), with its interval.

The seeds are split: configs were tuned on seeds 0-2, and 3-7 are held out:

    python benchmarks/denoising_study.py --seeds 3 4 5 6 7 --parallel 2

Each run takes about 8 minutes on one core of a 2-core machine. ``--report`` only reads
runs already trained under ``--root``. ``--every-checkpoint`` also probes every checkpoint
the runs kept, to see when x takes a signal in or lets it go (add ``--overrides
trainer.checkpoint_interval=2 trainer.keep_checkpoints=10`` for a finer trace).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS = ("dreamer_pendulum", "dreamer_pendulum_noisy", "denoised_mdp_pendulum_noisy")
BASELINE = "dreamer_pendulum_noisy"
BOOTSTRAP_RESAMPLES = 10_000


def run_dir_of(root: Path, config: str, seed: int) -> Path:
    return root / f"{config}-seed{seed}"


def train(config: str, seed: int, root: Path, overrides: list[str]) -> Path:
    run_dir = run_dir_of(root, config, seed)
    command = [
        sys.executable, "-m", "cadence", "train", config, f"seed={seed}", f"root_dir={run_dir}",
        "trainer.progress_bar=off", "trainer.num_threads=1", *overrides,
    ]  # fmt: skip
    log = (root / f"{config}-seed{seed}.log").open("a")
    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return run_dir


def final_return(run_dir: Path, last: int = 3) -> float:
    from cadence.trainer.metrics import read_metrics

    returns = [
        r["eval/episode_return"] for r in read_metrics(run_dir) if "eval/episode_return" in r
    ]
    return statistics.mean(returns[-last:])


def latent_groups(run_dir: Path) -> list[str]:
    """The latent groups of a run's world model: x, and y and z when on."""
    from cadence.config.serialize import from_yaml

    world_model = from_yaml((run_dir / "config.yaml").read_text()).algorithm.world_model
    return ["x"] + ["y"] * world_model.has_y + ["z"] * world_model.has_z


def probe_groups(run_dir: Path, checkpoint: str = "latest") -> dict[str, dict[str, Any]]:
    """`probe_noisy_pendulum` from each latent group of the run, by group name."""
    from cadence.latent_probe import probe_noisy_pendulum

    return {
        group: probe_noisy_pendulum(run_dir, checkpoint, groups=(group,))
        for group in latent_groups(run_dir)
    }


def checkpoint_iterations(run_dir: Path) -> list[int]:
    """The iterations of the checkpoints a run kept, oldest first."""
    directory = run_dir / "checkpoints"
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def bootstrap_mean(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """The mean of ``values`` and its percentile-bootstrap interval at ``level``
    (`cadence.plot.curves.bootstrap_band`, as `cadence plot` draws its bands, with
    `BOOTSTRAP_RESAMPLES` resamples seeded 0, so the interval is the same at every call).
    With 5 values it is narrow: it knows only the spread they show."""
    from cadence.plot.curves import bootstrap_band

    column = np.asarray(values, dtype=np.float64)[:, None]
    low, high = bootstrap_band(column, level, num_resamples=BOOTSTRAP_RESAMPLES, seed=0)
    return float(column.mean()), float(low[0]), float(high[0])


def pendulum_r2(probe: dict[str, Any]) -> float:
    """The worst of the pendulum's three signals (cos θ, sin θ, θ̇)."""
    return min(probe["cos"], probe["sin"], probe["velocity"])


def print_runs(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'config':<28} {'seed':>4} {'return':>8}  group: pendulum R² (worst of 3) / y-type / z-type max R²"
    )
    for row in rows:
        groups = "  ".join(
            f"{group}: {pendulum_r2(p):.2f} / {p.get('y_max', float('nan')):.2f} / "
            f"{p.get('z_max', float('nan')):.2f}"
            for group, p in row["probes"].items()
        )
        print(f"{row['config']:<28} {row['seed']:>4} {row['final_return']:>8.1f}  {groups}")


def print_summary(rows: list[dict[str, Any]], configs: Sequence[str], baseline: str) -> None:
    print("\nmean final return, 95% bootstrap interval; difference from the baseline, same seeds")
    by_config = {c: {r["seed"]: r for r in rows if r["config"] == c} for c in configs}
    for config, runs in by_config.items():
        mean, low, high = bootstrap_mean([r["final_return"] for r in runs.values()])
        line = f"{config:<28} n={len(runs)} mean {mean:8.1f} [{low:8.1f}, {high:8.1f}]"
        shared = sorted(set(runs) & set(by_config.get(baseline, {})))
        if config != baseline and shared and baseline in by_config:
            differences = [
                runs[s]["final_return"] - by_config[baseline][s]["final_return"] for s in shared
            ]
            mean, low, high = bootstrap_mean(differences)
            line += f"   - {baseline}: {mean:+8.1f} [{low:+8.1f}, {high:+8.1f}]"
        print(line)
    print("\nprobe R², mean over seeds (worst seed): pendulum (worst of 3 signals), y-type, z-type")
    for config, runs in by_config.items():
        for group in ("x", "y", "z"):
            probes = [r["probes"][group] for r in runs.values() if group in r["probes"]]
            if not probes:
                continue
            cells = [f"pendulum {_mean_worst([pendulum_r2(p) for p in probes], min)}"]
            for kind in ("y_max", "z_max"):
                if kind in probes[0]:
                    cells.append(f"{kind[0]}-type {_mean_worst([p[kind] for p in probes], max)}")
            print(f"{config:<28} {group}: " + ", ".join(cells))


def _mean_worst(values: list[float], worst: Any) -> str:
    return f"{statistics.mean(values):.2f} ({worst(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[3, 4, 5, 6, 7])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("runs/denoising_study"))
    parser.add_argument("--overrides", nargs="*", default=[])
    parser.add_argument("--report", action="store_true", help="only report runs under --root")
    parser.add_argument("--out", type=Path, help="also write the per-run rows here (JSON lines)")
    parser.add_argument(
        "--every-checkpoint",
        action="store_true",
        help="also probe every checkpoint each run kept (the probe's trace over training)",
    )
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    jobs = [(config, seed) for seed in args.seeds for config in args.configs]
    if not args.report:
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda job: train(*job, args.root, args.overrides), jobs))
    rows = []
    for config, seed in jobs:
        run_dir = run_dir_of(args.root, config, seed)
        if args.every_checkpoint:
            for iteration in checkpoint_iterations(run_dir):
                trace = {"config": config, "seed": seed, "checkpoint": iteration}
                trace["probes"] = probe_groups(run_dir, str(iteration))
                print(json.dumps(trace), flush=True)
        row = {"config": config, "seed": seed, "final_return": final_return(run_dir)}
        row["probes"] = probe_groups(run_dir)
        rows.append(row)
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print_runs(rows)
    print_summary(rows, args.configs, args.baseline)


if __name__ == "__main__":
    main()
