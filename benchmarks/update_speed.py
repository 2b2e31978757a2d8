"""Off-policy gradient updates per second (SAC; TD3, DDPG): cadence vs Stable-Baselines3, in one run.

Both sides train SAC (or, with ``--algorithm``, TD3 or DDPG) at batch 256 with 256x256 ReLU networks (twin critics, automatic
entropy tuning) from a pre-filled replay buffer, so only the update is timed: cadence
samples its minibatches as training does (``replay_minibatches``: a block's windows drawn
at once, each minibatch read when it is trained on), preprocesses each and calls
``SACAlgorithm.update``; SB3 runs ``model.train(gradient_steps=N, batch_size=256)``, which
samples one minibatch per step from its own buffer. The two alternate in blocks of N
updates and each side's rate is the median over its blocks, so a machine whose load
changes during the run slows both alike.

    python benchmarks/update_speed.py --threads 1 --repeats 7
    python benchmarks/update_speed.py --device cuda --compile off default reduce-overhead

On a GPU (``--device cuda``) both sides' networks and buffers live there, and the
``reduce-overhead`` mode replays cadence's compiled update as a CUDA graph.

Shapes: Pendulum-like (obs 3, action 1) and HalfCheetah-like (obs 17, action 6).

Each shape's table also gives the update's matmul floor: the FLOPs of its matrix
multiplies (counted on one cadence update: forward and backward, about 0.6 GFLOP at
256x256, batch 256) over this machine's matmul peak at the same threads
(`matmul_peak.py`, torch's BLAS: MKL), as the most updates/s any implementation could
reach, and the fraction of that peak each side reaches. Both sides multiply with torch's
BLAS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from matmul_peak import count_flops, matmul_peak_gflops

SHAPES = {"pendulum": (3, 1), "halfcheetah": (17, 6)}
BATCH_SIZE = 256
HIDDEN = (256, 256)
BUFFER_SIZE = 10_000
TARGET_RATIO = 2.0


def make_cadence(
    obs_dim: int,
    act_dim: int,
    compile_mode: str,
    device: str = "cpu",
    algorithm: str = "sac",
) -> Callable[[int], None]:
    """A function running ``n`` cadence updates of ``algorithm`` on a pre-filled buffer, the
    networks and the buffer on ``device``."""
    from cadence.accel import compile_update
    from cadence.algorithms.ddpg import DDPGConfig, make_ddpg
    from cadence.algorithms.off_policy import replay_minibatches
    from cadence.algorithms.off_policy_config import OffPolicyConfig
    from cadence.algorithms.sac import SACConfig, make_sac
    from cadence.algorithms.td3 import TD3Config, make_td3
    from cadence.data.specs import BoundedTensorSpec, TensorSpec
    from cadence.networks import NetworkConfig
    from cadence.replay.buffer import ReplayBuffer

    network = NetworkConfig(hidden_sizes=HIDDEN, activation="relu", orthogonal_init=False)
    action_spec = BoundedTensorSpec((act_dim,), minimum=-1.0, maximum=1.0)
    make, config = {
        "sac": (make_sac, SACConfig),
        "td3": (make_td3, TD3Config),
        "ddpg": (make_ddpg, DDPGConfig),
    }[algorithm]
    learner = make(config(compile=compile_mode), TensorSpec((obs_dim,)), action_spec, network)
    compile_update(learner, compile_mode)  # what the trainer does for `algorithm.compile`
    learner.to(device)
    buffer = ReplayBuffer(num_envs=1, capacity=BUFFER_SIZE, device=device)
    steps = BUFFER_SIZE
    buffer.add_sequence(
        {
            "time_step": {
                "step_type": torch.ones(steps, 1, dtype=torch.int64),
                "reward": torch.randn(steps, 1),
                "discount": torch.ones(steps, 1),
                "observation": torch.randn(steps, 1, obs_dim),
                "prev_action": torch.rand(steps, 1, act_dim) * 2 - 1,
                "env_id": torch.zeros(steps, 1, dtype=torch.int64),
                "env_info": {},
            },
            "action": torch.rand(steps, 1, act_dim) * 2 - 1,
            "info": {},
        }
    )
    learner.train()

    def run(n: int) -> None:
        # The training path (`OffPolicyScheme`): n minibatches drawn at once, each read when
        # trained on, with only the fields the algorithm reads.
        config = OffPolicyConfig(mini_batch_size=BATCH_SIZE, num_updates_per_train_iter=n)
        for sample in replay_minibatches(buffer, config, learner.replay_fields):
            learner.update(learner.preprocess_experience(sample))
        if device != "cpu":
            torch.cuda.synchronize(device)

    return run


def make_sb3(
    obs_dim: int, act_dim: int, device: str = "cpu", algorithm: str = "sac"
) -> Callable[[int], None]:
    """A function running ``n`` Stable-Baselines3 updates of ``algorithm`` on a pre-filled
    buffer."""
    import gymnasium as gym
    from stable_baselines3 import DDPG, SAC, TD3
    from stable_baselines3.common.logger import configure

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)

    model = {"sac": SAC, "td3": TD3, "ddpg": DDPG}[algorithm](
        "MlpPolicy",
        Shapes(),
        batch_size=BATCH_SIZE,
        buffer_size=BUFFER_SIZE,
        policy_kwargs={"net_arch": list(HIDDEN)},
        device=device,
        seed=0,
    )
    model.set_logger(configure(None, []))
    buffer = model.replay_buffer
    rng = np.random.default_rng(0)
    buffer.observations[:] = rng.standard_normal(buffer.observations.shape, np.float32)
    buffer.next_observations[:] = rng.standard_normal(buffer.next_observations.shape, np.float32)
    buffer.actions[:] = rng.uniform(-1, 1, buffer.actions.shape).astype(np.float32)
    buffer.rewards[:] = rng.standard_normal(buffer.rewards.shape, np.float32)
    buffer.full = True

    def run(n: int) -> None:
        model.train(gradient_steps=n, batch_size=BATCH_SIZE)
        if device != "cpu":
            torch.cuda.synchronize(device)

    return run


def measure(
    runners: dict[str, Callable[[int], None]], block: int, repeats: int
) -> dict[str, float]:
    """Median updates/s of each runner, the runners alternating block by block."""
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            run(block)
            rates[name].append(block / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shapes", nargs="+", choices=sorted(SHAPES), default=["pendulum", "halfcheetah"]
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads, the same for both sides"
    )
    parser.add_argument("--block", type=int, default=50, help="updates per timed block")
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per side")
    parser.add_argument(
        "--compile",
        nargs="+",
        default=["off", "default"],
        help="cadence's compile modes to measure ('off' is eager)",
    )
    parser.add_argument("--algorithm", choices=["sac", "td3", "ddpg"], default="sac")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where both sides' networks and buffers live (e.g. cuda; on a GPU the "
        "matmul floor, a CPU figure, is left out)",
    )
    parser.add_argument("--skip-sb3", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.algorithm.upper()} updates/s, batch {BATCH_SIZE}, {HIDDEN} networks, {args.threads} torch thread(s), "
        f"load average {load:.1f} on {os.cpu_count()} cpus",
        flush=True,
    )
    failed = False
    for shape in args.shapes:
        obs_dim, act_dim = SHAPES[shape]
        runners: dict[str, Callable[[int], None]] = {}
        for mode in args.compile:
            runners[f"cadence[{mode}]"] = make_cadence(
                obs_dim, act_dim, mode, args.device, args.algorithm
            )
        if not args.skip_sb3:
            runners["sb3"] = make_sb3(obs_dim, act_dim, args.device, args.algorithm)
        for name, run in runners.items():  # warm-up (and compilation), not timed
            start = time.perf_counter()
            run(5)
            print(f"  {shape} {name}: warm-up {time.perf_counter() - start:.1f} s", flush=True)
        rates = measure(runners, args.block, args.repeats)
        print(f"\n{shape} (obs {obs_dim}, action {act_dim}) on {args.device}")
        floor = None
        if args.device == "cpu":
            eager = make_cadence(obs_dim, act_dim, "off", algorithm=args.algorithm)
            flops = count_flops(lambda eager=eager: eager(1))
            peak = matmul_peak_gflops(args.threads)
            floor = peak * 1e9 / flops
            print(
                f"  matmul floor: {flops / 1e9:.2f} GFLOP per update at {peak:.0f} GFLOP/s "
                f"(this machine's peak, {args.threads} thread(s)): {floor:,.0f} updates/s at most"
            )
        for name, rate in rates.items():
            ratio = f"{rate / rates['sb3']:.2f}x sb3" if "sb3" in rates else ""
            of_peak = "" if floor is None else f"{rate / floor:6.1%} of peak"
            print(f"  {name:<34} {rate:8.1f} updates/s  {of_peak}  {ratio}")
        if "sb3" in rates:
            best = max(rate for name, rate in rates.items() if name != "sb3")
            line = f"  best cadence / sb3: {best / rates['sb3']:.2f}x"
            if args.algorithm == "sac" and args.device == "cpu":  # the bar set for cadence
                verdict = "PASS" if best / rates["sb3"] >= TARGET_RATIO else "FAIL"
                failed |= verdict == "FAIL"
                line += f" (target >= {TARGET_RATIO}): {verdict}"
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
