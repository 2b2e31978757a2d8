"""PPO on Atari: training env steps per second, cadence against Stable-Baselines3, in one run.

Both sides train PPO with CleanRL's Atari hyperparameters, those of cadence's ``ppo_atari``
(8 envs x 128 steps, 4 passes of 4 minibatches of 256, the Nature CNN shared by the policy
and the value), on ``ALE/Pong-v5`` with 84x84 grayscale frames, 4 skipped and max-pooled,
the last 4 stacked. cadence runs ``cadence train ppo_atari`` in a fresh process, as a user
does, without evaluations or checkpoints; its figure is the run's training time
(``train_time``: unrolls and updates). Stable-Baselines3 runs ``PPO("CnnPolicy")`` on
``make_atari_env`` and ``VecFrameStack`` in this process; its figure is ``learn``'s time.
Rounds alternate the two sides, so that a machine's drift falls on both, and the table
gives each side's median.

Needs the ``atari`` and ``bench`` extras (ale-py, OpenCV, Stable-Baselines3).

    python benchmarks/atari_throughput.py --env-steps 20480 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ENV_ID = "ALE/Pong-v5"


def run_cadence(env_steps: int, seed: int, threads: int) -> float:
    """Env steps per second of one ``cadence train ppo_atari`` process."""
    from cadence.trainer.metrics import read_metrics

    with tempfile.TemporaryDirectory() as root:
        overrides = [
            f"seed={seed}",
            f"env.name={ENV_ID}",
            f"trainer.num_env_steps={env_steps}",
            "trainer.eval_interval=0",
            "trainer.checkpoint_interval=0",
            "trainer.progress_bar=off",
            f"trainer.num_threads={threads}",
            f"root_dir={root}/run",
        ]
        command = [sys.executable, "-m", "cadence", "train", "ppo_atari", *overrides]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        last = read_metrics(f"{root}/run")[-1]
    return last["env_steps"] / last["train_time"]


def run_sb3(env_steps: int, seed: int) -> float:
    """Env steps per second of Stable-Baselines3's PPO with the same hyperparameters."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    # frameskip=1: SB3's AtariWrapper skips (and max-pools) 4 frames itself, as
    # Gymnasium's AtariPreprocessing does on cadence's side.
    env = make_atari_env(ENV_ID, n_envs=8, seed=seed, env_kwargs={"frameskip": 1})
    model = PPO(
        "CnnPolicy",
        VecFrameStack(env, n_stack=4),
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=2.5e-4,
        clip_range=0.1,
        clip_range_vf=0.1,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        seed=seed,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(total_timesteps=env_steps)
    seconds = time.perf_counter() - start
    env.close()
    return model.num_timesteps / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env-steps", type=int, default=20_480, help="per run (both sides)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (both sides)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    rows: dict[str, list[float]] = {"cadence": [], "sb3": []}
    for seed in range(args.rounds):
        rows["cadence"].append(run_cadence(args.env_steps, seed, args.threads))
        print(f"round {seed}: cadence {rows['cadence'][-1]:.0f} env steps/s", flush=True)
        if not args.skip_sb3:
            rows["sb3"].append(run_sb3(args.env_steps, seed))
            print(f"round {seed}: sb3     {rows['sb3'][-1]:.0f} env steps/s", flush=True)
    print(
        f"\nPPO on {ENV_ID}, {args.env_steps} env steps per run, {args.threads} torch "
        f"thread(s); median of {args.rounds} round(s)"
    )
    print(f"{'library':<10} {'env steps/s':>12} {'runs':>20}")
    for name, speeds in rows.items():
        if speeds:
            runs = " ".join(f"{speed:.0f}" for speed in speeds)
            print(f"{name:<10} {statistics.median(speeds):>12.0f} {runs:>20}")
    if rows["sb3"]:
        ratio = statistics.median(rows["cadence"]) / statistics.median(rows["sb3"])
        print(f"\ncadence / sb3 env steps per second: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
