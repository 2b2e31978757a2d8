"""TorchRL's multi-process collector, timed one round at a time on the parent's request.

Builds TorchRL's ``MultiSyncCollector`` (named ``MultiSyncDataCollector`` before
torchrl 0.12) as a TorchRL user collects from ``--workers`` processes: each worker
steps a ``SerialEnv`` of ``--envs`` ``GymEnv``\\ s (envs stepped one after the other
inside the worker, as the `Batcher`'s workers do; a ``ParallelEnv`` there would start
a process per env), with the policy of ``benchmarks/batcher_throughput.py``: an MLP
``obs -> 64 -> tanh -> 64 -> tanh -> actions``, acting greedily (the argmax as a one-hot
for a discrete action, ``tanh`` of the output for a continuous one), with one torch
thread per process. A batch is ``--steps`` steps of every env (``frames_per_batch =
workers * envs * steps``), and a round is ``--batches`` whole batches, counted from
asking for the first to holding the last.

It is driven over stdin/stdout, so that its rounds interleave with the other columns
of the parent's benchmark: it prints ``ready`` once built and warmed up, then answers
each ``round`` line with a JSON line ``{"env_steps": ..., "seconds": ...}``, and stops
at ``quit`` (or end of input). Run it in the TorchRL virtual environment
(``benchmarks/peer_env.sh`` makes it)::

    printf 'round\\nquit\\n' | .venvs/torchrl/bin/python benchmarks/peers/torchrl_collector.py \\
        --env CartPole-v1 --workers 2 --envs 16 --steps 100
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import torch
import torchrl
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import MultiSyncCollector
from torchrl.envs import GymEnv, SerialEnv

HIDDEN = 64


class GreedyPolicy(nn.Module):
    """The benchmark's MLP, acting greedily: a one-hot argmax, or ``tanh`` of the output."""

    def __init__(self, obs_dim: int, action_dim: int, discrete: bool):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(obs_dim, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, action_dim),
        )
        self.discrete = discrete

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.layers(observation.float())
        if self.discrete:
            return nn.functional.one_hot(out.argmax(-1), out.shape[-1])
        return torch.tanh(out)


def make_serial_env(name: str, n_envs: int) -> SerialEnv:
    return SerialEnv(n_envs, functools.partial(GymEnv, name))


def build(args: argparse.Namespace) -> tuple[MultiSyncCollector, int]:
    probe = GymEnv(args.env)
    obs_dim = probe.observation_spec["observation"].shape[-1]
    action_spec = probe.action_spec
    discrete = action_spec.domain == "discrete"
    action_dim = action_spec.shape[-1]
    probe.close()
    torch.manual_seed(args.seed)
    policy = TensorDictModule(
        GreedyPolicy(obs_dim, action_dim, discrete), in_keys=["observation"], out_keys=["action"]
    )
    frames = args.workers * args.envs * args.steps
    collector = MultiSyncCollector(
        [functools.partial(make_serial_env, args.env, args.envs)] * args.workers,
        policy,
        frames_per_batch=frames,
        total_frames=-1,
        num_threads=1,
        num_sub_threads=1,
    )
    collector.set_seed(args.seed)
    return collector, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--workers", type=int, default=2, help="collector processes")
    parser.add_argument("--envs", type=int, default=16, help="envs per worker (a SerialEnv)")
    parser.add_argument("--steps", type=int, default=100, help="steps of every env per batch")
    parser.add_argument("--batches", type=int, default=1, help="batches per timed round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches first")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    collector, frames = build(args)
    batches = iter(collector)
    try:
        for _ in range(args.warmup):
            next(batches)
        print(f"ready torchrl {torchrl.__version__}", flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            start = time.perf_counter()
            steps = 0
            for _ in range(args.batches):
                steps += next(batches).numel()
            seconds = time.perf_counter() - start
            if steps != args.batches * frames:
                raise RuntimeError(f"expected {args.batches * frames} frames, got {steps}")
            print(json.dumps({"env_steps": steps, "seconds": seconds}), flush=True)
    finally:
        collector.shutdown()


if __name__ == "__main__":
    main()
    # At interpreter exit, TorchRL's weight-sync scheme (torchrl 0.14.1) starts a queue's
    # feeder thread in its __del__ and waits for ever for it to start: leave without the
    # exit-time finalisers, the workers being shut down already.
    sys.stdout.flush()
    os._exit(0)
