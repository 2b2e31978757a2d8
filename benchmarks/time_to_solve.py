"""Time to solve: cadence vs Stable-Baselines3 on the same task, in one run.

For each seed, trains until the mean return of 10 deterministic evaluation
episodes reaches the bar, evaluating every ``--eval-every`` env steps on both
sides, and reports training seconds (evaluation excluded on both sides) and env
steps to the bar. Stable-Baselines3 uses its RL-Zoo hyperparameters.

Each cadence run is a fresh ``cadence train`` process, as a user starts it, of the named
config as shipped (its own ``algorithm.compile`` and ``trainer.num_threads``) unless
``--compile`` names modes to compare. A compiled mode runs once per ``--caches`` state:

- ``empty``: every run starts from a compile cache of its own holding only the machine's
  records that are not compiled graphs (the matmul backend's choice, the env step costs,
  the built matmul kernel), as a user's first run of the config does: its training time
  counts all its compiling;
- ``warm``: a short untimed run of the same config first fills one shared cache, so the
  timed runs load their graphs; their training time includes what they still spend
  compiling (a user pays it).

Within a seed the variants run one after another, SB3 last, so a machine whose load changes
slows them alike; the table gives each variant's median and its ratio to SB3's.

    python benchmarks/time_to_solve.py --task ppo_cartpole --seeds 0 1 2
    python benchmarks/time_to_solve.py --task sac_pendulum --compile off auto --caches empty warm
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from cadence.algorithms.compile_config import COMPILE_MODES


@dataclass
class Task:
    config: str  # cadence named config
    env_id: str
    bar: float
    budget: int  # env steps before giving up
    sb3: Callable[[int], object]  # seed -> SB3 model


@dataclass
class Result:
    solved: bool
    train_seconds: float
    env_steps: int
    capped: bool = False  # stopped unsolved at ``--sb3-cap``: its seconds are a lower bound


def _sb3_ppo_cartpole(seed: int):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1.
    return PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=_linear(1e-3),
        clip_range=_linear(0.2),
        seed=seed,
        device="cpu",
    )


def _sb3_dqn_cartpole(seed: int):
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
    # rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4). SB3 decays epsilon
    # over exploration_fraction of the steps passed to learn(); scaled so that it decays over
    # the zoo's 0.16 * 5e4 = 8k steps under this benchmark's larger budget too.
    return DQN(
        "MlpPolicy",
        env,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16 * 50_000 / DQN_BUDGET,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
    )


DQN_BUDGET = 100_000


def _sb3_sac_pendulum(seed: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    # rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1: learning_rate 1e-3, the rest SB3's
    # defaults (batch 256, [256, 256], one update per env step, 100 random steps, auto alpha).
    return SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, device="cpu")


def _linear(initial: float) -> Callable[[float], float]:
    return lambda progress_remaining: progress_remaining * initial


TASKS = {
    # 1e5 env steps: ppo_cartpole's default budget and RL-Zoo's n_timesteps for CartPole-v1.
    # The budget also sets both sides' linear learning-rate schedules, so it stays the one
    # each side was tuned with.
    "ppo_cartpole": Task("ppo_cartpole", "CartPole-v1", 475.0, 100_000, _sb3_ppo_cartpole),
    "dqn_cartpole": Task("dqn_cartpole", "CartPole-v1", 475.0, DQN_BUDGET, _sb3_dqn_cartpole),
    "sac_pendulum": Task("sac_pendulum", "Pendulum-v1", -200.0, 20_000, _sb3_sac_pendulum),
}


def run_cadence(
    task: Task,
    seed: int,
    eval_every: int,
    compile_mode: str | None = None,
    threads: int | None = None,
    cache: str | None = None,
) -> Result:
    """One ``cadence train`` process to the bar (or the budget); ``compile_mode`` and
    ``threads`` None keep the config's, ``cache`` a compile cache folder for it."""
    from cadence.config import load_config
    from cadence.trainer.metrics import read_metrics

    config = load_config(task.config, [f"seed={seed}", f"trainer.num_env_steps={task.budget}"])
    steps_per_iter = config.env.num_envs * config.trainer.unroll_length
    interval = max(1, eval_every // steps_per_iter)
    with tempfile.TemporaryDirectory() as root:
        overrides = [
            f"seed={seed}",
            f"trainer.num_env_steps={task.budget}",
            f"trainer.eval_interval={interval}",
            "trainer.num_eval_episodes=10",
            f"trainer.stop_at_eval_return={task.bar}",
            "trainer.checkpoint_interval=0",
            "trainer.progress_bar=off",
            f"root_dir={root}/run",
        ]
        if threads is not None:
            overrides.append(f"trainer.num_threads={threads}")
        if compile_mode is not None:
            overrides.append(f"algorithm.compile={compile_mode}")
        environment = dict(os.environ)
        if cache is not None:
            environment["CADENCE_COMPILE_CACHE"] = cache
        command = [sys.executable, "-m", "cadence", "train", task.config, *overrides]
        subprocess.run(
            command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment
        )
        records = read_metrics(f"{root}/run")
    for record in records:
        if (
            record.get("eval/episode_return") is not None
            and record["eval/episode_return"] >= task.bar
        ):
            return Result(True, record["train_time"], record["env_steps"])
    return Result(False, records[-1]["train_time"], records[-1]["env_steps"])


def warm_compile_cache(task: Task, compile_mode: str | None, threads: int | None) -> None:
    """An untimed run of ``task`` long enough to compile its update graphs."""
    warm = Task(task.config, task.env_id, float("inf"), task.budget // 4, task.sb3)
    run_cadence(warm, 0, task.budget, compile_mode, threads)


MACHINE_RECORDS = ("env_step_cost.json",)
"""What an ``empty`` compile cache keeps of the machine's: the choices that a user's first
run of any config has made already, none of them a compiled graph."""


def empty_compile_cache(parent: str) -> str:
    """A new compile cache folder under ``parent`` holding only `MACHINE_RECORDS`."""
    from cadence.machine_record import compile_cache_dir

    folder = tempfile.mkdtemp(dir=parent)
    for name in MACHINE_RECORDS:
        source = compile_cache_dir() / name
        if source.exists():
            shutil.copy(source, folder)
    return folder


def run_sb3(task: Task, seed: int, eval_every: int, cap_s: float = float("inf")) -> Result:
    """SB3 to the bar, stopped unsolved once its training seconds exceed ``cap_s``."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    model = task.sb3(seed)
    eval_env = gym.make(task.env_id)

    class EvalAndStop(BaseCallback):
        def __init__(self):
            super().__init__()
            self.eval_seconds = 0.0
            self.next_eval = eval_every
            self.solved_at: int | None = None
            self.capped = False
            self.learn_start = time.perf_counter()

        def _on_step(self) -> bool:
            if time.perf_counter() - self.learn_start - self.eval_seconds > cap_s:
                self.capped = True
                return False
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            start = time.perf_counter()
            eval_env.reset(seed=seed + 1_000_000 + self.num_timesteps)
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=10, deterministic=True)
            self.eval_seconds += time.perf_counter() - start
            if mean >= task.bar:
                self.solved_at = self.num_timesteps
                return False
            return True

    callback = EvalAndStop()
    start = time.perf_counter()
    model.learn(total_timesteps=task.budget, callback=callback)
    seconds = time.perf_counter() - start - callback.eval_seconds
    return Result(
        callback.solved_at is not None,
        seconds,
        callback.solved_at or model.num_timesteps,
        capped=callback.capped,
    )


def _median(results: list[Result], field: str) -> float:
    return statistics.median(getattr(r, field) for r in results)


def _median_result(results: list[Result]) -> Result:
    """The result at the (upper) median of the training seconds."""
    return sorted(results, key=lambda r: r.train_seconds)[len(results) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", choices=sorted(TASKS), default="ppo_cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--eval-every", type=int, default=2048, help="env steps between evaluations (both sides)"
    )
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument(
        "--sb3-cap",
        type=float,
        default=None,
        help="stop SB3 unsolved once its training time exceeds this many times the slowest "
        "cadence variant's in the same seed; its time is then a lower bound (shown as '>', "
        "and the ratios as '<'): enough to show a bar is met without waiting it out",
    )
    parser.add_argument(
        "--compile",
        nargs="+",
        default=None,
        choices=COMPILE_MODES,
        help="cadence's algorithm.compile modes to compare (default: the config's own)",
    )
    parser.add_argument(
        "--caches",
        nargs="+",
        default=["warm"],
        choices=["empty", "warm"],
        help="compile cache states a compiled mode runs from (see above)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of both sides (default: cadence's config's, SB3 torch's own)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    task = TASKS[args.task]
    variants = _variants(task, args.compile, args.caches)
    rows: dict[str, list[Result]] = {name: [] for name, _, _ in variants}
    rows["sb3"] = []
    with tempfile.TemporaryDirectory() as caches:
        if any(cache == "warm" for _, _, cache in variants):
            for mode in {mode for _, mode, cache in variants if cache == "warm"}:
                warm_compile_cache(task, mode, args.threads)
        for seed in args.seeds:
            for name, mode, cache in variants:
                folder = empty_compile_cache(caches) if cache == "empty" else None
                rows[name].append(
                    run_cadence(task, seed, args.eval_every, mode, args.threads, folder)
                )
                _print_row(name, seed, rows[name][-1])
            if not args.skip_sb3:
                slowest = max(rows[name][-1].train_seconds for name, _, _ in variants)
                cap = float("inf") if args.sb3_cap is None else args.sb3_cap * slowest
                rows["sb3"].append(run_sb3(task, seed, args.eval_every, cap))
                _print_row("sb3", seed, rows["sb3"][-1])
    _print_table(task, rows, len(args.seeds))
    return 0


def _variants(
    task: Task, modes: list[str] | None, caches: list[str]
) -> list[tuple[str, str | None, str | None]]:
    """(name, compile mode or None for the config's, cache state or None) per variant."""
    from cadence.config import load_config

    own = load_config(task.config, []).algorithm.compile
    variants = []
    for mode in modes or [None]:
        effective = own if mode is None else mode
        label = f"cadence[{effective}{'' if mode else ', as shipped'}"
        if effective == "off":
            variants.append((label + "]", mode, None))
            continue
        for cache in caches:
            variants.append((f"{label}, {cache} cache]", mode, cache))
    return variants


def _print_table(task: Task, rows: dict[str, list[Result]], seeds: int) -> None:
    print(f"\n{task.config}: time to eval return {task.bar} (median of {seeds} seeds)")
    print(f"{'library':<36} {'solved':>7} {'train s':>9} {'env steps':>10} {'/ sb3':>7}")
    sb3 = _median(rows["sb3"], "train_seconds") if rows["sb3"] else None
    # A capped SB3 run's seconds are a lower bound, and so is a median over lower bounds.
    bound = "<" if rows["sb3"] and _median_result(rows["sb3"]).capped else ""
    for name, results in rows.items():
        if not results:
            continue
        solved = sum(r.solved for r in results)
        seconds = _median(results, "train_seconds")
        ratio = f"{bound if name != 'sb3' else ''}{seconds / sb3:.2f}x" if sb3 else "-"
        mark = ">" if name == "sb3" and bound else ""
        print(
            f"{name:<36} {solved:>4}/{len(results):<2} {mark + f'{seconds:.1f}':>9} "
            f"{_median(results, 'env_steps'):>10.0f} {ratio:>7}"
        )
    if bound:
        print("sb3: stopped unsolved at --sb3-cap in some seeds; '>' a lower bound, '<' an upper")


def _print_row(name: str, seed: int, result: Result) -> None:
    status = (
        "solved" if result.solved else ("stopped at the cap" if result.capped else "NOT solved")
    )
    print(
        f"{name} seed {seed}: {status} in {result.train_seconds:.1f} s, {result.env_steps} env steps",
        flush=True,
    )


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
