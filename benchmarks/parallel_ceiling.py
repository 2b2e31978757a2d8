"""How much faster can two worker processes step a batch than one process can, on this machine?

`env_throughput.py` compares `ParallelEnvironment` with `SerialEnvironment`. This
script measures the ceiling of that ratio with no cadence code at all, in one run
with interleaved rounds, for a batch of ``--envs`` Gymnasium envs split over two
processes:

- ``free``: two processes stepping their halves with no synchronisation at all,
  over one process stepping the whole batch: what the cores give.
- ``lockstep``: the same two processes stepping in lockstep, as a batched env
  must (the parent stores a step number in shared memory, each worker steps its
  half and stores it back, everyone polls while yielding the core), over one
  process: where synchronous process-parallel stepping stands here, before it
  spends anything on actions, observations or tensors (this bare barrier's
  parent spins, yielding, all through the step).
- ``cadence``: `ParallelEnvironment` over `SerialEnvironment`, the same envs.

    python benchmarks/parallel_ceiling.py                     # HalfCheetah-v5, 8 envs
    python benchmarks/parallel_ceiling.py --env CartPole-v1 --envs 32
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing.shared_memory import SharedMemory

import gymnasium as gym
import numpy as np
import torch

from cadence.envs import GymEnvFactory, ParallelEnvironment, SerialEnvironment

_STOP = -1
# Control block: the parent's step number, each worker's answer (or step count), ready flags.
_SLOTS, _READY = 5, 3


def _make(name: str, count: int, seed: int) -> list[gym.Env]:
    envs = [gym.make(name) for _ in range(count)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
        env.action_space.seed(seed + i)
    return envs


def _step_all(envs: list[gym.Env], actions: list) -> None:
    for env, action in zip(envs, actions, strict=True):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def _worker(name: str, count: int, seed: int, shm_name: str, slot: int, free: bool) -> None:
    """Steps ``count`` envs: freely while the parent's number is positive, or in lockstep."""
    shm = SharedMemory(name=shm_name)
    control = np.ndarray((_SLOTS,), np.int64, buffer=shm.buf)
    envs = _make(name, count, seed)
    actions = [env.action_space.sample() for env in envs]
    control[_READY + slot] = 1
    done = 0
    while True:
        while control[0] == done:
            os.sched_yield()
        if control[0] == _STOP:
            break
        if free:  # count steps until told to stop
            while control[0] != _STOP:
                _step_all(envs, actions)
                control[1 + slot] += count
            break
        _step_all(envs, actions)
        done = int(control[0])
        control[1 + slot] = done
    del control
    shm.close()


class TwoWorkers:
    """Two processes, each hosting half the batch, driven through a shared control block."""

    def __init__(self, name: str, num_envs: int, seed: int, free: bool):
        self.shm = SharedMemory(create=True, size=64)
        self.control = np.ndarray((_SLOTS,), np.int64, buffer=self.shm.buf)
        self.control[:] = 0
        self.free = free
        context = mp.get_context("spawn")
        half = num_envs // 2
        self.processes = [
            context.Process(
                target=_worker, args=(name, half, seed + w * half, self.shm.name, w, free)
            )
            for w in range(2)
        ]
        for process in self.processes:
            process.start()
        while not self.control[_READY:].all():  # both have built their envs
            time.sleep(0.01)

    def rate(self, seconds: float, num_envs: int) -> float:
        if self.free:
            return self._free_rate(seconds)
        control, steps, start = self.control, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            control[0] += 1
            target = control[0]
            while control[1] != target or control[2] != target:
                os.sched_yield()
            steps += num_envs
        return steps / (time.perf_counter() - start)

    def _free_rate(self, seconds: float) -> float:
        # Free workers run once, for the whole measurement (they cannot be paused).
        control = self.control
        control[0] = 1
        time.sleep(0.5)  # warm up
        before, start = control[1] + control[2], time.perf_counter()
        time.sleep(seconds)
        steps = control[1] + control[2] - before
        rate = steps / (time.perf_counter() - start)
        control[0] = _STOP
        return rate

    def close(self) -> None:
        self.control[0] = _STOP
        for process in self.processes:
            process.join(timeout=10)
        del self.control
        self.shm.close()
        self.shm.unlink()


def one_process_rate(envs: list[gym.Env], seconds: float) -> float:
    actions = [env.action_space.sample() for env in envs]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _step_all(envs, actions)
        steps += len(envs)
    return steps / (time.perf_counter() - start)


def cadence_rate(env, actions: list[torch.Tensor], seconds: float) -> float:
    steps, start, t = 0, time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        env.step(actions[t % len(actions)])
        t += 1
        steps += env.batch_size
    return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--envs", type=int, default=8, help="batch size (even)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=0.2, help="per round and column")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    name, n = args.env, args.envs
    print(f"{name} x{n}, two processes vs one | {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")

    one = _make(name, n, args.seed)
    one_process_rate(one, 1.0)  # warm up
    free = TwoWorkers(name, n, args.seed, free=True)
    # Free workers cannot be paused: one measurement, between two of the single process.
    rates = {"one process": [one_process_rate(one, 1.0)]}
    rates["free"] = [free.rate(2.0, n)]
    free.close()
    rates["one process"].append(one_process_rate(one, 1.0))

    lockstep = TwoWorkers(name, n, args.seed, free=False)
    factories = [GymEnvFactory(name, i, args.seed) for i in range(n)]
    serial, parallel = SerialEnvironment(factories), ParallelEnvironment(factories, num_workers=2)
    generator = torch.Generator().manual_seed(args.seed)
    actions = [serial.action_spec.sample((n,), generator) for _ in range(64)]
    serial.reset()
    parallel.reset()
    columns = {
        "one process (lockstep row)": lambda: one_process_rate(one, args.seconds),
        "lockstep": lambda: lockstep.rate(args.seconds, n),
        "serial": lambda: cadence_rate(serial, actions, args.seconds),
        "parallel": lambda: cadence_rate(parallel, actions, args.seconds),
    }
    try:
        for column in columns.values():
            column()  # warm up
        for _ in range(args.rounds):
            for key, column in columns.items():
                rates.setdefault(key, []).append(column())
    finally:
        lockstep.close()
        serial.close()
        parallel.close()
    median = {key: statistics.median(values) for key, values in rates.items()}
    for key, value in median.items():
        print(f"  {key:<28} {value / 1e3:8.1f}k env steps/s")
    print(f"  free two processes / one:      {median['free'] / median['one process']:.2f}x"
          "  (what the cores give)")
    print(f"  lockstep two processes / one:  "
          f"{median['lockstep'] / median['one process (lockstep row)']:.2f}x"
          "  (a bare spin barrier, no cadence code: where synchronous stepping stands here)")
    print(f"  cadence parallel / serial:     {median['parallel'] / median['serial']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
