"""What one step of collection from Gymnasium envs costs: cadence's collector against
Stable-Baselines3's, beside what the envs themselves cost.

Each row is one Gymnasium id x N envs stepped in this process (cadence's serial back end
unless ``--backend`` says otherwise, SB3's ``DummyVecEnv``) by PPO with 64x64 tanh networks, at one torch thread. Columns, in
microseconds per step of the whole batch (the median of alternating rounds):

- ``env alone``: the N envs stepped in a plain Python loop with a fixed action and reset
  as their episodes end: what the envs themselves cost (with ``--backend vector``, the
  id's own Gymnasium vector env stepped with a fixed batch of actions).
- ``cadence``: `Collector.unroll` (32 steps) of ``ppo_cartpole`` with that env, per step:
  the envs, the time steps, the policy's step, the stacking of the unroll and the episode
  statistics. ``eager`` acts with the eager policy, ``compiled`` with its compiled step
  (``algorithm.compile=default``).
- ``SB3``: ``PPO.collect_rollouts`` (32 steps) per step, its rollout buffer included.

Then, per row, cadence's per-step Python in units of the env's own cost,
``(cadence compiled - env alone) / env alone`` (the compiled fast path's bar for the
Gymnasium path is 1: collecting costs no more than twice what the envs cost), and the
speed-up over SB3. Per env id with two batch sizes or more, that Python split into a part
per step (the policy's call and the collector's work, whatever the batch) and a part per
env, and from that the batch from which the bar holds: a cheap env such as CartPole needs
more envs to outweigh the policy's call.

    python benchmarks/collect_step.py [--envs CartPole-v1 HalfCheetah-v5] [--num-envs 8 32]
                                      [--backend serial|vector|thread|parallel]
    python benchmarks/collect_step.py --quick   # a smoke run, a few seconds per row

(SB3: ``pip install -e '.[bench]'``; HalfCheetah: ``pip install mujoco``.)
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

UNROLL = 32
COLUMNS = ("env alone", "cadence eager", "cadence compiled", "SB3")


def env_alone(name: str, num_envs: int, backend: str) -> Callable[[], None]:
    """One step of ``num_envs`` Gymnasium envs in a Python loop (a fixed action), or of
    the id's own vector env for the ``vector`` back end (which resets by itself)."""
    if backend == "vector":
        vector_env = gym.make_vec(name, num_envs, vectorization_mode="vector_entry_point")
        vector_env.reset(seed=0)
        actions = vector_env.action_space.sample()
        return lambda: vector_env.step(actions)
    envs = [gym.make(name) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    action = envs[0].action_space.sample()

    def step() -> None:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()

    return step


def cadence_unroll(name: str, num_envs: int, compile_mode: str, backend: str) -> Callable[[], None]:
    """One `Collector.unroll` of ``UNROLL`` steps of ``ppo_cartpole`` on ``name``."""
    from cadence.config.loading import compose_config
    from cadence.trainer.run import build_trainer

    overrides = [
        f"env.name={name}",
        f"env.num_envs={num_envs}",
        f"env.backend={backend}",
        f"algorithm.compile={compile_mode}",
        "trainer.num_threads=1",
        f"trainer.unroll_length={UNROLL}",
    ]
    config = compose_config("ppo_cartpole", overrides)
    trainer = build_trainer(config, Path(tempfile.mkdtemp(prefix="collect_step-")))
    return trainer.collector.unroll


def sb3_unroll(name: str, num_envs: int) -> Callable[[], None] | None:
    """One ``PPO.collect_rollouts`` of ``UNROLL`` steps, or None without SB3."""
    if importlib.util.find_spec("stable_baselines3") is None:
        return None
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(name, n_envs=num_envs, seed=0)
    model = PPO("MlpPolicy", env, n_steps=UNROLL, device="cpu", seed=0)
    _, callback = model._setup_learn(total_timesteps=10**9, callback=None)
    callback.on_training_start(locals(), globals())

    def unroll() -> None:
        model.collect_rollouts(model.env, callback, model.rollout_buffer, UNROLL)

    return unroll


def measure(
    runs: dict[str, Callable[[], None]], steps: dict[str, int], rounds: int, seconds: float
) -> dict[str, float]:
    """Median microseconds per step of each run, over ``rounds`` alternating rounds of
    about ``seconds`` each (after one untimed call, which also compiles)."""
    for run in runs.values():
        run()
    calls = {}
    for label, run in runs.items():  # calls per round, from one timed call
        start = time.perf_counter()
        run()
        calls[label] = max(1, round(seconds / (time.perf_counter() - start)))
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, run in runs.items():
            start = time.perf_counter()
            for _ in range(calls[label]):
                run()
            elapsed = time.perf_counter() - start
            times[label].append(1e6 * elapsed / (calls[label] * steps[label]))
    return {label: statistics.median(values) for label, values in times.items()}


def row(name: str, num_envs: int, backend: str, rounds: int, seconds: float) -> dict[str, float]:
    runs = {
        "env alone": env_alone(name, num_envs, backend),
        "cadence eager": cadence_unroll(name, num_envs, "off", backend),
        "cadence compiled": cadence_unroll(name, num_envs, "default", backend),
    }
    sb3 = sb3_unroll(name, num_envs)
    if sb3 is not None:
        runs["SB3"] = sb3
    steps = {label: 1 if label == "env alone" else UNROLL for label in runs}
    return measure(runs, steps, rounds, seconds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "HalfCheetah-v5"])
    parser.add_argument(
        "--num-envs", type=int, nargs="+", default=[8, 32], help="a row per count, per env"
    )
    parser.add_argument(
        "--backend", default="serial", choices=("serial", "vector", "thread", "parallel")
    )
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per row")
    parser.add_argument("--seconds", type=float, default=0.5, help="per run and round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.05 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 3, 0.05
    return args


def main(argv: list[str] | None = None) -> int:
    from cadence.envs.make import has_vector_env

    args = parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"collection, us per step of the batch (median of {args.rounds} alternating rounds; "
        f"cadence's {args.backend} back end)"
    )
    print(f"{'':<22}" + "".join(f"{c:>18}" for c in COLUMNS))
    verdicts = []
    costs: dict[str, dict[int, tuple[float, float]]] = {}
    for name, num_envs in itertools.product(args.envs, args.num_envs):
        label = f"{name} x{num_envs}"
        if args.backend == "vector" and not has_vector_env(name):
            print(f"{label:<22}  skipped: no vector env registered for {name}")
            continue
        try:
            micros = row(name, num_envs, args.backend, args.rounds, args.seconds)
        except gym.error.DependencyNotInstalled as error:
            print(f"{label:<22}  skipped: {error}")
            continue
        cells = "".join(f"{micros[c]:>18.1f}" if c in micros else f"{'-':>18}" for c in COLUMNS)
        print(f"{label:<22}{cells}", flush=True)
        alone, compiled = micros["env alone"], micros["cadence compiled"]
        costs.setdefault(name, {})[num_envs] = (alone, compiled - alone)
        overhead = (compiled - alone) / alone
        verdicts.append(
            f"  {'PASS' if overhead <= 1 else 'FAIL'}  cadence's per-step Python / the envs' "
            f"own cost, {label}: {overhead:.2f}x  (bar <= 1x)"
        )
        if "SB3" in micros:
            verdicts.append(
                f"        SB3 / cadence compiled, per step, {label}: "
                f"{micros['SB3'] / compiled:.2f}x"
            )
    splits = [split_line(name, rows) for name, rows in costs.items() if len(rows) > 1]
    print("\n".join(verdicts + splits))
    return 0


def split_line(name: str, rows: dict[int, tuple[float, float]]) -> str:
    """cadence's per-step Python on ``name`` split into a part per step (the policy's call,
    the collector) and a part per env, a line through the smallest and largest batch's
    (env alone, cadence compiled - env alone) ``rows``; and the batch from which the bar
    holds, where the envs' own cost per env outgrows the part per env."""
    (n0, (alone0, over0)), (n1, (alone1, over1)) = min(rows.items()), max(rows.items())
    per_env = (over1 - over0) / (n1 - n0)
    per_step = over0 - per_env * n0
    env_per_env = (alone1 - alone0) / (n1 - n0)
    line = (
        f"        cadence's per-step Python, {name}: {per_step:.0f} us per step + "
        f"{per_env:.1f} us per env (the env: {env_per_env:.1f} us per env)"
    )
    if per_env < 0 or per_step < 0:
        return line + ": too noisy to split (take batch sizes further apart, or more rounds)"
    if env_per_env <= per_env:
        return line + ": the bar holds at no batch size"
    start = max(1, math.ceil(per_step / (env_per_env - per_env)))
    return line + f": the bar holds from about {start} envs"


if __name__ == "__main__":
    sys.exit(main())
