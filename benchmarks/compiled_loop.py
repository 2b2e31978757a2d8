"""PPO on CartPole: cadence eager, cadence compiled and rejax's jitted loop, in one run.

All three train PPO at the same hyperparameters: 8 envs x 32 steps per unroll, 20 epochs
of one 256-sample minibatch, learning rate 1e-3, gradients clipped at 0.5, 64x64 tanh
networks, 102,400 env steps (400 unrolls, 8,000 gradient updates), no evaluation.
cadence runs ``cadence train ppo_cartpole`` with the tensor-native CartPole
(``env.backend=tensor``), one torch thread, in a fresh process per run; rejax 0.1.3 runs
gymnax's CartPole in its own virtual environment (``bash benchmarks/rejax_env.sh``).

"Run" excludes compilation on both sides; compilation is reported beside it: cadence's
cold (an empty compile cache) and warm (the same cache, a second process), rejax's
``jit(...).lower(...).compile()`` (JAX's persistent cache off, its default). cadence's
run time is its training time less ``perf/compile_s``.

Then time to an evaluation return of 475 for the default ``ppo_cartpole`` (10 evaluation
episodes every 2048 env steps, evaluation excluded) against Stable-Baselines3
(`time_to_solve.py`) and rejax (compile plus the run time up to the first evaluation of
128 episodes at or above 475, from a run evaluating every 2048 steps: the jitted loop's
time per env step is uniform, taken from the run without evaluations).

    python benchmarks/compiled_loop.py [--seeds 0 1 2] [--skip-loop] [--skip-solve]

(time to solve needs Stable-Baselines3: ``pip install -e '.[bench]'``)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REJAX_PYTHON = ROOT / ".venvs" / "rejax" / "bin" / "python"
TOTAL_STEPS = 102_400
UPDATES = TOTAL_STEPS // (8 * 32) * 20
OVERRIDES = [
    "env.backend=tensor",
    "algorithm.num_updates_per_train_iter=20",
    "algorithm.mini_batch_size=256",
    "algorithm.learning_rate=1e-3",
    f"trainer.num_env_steps={TOTAL_STEPS}",
    "trainer.eval_interval=0",
    "trainer.checkpoint_interval=0",
    "trainer.progress_bar=off",
    "trainer.num_threads=1",
]


def train_records(overrides: list[str], cache: Path) -> list[dict[str, float]]:
    """The metrics records of one ``cadence train ppo_cartpole`` process with
    ``overrides``, its compiled graphs kept in (or loaded from) ``cache``."""
    from cadence.trainer.metrics import read_metrics

    with tempfile.TemporaryDirectory() as root:
        command = [sys.executable, "-m", "cadence", "train", "ppo_cartpole", *overrides]
        command.append(f"root_dir={root}/run")
        env = {**os.environ, "CADENCE_COMPILE_CACHE": str(cache)}
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        return read_metrics(f"{root}/run")


def cadence_run(compile_mode: str, seed: int, cache: Path) -> dict[str, float]:
    """One ``cadence train`` process: its compile and run seconds."""
    overrides = [*OVERRIDES, f"algorithm.compile={compile_mode}", f"seed={seed}"]
    last = train_records(overrides, cache)[-1]
    compile_s = float(last.get("perf/compile_s", 0.0))
    return {"compile_s": compile_s, "run_s": last["train_time"] - compile_s}


def rejax_run(seed: int, evaluations: int = 0) -> dict:
    """rejax's PPO in its virtual environment (`peers/rejax_ppo.py`)."""
    command = [str(REJAX_PYTHON), str(ROOT / "benchmarks" / "peers" / "rejax_ppo.py")]
    command += ["--seed", str(seed), "--evaluations", str(evaluations)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def median(values: list[float]) -> float:
    return statistics.median(values)


def loop_table(seeds: list[int]) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, list[float]]] = {}

    def add(name: str, **values: float) -> None:
        for key, value in values.items():
            rows.setdefault(name, {}).setdefault(key, []).append(value)

    for seed in seeds:
        add("cadence eager", **cadence_run("off", seed, Path(tempfile.mkdtemp())))
        with tempfile.TemporaryDirectory() as cache:
            cold = cadence_run("default", seed, Path(cache))
            warm = cadence_run("default", seed, Path(cache))
        add("cadence compiled", cold_s=cold["compile_s"], **warm)
        if REJAX_PYTHON.exists():
            peer = rejax_run(seed)
            add("rejax", cold_s=peer["compile_s"], compile_s=peer["compile_s"], run_s=peer["run_s"])
        print(f"seed {seed} done", file=sys.stderr, flush=True)
    table = {name: {k: median(v) for k, v in values.items()} for name, values in rows.items()}
    print(
        f"\nPPO CartPole, 8 envs x 32 steps, 20 epochs x 1 minibatch of 256, {TOTAL_STEPS:,} "
        f"env steps, {UPDATES:,} updates (median of {len(seeds)} seeds)"
    )
    print(f"{'':<18} {'compile cold':>12} {'compile warm':>12} {'run s':>7} {'updates/s':>10}")
    for name, row in table.items():
        cold = f"{row['cold_s']:.1f}" if "cold_s" in row else "-"
        warm = f"{row['compile_s']:.1f}" if "cold_s" in row else "-"
        print(
            f"{name:<18} {cold:>12} {warm:>12} {row['run_s']:>7.1f} "
            f"{UPDATES / row['run_s']:>10,.0f}"
        )
    if "rejax" in table:
        compiled, rejax = table["cadence compiled"], table["rejax"]
        run_ratio = compiled["run_s"] / rejax["run_s"]
        total_ratio = (compiled["compile_s"] + compiled["run_s"]) / (
            rejax["compile_s"] + rejax["run_s"]
        )
        print(f"\ncadence compiled run / rejax run: {run_ratio:.2f}x (bar <= 1.5)")
        print(f"cadence warm compile + run / rejax compile + run: {total_ratio:.2f}x (bar <= 1.0)")
    else:
        print(f"\n(rejax not measured: no {REJAX_PYTHON}; bash benchmarks/rejax_env.sh)")
    return table


def solve_table(seeds: list[int]) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from time_to_solve import TASKS, run_cadence, run_sb3, warm_compile_cache

    task = TASKS["ppo_cartpole"]
    times: dict[str, list[float]] = {}
    warm_compile_cache(task, "default", 1)
    for seed in seeds:
        for name, mode in (("cadence eager", "off"), ("cadence compiled", "default")):
            result = run_cadence(task, seed, 2048, mode, 1)
            times.setdefault(name, []).append(result.train_seconds if result.solved else None)
        result = run_sb3(task, seed, 2048)
        times.setdefault("sb3", []).append(result.train_seconds if result.solved else None)
        if REJAX_PYTHON.exists():
            curve, plain = rejax_run(seed, evaluations=50), rejax_run(seed)
            steps = [
                s
                for s, r in zip(curve["eval_steps"], curve["eval_returns"], strict=True)
                if r >= 475
            ]
            solved = plain["compile_s"] + plain["run_s"] * steps[0] / TOTAL_STEPS if steps else None
            times.setdefault("rejax (compile included)", []).append(solved)
    print(
        f"\nTime to eval return 475, cadence's ppo_cartpole (warm compile cache, compile "
        f"counted) vs SB3 (RL-Zoo) and rejax; median of {len(seeds)} seeds"
    )
    print(f"{'':<26} {'solved':>7} {'median s':>9}")
    for name, values in times.items():
        solved = [v for v in values if v is not None]
        shown = f"{median(solved):.1f}" if solved else "-"
        print(f"{name:<26} {len(solved):>4}/{len(values):<2} {shown:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-solve", action="store_true")
    parser.add_argument("--skip-loop", action="store_true")
    args = parser.parse_args()
    if not args.skip_loop:
        loop_table(args.seeds)
    if not args.skip_solve:
        solve_table(args.seeds)


if __name__ == "__main__":
    main()
