"""Environment throughput: env steps/s of each cadence back end vs Gymnasium, in one run.

A random policy with pre-sampled actions (so action sampling is timed on neither
side; cadence gets torch tensors, as a user passes them, Gymnasium numpy arrays)
drives, for each env and batch size: a plain single-env Gymnasium loop (reset on
done; measured in every row, as the reference each batch is compared with),
Gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv`` (default shared memory), the
env's own vector env (``gym.make_vec`` of its ``vector_entry_point``, "gym vec") where
it registers one, and cadence's ``serial``, ``thread`` and ``parallel`` back ends, the
``parallel`` back end stepping asynchronously ("async": on as many workers as cores that
split the batch of N evenly, ``async_batch_size`` M = N / 2; each step sends actions for
the M envs it last returned and returns the M ready next, so the parent's per-step work
is timed; its rate counts the env transitions returned), its
``vector`` back end (that same vector env, giving torch time steps) and its
tensor-native env where one exists. Every implementation of a row is built and warmed up
first, then timed in ``--repeats`` interleaved rounds and its median round is
kept, so that load from other processes disturbs every column of a row alike
and one lucky (or unlucky) round decides nothing; the ratios below compare
columns of one row. On a machine shared with other jobs, compare ratios, not
absolute rates, and repeat a run that looks noisy: worker processes wait for a
core after every step, so a busy machine hurts ``parallel`` and ``gym async``
far more than the in-process columns. The CartPole bar is also given in this
process's CPU time, which such load barely moves.

    python benchmarks/env_throughput.py            # the full table, about 1.5 minutes
    python benchmarks/env_throughput.py --quick    # a smoke run, well under a minute
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from cadence.envs import make_env
from cadence.envs.make import has_vector_env
from cadence.envs.tensor import has_tensor_env
from cadence.envs.worker_pool import available_cores

COLUMNS = (
    "gym loop",
    "gym sync",
    "gym async",
    "gym vec",
    "serial",
    "thread",
    "parallel",
    "async",
    "vector",
    "tensor",
)
CPU_BACKENDS = ("serial", "thread", "parallel")
_NUM_ACTIONS = 64  # pre-sampled action batches, cycled
Table = dict[tuple[str, int], dict[str, float]]  # (env, num_envs) -> column -> steps/s


class Runner:
    """One implementation of a row: ``run(n)`` takes ``n`` batch steps of ``batch_size`` envs.

    The default ``run`` cycles through the pre-sampled ``actions`` of an ``env`` that
    resets itself (vector envs and cadence back ends do).
    """

    batch_size: int
    env: Any
    actions: list[Any]
    t: int = 0

    def run(self, num_batch_steps: int) -> None:
        env, actions, t = self.env, self.actions, self.t
        for _ in range(num_batch_steps):
            env.step(actions[t % _NUM_ACTIONS])
            t += 1
        self.t = t

    def close(self) -> None:
        self.env.close()


class GymLoop(Runner):
    """The plain single-env Gymnasium loop a user writes: step, reset when done."""

    def __init__(self, name: str, seed: int):
        self.batch_size = 1
        self.env = gym.make(name)
        self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.actions = [self.env.action_space.sample() for _ in range(_NUM_ACTIONS)]
        self.t = 0

    def run(self, num_batch_steps: int) -> None:
        env, actions, t = self.env, self.actions, self.t
        for _ in range(num_batch_steps):
            _, _, terminated, truncated, _ = env.step(actions[t % _NUM_ACTIONS])
            if terminated or truncated:
                env.reset()
            t += 1
        self.t = t


class GymVector(Runner):
    """Gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv`` (which auto-reset themselves)."""

    def __init__(self, name: str, num_envs: int, seed: int, asynchronous: bool):
        fns = [lambda: gym.make(name)] * num_envs
        vector = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
        self.batch_size = num_envs
        self.env = vector(fns)
        self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.actions = [self.env.action_space.sample() for _ in range(_NUM_ACTIONS)]
        self.t = 0


class GymOwnVector(Runner):
    """The env's own vector env, ``gym.make_vec`` of its ``vector_entry_point``."""

    def __init__(self, name: str, num_envs: int, seed: int):
        self.batch_size = num_envs
        self.env = gym.make_vec(name, num_envs, vectorization_mode="vector_entry_point")
        self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.actions = [self.env.action_space.sample() for _ in range(_NUM_ACTIONS)]
        self.t = 0


class CadenceRunner(Runner):
    """A cadence back end built by ``make_env``, stepped with torch actions."""

    def __init__(self, name: str, num_envs: int, seed: int, backend: str):
        self.batch_size = num_envs
        self.env = make_env(name, num_envs, backend=backend, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        spec = self.env.action_spec
        self.actions = [spec.sample((num_envs,), generator) for _ in range(_NUM_ACTIONS)]
        self.env.reset()
        self.t = 0


class AsyncRunner(Runner):
    """cadence's ``parallel`` back end stepping asynchronously, ``async_batch_size`` envs a step.

    Each step sends actions for the envs the last one returned (all ``num_envs`` after the
    reset, then ``async_batch_size``), so ``batch_size`` counts the transitions a step returns.
    """

    def __init__(self, name: str, num_envs: int, seed: int, num_workers: int, batch: int):
        self.batch_size = batch
        self.env = make_env(
            name,
            num_envs,
            backend="parallel",
            seed=seed,
            num_workers=num_workers,
            async_batch_size=batch,
        )
        generator = torch.Generator().manual_seed(seed)
        spec = self.env.action_spec
        self.actions = [spec.sample((num_envs,), generator) for _ in range(_NUM_ACTIONS)]
        self.env.reset()
        self.returned = num_envs  # the reset returned every env
        self.t = 0

    def run(self, num_batch_steps: int) -> None:
        env, actions, t, returned = self.env, self.actions, self.t, self.returned
        for _ in range(num_batch_steps):
            returned = len(env.step(actions[t % _NUM_ACTIONS][:returned]).env_id)
            t += 1
        self.t, self.returned = t, returned


def async_layout(num_envs: int) -> tuple[int, int] | None:
    """The "async" column's workers and M: as many workers as cores that split the batch
    evenly (at least two), and half their envs a step (None where no two workers fit)."""
    workers = max(
        (w for w in range(2, min(num_envs, available_cores()) + 1) if num_envs % w == 0),
        default=None,
    )
    if workers is None:
        return None
    return workers, workers // 2 * (num_envs // workers)


def describe_async(batch_sizes: list[int]) -> str:
    """``N=8: M=4 on 2 workers, N=1: -`` for the "async" column's rows."""
    cells = []
    for n in batch_sizes:
        layout = async_layout(n)
        cells.append(
            f"N={n}: -" if layout is None else f"N={n}: M={layout[1]} on {layout[0]} workers"
        )
    return ", ".join(cells)


@dataclass
class Budget:
    max_env_steps: int  # per timed round
    max_seconds: float  # per timed round
    repeats: int
    warmup_seconds: float


def time_round(runner: Runner, budget: Budget) -> tuple[float, float]:
    """Env steps per second of one timed round, of wall time and of this process's CPU time.

    The round runs chunks of batch steps until a budget is spent.
    """
    chunk = max(1, 256 // runner.batch_size)
    max_batch_steps = max(chunk, budget.max_env_steps // runner.batch_size)
    done = 0
    cpu_start, start = time.process_time(), time.perf_counter()
    while done < max_batch_steps:
        runner.run(chunk)
        done += chunk
        if time.perf_counter() - start >= budget.max_seconds:
            break
    steps = done * runner.batch_size
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return steps / wall, steps / max(cpu, 1e-9)


def warm_up(runner: Runner, seconds: float) -> None:
    chunk = max(1, 64 // runner.batch_size)
    runner.run(chunk)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        runner.run(chunk)


def build_row(name: str, num_envs: int, seed: int, columns: tuple[str, ...]) -> dict[str, Runner]:
    """Every implementation of ``columns`` that applies to (``name``, ``num_envs``)."""
    makers: dict[str, Callable[[], Runner]] = {
        "gym loop": lambda: GymLoop(name, seed),
        "gym sync": lambda: GymVector(name, num_envs, seed, asynchronous=False),
        "gym async": lambda: GymVector(name, num_envs, seed, asynchronous=True),
    }
    for backend in CPU_BACKENDS:
        makers[backend] = lambda b=backend: CadenceRunner(name, num_envs, seed, b)
    layout = async_layout(num_envs)
    if layout is not None:
        makers["async"] = lambda: AsyncRunner(name, num_envs, seed, *layout)
    if has_vector_env(name):
        makers["gym vec"] = lambda: GymOwnVector(name, num_envs, seed)
        makers["vector"] = lambda: CadenceRunner(name, num_envs, seed, "vector")
    if has_tensor_env(name):
        makers["tensor"] = lambda: CadenceRunner(name, num_envs, seed, "tensor")
    return {column: makers[column]() for column in columns if column in makers}


def measure_row(
    runners: dict[str, Runner], budget: Budget
) -> tuple[dict[str, float], dict[str, float]]:
    """Medians of ``budget.repeats`` interleaved rounds per implementation: env steps per
    second of wall time, and per second of this process's CPU time."""
    for runner in runners.values():
        warm_up(runner, budget.warmup_seconds)
    rounds: dict[str, list[tuple[float, float]]] = {column: [] for column in runners}
    for _ in range(budget.repeats):
        for column, runner in runners.items():
            rounds[column].append(time_round(runner, budget))
    wall = {column: statistics.median(r for r, _ in rates) for column, rates in rounds.items()}
    cpu = {column: statistics.median(r for _, r in rates) for column, rates in rounds.items()}
    return wall, cpu


def run_row(
    name: str, num_envs: int, seed: int, budget: Budget, columns: tuple[str, ...]
) -> tuple[dict[str, float], dict[str, float]]:
    runners: dict[str, Runner] = {}
    try:
        runners = build_row(name, num_envs, seed, columns)
        return measure_row(runners, budget)
    finally:
        for runner in runners.values():
            runner.close()


def format_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M"
    return f"{rate / 1e3:.1f}k"


def print_row(label: str, rates: dict[str, float]) -> None:
    cells = "".join(f"{format_rate(rates.get(c)):>11}" for c in COLUMNS)
    print(f"{label:<22}{cells}", flush=True)


@dataclass
class Bar:
    """One throughput bar: a ratio (``unit="x"``) or a rate that must reach ``target``."""

    text: str
    value: float | None
    target: float
    unit: str = "x"

    def line(self) -> str:
        if self.value is None:
            return f"  SKIP  {self.text} (not measured in this run)"
        verdict = "PASS" if self.value >= self.target else "FAIL"
        value = f"{self.value:.2f}x" if self.unit == "x" else f"{format_rate(self.value)} steps/s"
        target = f"{self.target:g}x" if self.unit == "x" else f"{format_rate(self.target)} steps/s"
        return f"  {verdict}  {self.text:<62} {value:>14}  (bar >= {target})"


def ratio(table: Table, row: tuple[str, int], top: tuple[str, ...], bottom: str) -> float | None:
    """The fastest of columns ``top`` over column ``bottom``, both of ``row``."""
    rates = table.get(row, {})
    numerator = max((rates.get(c, 0.0) for c in top), default=0.0)
    denominator = rates.get(bottom)
    if not numerator or not denominator:
        return None
    return numerator / denominator


def bars(table: Table, tensor_envs: int) -> list[Bar]:
    """The project's throughput bars (the foundation issue), from one run's table."""
    cheetah, cartpole = ("HalfCheetah-v5", 8), ("CartPole-v1", 32)
    return [
        Bar(
            "parallel / serial, HalfCheetah-v5 x8",
            ratio(table, cheetah, ("parallel",), "serial"),
            1.6,
        ),
        Bar(
            "parallel / gym AsyncVectorEnv, HalfCheetah-v5 x8",
            ratio(table, cheetah, ("parallel",), "gym async"),
            3.0,
        ),
        Bar(
            "fastest CPU back end x32 / gym single-env loop, CartPole-v1",
            ratio(table, cartpole, CPU_BACKENDS, "gym loop"),
            0.8,
        ),
        Bar(
            "cadence vector / its gym vector env, CartPole-v1 x32",
            ratio(table, cartpole, ("vector",), "gym vec"),
            0.6,
        ),
        Bar(
            f"tensor CartPole-v1 x{tensor_envs} on CPU",
            table.get(("CartPole-v1", tensor_envs), {}).get("tensor"),
            5e6,
            unit="steps/s",
        ),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=100_000,
        help="max env steps per timed round (a round also stops at --seconds)",
    )
    # Many short rounds: each column is sampled all through the row's time, so bursts of
    # load from other processes land on every column alike.
    parser.add_argument("--seconds", type=float, default=0.05, help="max seconds per timed round")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds; the median is kept")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32], help="batch sizes")
    parser.add_argument("--envs-names", nargs="+", default=["CartPole-v1", "HalfCheetah-v5"])
    parser.add_argument(
        "--tensor-envs",
        type=int,
        default=4096,
        help="batch size of the extra CartPole row of the tensor-native and vector envs (0: none)",
    )
    parser.add_argument("--columns", nargs="+", choices=COLUMNS, default=list(COLUMNS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: batches of at most 8 envs, 3 short rounds each",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.steps, args.seconds, args.repeats, warmup_seconds=0.2)
    if args.quick:
        args.envs = [n for n in args.envs if n <= 8] or [1]
        budget = Budget(min(args.steps, 10_000), 0.05, 3, warmup_seconds=0.05)
    columns = tuple(args.columns)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"env steps/s, random policy, median of {budget.repeats} round(s) of"
        f" <= {budget.max_seconds} s | {cores} cores, load {os.getloadavg()[0]:.1f},"
        f" torch {torch.__version__}"
        f" ({torch.get_num_threads()} threads), gymnasium {gym.__version__}"
    )
    print(f"{'env x num_envs':<22}" + "".join(f"{c:>11}" for c in COLUMNS))
    if "async" in columns:
        print(f"(async: M of N envs returned a step: {describe_async(args.envs)})")
    table: Table = {}
    cpu_table: Table = {}  # per CPU second of this process: meaningful for in-process columns
    rows = [(name, n) for name in args.envs_names for n in args.envs]
    if args.tensor_envs and "tensor" in columns and has_tensor_env("CartPole-v1"):
        rows.append(("CartPole-v1", args.tensor_envs))
    start = time.perf_counter()
    for name, num_envs in rows:
        extra_row = ("gym vec", "vector", "tensor")
        row_columns = (
            columns if num_envs in args.envs else tuple(c for c in columns if c in extra_row)
        )
        row = (name, num_envs)
        table[row], cpu_table[row] = run_row(name, num_envs, args.seed, budget, row_columns)
        print_row(f"{name} x{num_envs}", table[row])
    print(
        f"\n(total {time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.1f})"
        " Bars, as ratios of columns of one row of this run:"
    )
    for bar in bars(table, args.tensor_envs):
        print(bar.line())
    print_cpu_check(cpu_table)
    print_async_check(table, cpu_table)
    return 0


def print_async_check(table: Table, cpu_table: Table) -> None:
    """Asynchronous over lockstep stepping, and what each costs this process (the parent)
    per env transition in CPU time (its waits for the workers included), for each row."""
    for (name, num_envs), rates in table.items():
        if "async" not in rates or "parallel" not in rates:
            continue
        cpu = cpu_table[(name, num_envs)]
        print(
            f"  async (M={async_layout(num_envs)[1]}) / parallel, {name} x{num_envs}:"
            f" {rates['async'] / rates['parallel']:.2f}x; parent CPU per transition"
            f" {1e6 / cpu['async']:.1f} us vs {1e6 / cpu['parallel']:.1f} us"
        )


def print_cpu_check(cpu_table: Table) -> None:
    """The CartPole bar again in CPU time, which other processes' load barely moves.

    Only columns that step in this process count (``parallel`` and ``gym async`` do
    their work in child processes).
    """
    cartpole = ("CartPole-v1", 32)
    value = ratio(cpu_table, cartpole, ("serial", "thread"), "gym loop")
    if value is not None:
        print(
            "  In CPU time of this process (robust to load from other processes):"
            f" in-process back end x32 / gym loop, CartPole-v1: {value:.2f}x"
        )


if __name__ == "__main__":
    sys.exit(main())
