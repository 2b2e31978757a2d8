"""How much faster can two worker processes step a batch than one process can, on this machine?

`env_throughput.py` compares `ParallelEnvironment` with `SerialEnvironment`. This
script measures the ceilings of that ratio, in one run with interleaved rounds,
for a batch of ``--envs`` envs split over two processes:

- ``free``: two processes stepping their halves of plain Gymnasium envs with no
  synchronisation at all, over one process stepping the whole batch: what the
  cores give.
- ``lockstep``: the same two processes stepping in lockstep, as a batched env
  must (the parent stores a step number in shared memory, each worker steps its
  half and stores it back, everyone polls while yielding the core), over one
  process: where synchronous process-parallel stepping stands here.
- ``lockstep, cadence work``: the same barrier, its workers doing exactly what a
  `ParallelEnvironment` worker does per step (cadence's env stack, reading their
  rows of the actions, writing their rows of a `TimeStepBuffer`), over
  `SerialEnvironment`: the ceiling of ``parallel / serial`` with a parent that
  costs nothing per step.
- ``cadence``: `ParallelEnvironment` over `SerialEnvironment`, the same envs.
- ``async, cadence work``: the same two workers doing a `ParallelEnvironment`
  worker's work, each rung again as soon as the parent sees its answer, over
  `SerialEnvironment`: the ceiling of ``async / serial`` with a parent that costs
  nothing per step (``--parent-us`` gives that parent busy work per step instead,
  to see what each microsecond of the parent's work costs where it has no core of
  its own).
- ``async``: `ParallelEnvironment` stepping asynchronously (``async_batch_size`` =
  half the batch: each step sends actions for the half it last returned and returns
  the half ready next), over `SerialEnvironment`; the parent's per-step work (writing
  actions, reading the ready rows) is timed. Its bar: at least 0.85x the free ratio.

The barriers' parent does nothing per step but the barrier itself; barrier
workers block while the other columns are timed, so that they take no time from them.

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
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory
from multiprocessing.synchronize import Event

import gymnasium as gym
import numpy as np
import torch

from cadence.envs import GymEnvFactory, ParallelEnvironment, SerialEnvironment
from cadence.envs.buffer import TimeStepBuffer, action_to_numpy
from cadence.envs.parallel_worker import _all_envs_stepper, action_layout_for
from cadence.envs.shared_batch import leaf
from cadence.envs.worker_layout import worker_cores

_STOP = -1
# Control block: the parent's step number, each worker's answer (or step count), ready flags,
# whether the workers should block on their event (while the other columns are timed), and
# each worker's own step number (asynchronous stepping).
_SLOTS, _READY, _PAUSED, _ASYNC = 8, 3, 5, 6
FREE, LOCKSTEP, CADENCE_WORK = "free", "lockstep", "cadence work"
ASYNC_WORK = "async, cadence work"


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


def _gym_stepper(name: str, first: int, count: int, seed: int) -> Callable[[], None]:
    """One step of plain Gymnasium envs ``first .. first + count - 1``, reset when done."""
    envs = _make(name, count, seed + first)
    actions = [env.action_space.sample() for env in envs]
    return lambda: _step_all(envs, actions)


def _cadence_stepper(name: str, first: int, count: int, seed: int) -> Callable[[], None]:
    """One step as a `ParallelEnvironment` worker takes it (its own hot path), minus the doorbell."""
    envs = [GymEnvFactory(name, first + i, seed)() for i in range(count)]
    env = envs[0]
    buffer = TimeStepBuffer(env.observation_spec, env.action_spec, env.env_info_spec, count)
    layout = action_layout_for(env.action_spec, count)
    actions = layout.views(bytearray(layout.nbytes))
    generator = torch.Generator().manual_seed(seed + first)
    sample = action_to_numpy(env.action_spec.sample((count,), generator))
    for path, array in actions.items():  # "" for a flat action, else each leaf's path
        np.copyto(array, sample if path == "" else leaf(sample, path))
    step = _all_envs_stepper(envs, 0, {"actions": actions, "buffer": buffer})

    def run() -> None:
        error = step()
        if error is not None:
            raise RuntimeError(f"an env failed: {error}")

    return run


def _worker(
    name: str,
    first: int,
    count: int,
    seed: int,
    shm_name: str,
    slot: int,
    mode: str,
    core: int | None,
    resume: Event,
) -> None:
    """Steps envs ``first ..`` freely while the parent's number is positive, in lockstep
    (the parent's number), or on the parent's number for this worker alone (async)."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    shm = SharedMemory(name=shm_name)
    control = np.ndarray((_SLOTS,), np.int64, buffer=shm.buf)
    stepper = _gym_stepper if mode in (FREE, LOCKSTEP) else _cadence_stepper
    step = stepper(name, first, count, seed)
    command = _ASYNC + slot if mode == ASYNC_WORK else 0
    control[_READY + slot] = 1
    done = 0
    while True:
        while control[command] == done:
            if control[_PAUSED]:
                resume.wait()
            else:
                os.sched_yield()
        if control[command] == _STOP:
            break
        if mode == FREE:  # count steps until told to stop
            while control[0] != _STOP:
                step()
                control[1 + slot] += count
            break
        step()
        done = int(control[command])
        control[1 + slot] = done
    del control
    shm.close()


class TwoWorkers:
    """Two processes, each hosting half the batch, driven through a shared control block.

    They are pinned to cores as `ParallelEnvironment` pins its workers (``worker_cores``).
    """

    def __init__(self, name: str, num_envs: int, seed: int, mode: str, parent_us: float = 0.0):
        self.shm = SharedMemory(create=True, size=64)
        self.control = np.ndarray((_SLOTS,), np.int64, buffer=self.shm.buf)
        self.control[:] = 0
        self.free = mode == FREE
        self.asynchronous = mode == ASYNC_WORK
        self.parent_s = parent_us * 1e-6
        context = mp.get_context("spawn")
        self.resume = context.Event()
        self.resume.set()
        half = num_envs // 2
        cores = worker_cores(2, None) or [None, None]
        self.processes = [
            context.Process(
                target=_worker,
                args=(name, w * half, half, seed, self.shm.name, w, mode, cores[w], self.resume),
            )
            for w in range(2)
        ]
        for process in self.processes:
            process.start()
        while not self.control[_READY : _READY + 2].all():  # both have built their envs
            time.sleep(0.01)
        self._pause()

    def rate(self, seconds: float, num_envs: int) -> float:
        self._resume()
        if self.free:
            return self._free_rate(seconds)
        if self.asynchronous:
            return self._async_rate(seconds, num_envs)
        self._step()  # untimed: the workers may still have been blocked
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self._step()
            steps += num_envs
        rate = steps / (time.perf_counter() - start)
        self._pause()
        return rate

    def _pause(self) -> None:
        """Makes the waiting workers block: they take no time from the other columns."""
        self.resume.clear()
        self.control[_PAUSED] = 1

    def _resume(self) -> None:
        self.control[_PAUSED] = 0
        self.resume.set()

    def _step(self) -> None:
        control = self.control
        control[0] += 1
        target = control[0]
        while control[1] != target or control[2] != target:
            os.sched_yield()

    def _async_rate(self, seconds: float, num_envs: int) -> float:
        """Each worker is rung again as soon as the parent sees its answer (after
        ``parent_s`` of busy work); answered steps count."""
        control, half = self.control, num_envs // 2
        for worker in range(2):  # untimed: the workers may still have been blocked
            control[_ASYNC + worker] += 1
        self._drain()
        for worker in range(2):
            control[_ASYNC + worker] += 1
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            answered = [w for w in range(2) if control[1 + w] == control[_ASYNC + w]]
            if not answered:
                os.sched_yield()
            for worker in answered:
                _busy(self.parent_s)
                control[_ASYNC + worker] += 1
                steps += half
        rate = steps / (time.perf_counter() - start)
        self._drain()
        self._pause()
        return rate

    def _drain(self) -> None:
        control = self.control
        while control[1] != control[_ASYNC] or control[2] != control[_ASYNC + 1]:
            os.sched_yield()

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
        self.control[0] = self.control[_ASYNC] = self.control[_ASYNC + 1] = _STOP
        self._resume()
        for process in self.processes:
            process.join(timeout=10)
        del self.control
        self.shm.close()
        self.shm.unlink()


def _busy(seconds: float) -> None:
    """Keeps this process busy for ``seconds`` (a stand-in for a parent's work per step)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


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


def async_rate(env, actions: list[torch.Tensor], seconds: float, returned: list[int]) -> float:
    """`cadence_rate` of an asynchronous env: each step sends actions for the rows it last
    returned (``returned``: their number, carried from call to call)."""
    steps, start, t = 0, time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        returned[0] = len(env.step(actions[t % len(actions)][: returned[0]]).env_id)
        t += 1
        steps += returned[0]
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
    parser.add_argument(
        "--parent-us",
        type=float,
        default=0.0,
        help="busy work per step of the async ceiling's parent, in microseconds",
    )
    args = parser.parse_args(argv)
    name, n = args.env, args.envs
    print(
        f"{name} x{n}, two processes vs one | {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )

    one = _make(name, n, args.seed)
    one_process_rate(one, 1.0)  # warm up
    free = TwoWorkers(name, n, args.seed, FREE)
    # Free workers cannot be paused: one measurement, between two of the single process.
    before = one_process_rate(one, 1.0)
    free_rate = free.rate(2.0, n)
    free.close()
    free_ratio = free_rate / statistics.mean([before, one_process_rate(one, 1.0)])

    barriers = {
        mode: TwoWorkers(name, n, args.seed, mode, args.parent_us)
        for mode in (LOCKSTEP, CADENCE_WORK, ASYNC_WORK)
    }
    factories = [GymEnvFactory(name, i, args.seed) for i in range(n)]
    serial, parallel = SerialEnvironment(factories), ParallelEnvironment(factories, num_workers=2)
    generator = torch.Generator().manual_seed(args.seed)
    actions = [serial.action_spec.sample((n,), generator) for _ in range(64)]
    asynchronous = ParallelEnvironment(factories, num_workers=2, async_batch_size=n // 2)
    serial.reset()
    parallel.reset()
    asynchronous.reset()
    returned = [n]  # the reset returned every env
    columns: dict[str, Callable[[], float]] = {
        "one process": lambda: one_process_rate(one, args.seconds),
        LOCKSTEP: lambda: barriers[LOCKSTEP].rate(args.seconds, n),
        "serial": lambda: cadence_rate(serial, actions, args.seconds),
        CADENCE_WORK: lambda: barriers[CADENCE_WORK].rate(args.seconds, n),
        "parallel": lambda: cadence_rate(parallel, actions, args.seconds),
        ASYNC_WORK: lambda: barriers[ASYNC_WORK].rate(args.seconds, n),
        "async": lambda: async_rate(asynchronous, actions, args.seconds, returned),
    }
    rates: dict[str, list[float]] = {key: [] for key in columns}
    try:
        for column in columns.values():
            column()  # warm up
        for _ in range(args.rounds):
            for key, column in columns.items():
                rates[key].append(column())
    finally:
        for barrier in barriers.values():
            barrier.close()
        serial.close()
        parallel.close()
        asynchronous.close()

    def ratio(over: str, under: str) -> float:  # the median of the rounds' ratios
        return statistics.median(a / b for a, b in zip(rates[over], rates[under], strict=True))

    print(f"  {'free':<28} {free_rate / 1e3:8.1f}k env steps/s  (one measurement)")
    for key, values in rates.items():
        print(f"  {key:<28} {statistics.median(values) / 1e3:8.1f}k env steps/s")
    print(f"  free two processes / one:            {free_ratio:.2f}x  (what the cores give)")
    print(
        f"  lockstep two processes / one:        {ratio(LOCKSTEP, 'one process'):.2f}x"
        "  (a bare barrier: where synchronous stepping stands here)"
    )
    print(
        f"  lockstep, cadence work / serial:     {ratio(CADENCE_WORK, 'serial'):.2f}x"
        "  (the ceiling of parallel / serial: a parent that costs nothing per step)"
    )
    print(f"  cadence parallel / serial:           {ratio('parallel', 'serial'):.2f}x")
    ceiling = ratio(ASYNC_WORK, "serial")
    print(
        f"  async, cadence work / serial:        {ceiling:.2f}x  (the ceiling of async / serial:"
        f" a parent that costs {args.parent_us:g} us per step; {ceiling / free_ratio:.2f}x"
        " the free ratio)"
    )
    async_ratio = ratio("async", "serial")
    print(
        f"  cadence async / serial:              {async_ratio:.2f}x  (M = {n // 2} of N = {n};"
        f" {async_ratio / free_ratio:.2f}x the free ratio, bar 0.85x)"
    )
    print(
        f"  cadence parallel / that ceiling:     {ratio('parallel', CADENCE_WORK):.2f}x"
        "  (what the parent's work per step leaves)"
    )
    print(
        f"  cadence async / that ceiling:        {ratio('async', ASYNC_WORK):.2f}x"
        "  (what the async parent's work per step leaves)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
