"""Asynchronous acquisition with stragglers: the `Batcher`'s lockstep ``get()`` vs ``get(min_slots=...)``.

Every env is CartPole-v1 whose step now and then pauses (a straggler: with probability
``--pause-p`` a step sleeps ``--pause-s``, drawn from the env's own seed), so a worker
whose env pauses holds back a whole lockstep acquisition. Columns, in env steps/s:

- ``lockstep``: ``execute()`` + ``get()``: every worker's acquisition, then the next;
  4 of them a round;
- ``async``: ``get(min_slots=n_slots // 2)`` + ``execute()`` (the workers taken start
  again while the others go on), until 4 times as many segments as slots were taken,
  then a ``get()`` of the rest, so that no work runs on between rounds.

The policy is a fixed random linear layer, greedy, one torch thread a process. Both
columns are built and warmed up, then timed in ``--repeats`` interleaved rounds and their
median round kept; on a machine shared with other jobs compare the ratio, not the rates.

    python benchmarks/batcher_async.py            # 4 processes x 4 envs, 50 steps, about a minute
    python benchmarks/batcher_async.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

from cadence.collect import Agent, Batcher, make_gym_env
from cadence.data import DictTensor
from cadence.envs import PyEnvironmentWrapper

ACQUISITIONS = 4  # per round: as many segments per slot


class Straggler(PyEnvironmentWrapper):
    """An env whose step sleeps ``pause_s`` with probability ``pause_p``."""

    def __init__(self, env, seed: int, pause_p: float, pause_s: float):
        super().__init__(env)
        self._random = np.random.default_rng(seed)
        self._pause_p, self._pause_s = pause_p, pause_s

    def step(self, action):
        if self._random.random() < self._pause_p:
            time.sleep(self._pause_s)
        return self._env.step(action)


def straggler_env(seed: int, pause_p: float, pause_s: float):
    return Straggler(make_gym_env(seed=seed, name="CartPole-v1"), seed, pause_p, pause_s)


class LinearAgent(Agent):
    """Greedy on a fixed random linear layer of CartPole's frame."""

    def __init__(self):
        self.model = torch.nn.Linear(4, 2)

    def __call__(self, state, observation, agent_info, history=None):
        return DictTensor({"action": self.model(observation["frame"]).argmax(-1)}), state


def lockstep_round(batcher: Batcher) -> int:
    """``ACQUISITIONS`` whole acquisitions."""
    steps = 0
    for _ in range(ACQUISITIONS):
        batcher.execute()
        trajectories, _ = batcher.get()
        steps += int(trajectories.trajectories.lengths.sum())
    return steps


def async_round(batcher: Batcher) -> int:
    """Takes finished workers, restarting them, until ``ACQUISITIONS`` times as many segments
    as slots came back, then the rest: a round starts and ends with no worker in flight."""
    batcher.execute()
    steps = taken = 0
    while True:
        done = taken >= ACQUISITIONS * batcher.n_slots
        trajectories, _ = batcher.get(min_slots=None if done else batcher.n_slots // 2)
        steps += int(trajectories.trajectories.lengths.sum())
        taken += trajectories.n_elems()
        if done:
            return steps
        batcher.execute()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--envs", type=int, default=4, help="envs per process")
    parser.add_argument("--steps", type=int, default=50, help="steps of every env per round")
    parser.add_argument("--pause-p", type=float, default=0.01, help="chance a step pauses")
    parser.add_argument("--pause-s", type=float, default=0.02, help="how long it pauses")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds; the median is kept")
    parser.add_argument("--quick", action="store_true", help="2 x 2 envs, 10 steps, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.processes, args.envs, args.steps, args.repeats = 2, 2, 10, 3
    torch.set_num_threads(1)
    env_args = {"pause_p": args.pause_p, "pause_s": args.pause_s}
    shape = (args.steps, args.processes, args.envs, straggler_env, LinearAgent)
    rounds = {"lockstep": lockstep_round, "async": async_round}
    batchers: dict[str, Batcher] = {}
    try:
        for column in rounds:
            batchers[column] = Batcher(*shape, env_args=env_args)
        for batcher in batchers.values():
            batcher.reset()
        for column, batcher in batchers.items():
            rounds[column](batcher)  # warm-up
        rates = {column: [] for column in batchers}
        for _ in range(args.repeats):
            for column, batcher in batchers.items():
                start = time.perf_counter()
                steps = rounds[column](batcher)
                rates[column].append(steps / (time.perf_counter() - start))
    finally:
        for batcher in batchers.values():
            batcher.close()
    median = {column: statistics.median(values) for column, values in rates.items()}
    print(
        f"CartPole-v1, {args.processes} x {args.envs} envs, {args.steps} steps, a step pauses "
        f"{args.pause_s * 1e3:g} ms with p={args.pause_p:g}; median of {args.repeats} rounds | "
        f"{len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f}"
    )
    for column, rate in median.items():
        print(f"  {column:<9} {rate / 1e3:8.1f}k env steps/s")
    print(f"  async / lockstep {median['async'] / median['lockstep']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
