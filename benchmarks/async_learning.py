"""Learning with asynchronous env stepping against lockstep: final return and wall time.

For each config, seed and mode it trains a run on the ``parallel`` back end with the same
envs, workers and budget; the modes differ only in ``env.async_batch_size``:

- ``lockstep``: every step waits for all ``N`` envs (``async_batch_size`` unset);
- ``async``: each step returns the ``M = N / 2`` envs ready first (``trainer.deterministic:
  false``, which asynchronous stepping needs: see docs/backends.md).

It reports each run's final return (the mean of its last 3 evaluations) and wall time,
(compiling excluded), and per config and mode the mean final return with its 95%
percentile-bootstrap interval over seeds; the bar is async's mean at least 90% of
lockstep's and inside lockstep's interval. The budgets are scaled to fit a 2-core machine
(``--steps``); ``sac_hopper`` runs 4 envs (its config has 1) with one update per env step
as in its config:

    python benchmarks/async_learning.py                       # about an hour on 2 cores
    python benchmarks/async_learning.py --report --root DIR   # only read runs already trained

A run already complete is resumed, which ends at once, so an interrupted study goes on
where it stopped. Runs go one at a time: each uses both cores (its workers and the
learner), and their wall times are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from cadence.plot.curves import bootstrap_band

MODES = ("lockstep", "async")
STEPS = {"ppo_hopper": 300_000, "sac_hopper": 40_000}
NUM_ENVS = 4  # sac_hopper's, for both modes (ppo_hopper keeps its 8)
# Per config: what both modes share beyond the back end, for a budget that fits 2 cores.
SHARED = {
    "ppo_hopper": ["trainer.eval_interval=20"],
    "sac_hopper": [
        f"env.num_envs={NUM_ENVS}",
        # One update per env step, as the config does with one env.
        f"algorithm.off_policy.num_updates_per_train_iter={50 * NUM_ENVS}",
        "algorithm.off_policy.initial_collect_steps=5000",
        "trainer.eval_interval=40",
        "trainer.num_eval_episodes=5",
    ],
}


def num_envs(config: str) -> int:
    return NUM_ENVS if config == "sac_hopper" else 8


def overrides(config: str, mode: str, steps: int) -> list[str]:
    common = [
        f"trainer.num_env_steps={steps}",
        "env.backend=parallel",
        "env.num_workers=2",
        "trainer.deterministic=false",  # the same for both modes: only the stepping differs
        *SHARED.get(config, []),
    ]
    if mode == "async":
        common.append(f"env.async_batch_size={num_envs(config) // 2}")
    return common


def train(config: str, mode: str, seed: int, root: Path, steps: int) -> Path:
    run_dir = root / f"{config}-{mode}-seed{seed}"
    command = [
        sys.executable, "-m", "cadence", "train", config, f"seed={seed}", f"root_dir={run_dir}",
        "trainer.progress_bar=off", *overrides(config, mode, steps),
    ]  # fmt: skip
    with (root / f"{run_dir.name}.log").open("a") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return run_dir


def read_run(run_dir: Path, last: int = 3) -> dict[str, float]:
    """The run's final return (mean of its last ``last`` evaluations) and wall time, less
    the seconds it spent compiling updates (the first run of a config on a machine
    compiles them, later ones load them from the compile cache)."""
    from cadence.trainer.metrics import read_metrics

    rows = read_metrics(run_dir)
    returns = [r["eval/episode_return"] for r in rows if "eval/episode_return" in r]
    compile_s = max((r["perf/compile_s"] for r in rows if "perf/compile_s" in r), default=0.0)
    return {
        "final_return": statistics.mean(returns[-last:]),
        "wall_time": max(r["wall_time"] for r in rows if "wall_time" in r) - compile_s,
    }


def interval(values: list[float]) -> tuple[float, float, float]:
    """The mean of ``values`` and its 95% percentile-bootstrap interval (10,000 resamples)."""
    column = np.asarray(values, dtype=np.float64)[:, None]
    low, high = bootstrap_band(column, 0.95, num_resamples=10_000, seed=0)
    return float(column.mean()), float(low[0]), float(high[0])


def print_report(rows: list[dict[str, Any]]) -> None:
    print(f"{'config':<12} {'mode':<9} {'seed':>4} {'final return':>12} {'wall s':>8}")
    for row in rows:
        print(
            f"{row['config']:<12} {row['mode']:<9} {row['seed']:>4} "
            f"{row['final_return']:>12.1f} {row['wall_time']:>8.0f}"
        )
    print("\nmean final return [95% bootstrap interval], mean wall time; async against lockstep")
    for config in dict.fromkeys(r["config"] for r in rows):
        stats = {}
        for mode in MODES:
            runs = [r for r in rows if r["config"] == config and r["mode"] == mode]
            if runs:
                stats[mode] = (
                    interval([r["final_return"] for r in runs]),
                    statistics.mean(r["wall_time"] for r in runs),
                )
                (mean, low, high), wall = stats[mode]
                print(
                    f"{config:<12} {mode:<9} {mean:8.1f} [{low:8.1f}, {high:8.1f}]  {wall:6.0f} s"
                )
        if len(stats) == 2:
            (a, _, _), a_wall = stats["async"]
            (b, low, high), b_wall = stats["lockstep"]
            print(
                f"{config:<12} async/lockstep: return {a / b:.2f}x (bar 0.90x), "
                f"inside lockstep's interval: {low <= a <= high}; wall time {a_wall / b_wall:.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(STEPS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--steps", type=int, help="env steps per run (default: per config)")
    parser.add_argument("--root", type=Path, default=Path("runs/async_learning"))
    parser.add_argument("--report", action="store_true", help="only report runs under --root")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    rows = []
    for config in args.configs:
        for seed in args.seeds:
            for mode in args.modes:  # interleaved, so load drifts over both modes alike
                run_dir = args.root / f"{config}-{mode}-seed{seed}"
                if not args.report:
                    train(config, mode, seed, args.root, args.steps or STEPS[config])
                row = {"config": config, "mode": mode, "seed": seed, **read_run(run_dir)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print_report(rows)


if __name__ == "__main__":
    main()
