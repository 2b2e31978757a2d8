"""Atari: training env steps per second, cadence against Stable-Baselines3, in one run.

``--algorithm ppo`` (the default): both sides train PPO with CleanRL's Atari
hyperparameters, those of cadence's ``ppo_atari`` (8 envs x 128 steps, 4 passes of 4
minibatches of 256, the Nature CNN shared by the policy and the value).

``--algorithm dqn``: both sides train DQN with the hyperparameters of cadence's
``dqn_atari`` (RL-Zoo's: a 100k-step buffer, minibatches of 32, one update per 4 env steps,
the target copied every 1,000 env steps), 8 envs, learning from ``--learning-starts`` env
steps (the configs' 100k random steps would leave nothing to time). cadence runs twice:
as ``dqn_atari`` does, with plain Q-learning targets as Stable-Baselines3 computes them,
and with double Q (``algorithm.double_q=true``: one more forward pass of the CNN per
update). The table also gives the replay memory per stored step: cadence stores each
84x84 frame once and stacks 4 when it samples (``replay_frame_stack``); Stable-Baselines3
stores each step's stack of 4 and, apart, its next stack.

Both on ``ALE/Pong-v5`` with 84x84 grayscale frames, 4 skipped and max-pooled, the last 4
stacked. cadence runs ``cadence train`` in a fresh process, as a user does, without
evaluations or checkpoints; its figure is the run's training time (``train_time``: unrolls
and updates). Stable-Baselines3 runs on ``make_atari_env`` and ``VecFrameStack`` in this
process; its figure is ``learn``'s time. Rounds alternate the sides, so that a machine's
drift falls on all, and the table gives each side's median.

Needs the ``atari`` and ``bench`` extras (ale-py, OpenCV, Stable-Baselines3).

    python benchmarks/atari_throughput.py --env-steps 20480 --rounds 3
    python benchmarks/atari_throughput.py --algorithm dqn --env-steps 6144 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ENV_ID = "ALE/Pong-v5"


def run_cadence(
    config_name: str, env_steps: int, seed: int, threads: int, overrides: list[str]
) -> tuple[float, float | None]:
    """Env steps per second of one ``cadence train`` process, and its replay bytes per step."""
    from cadence.trainer.metrics import read_metrics

    with tempfile.TemporaryDirectory() as root:
        command = [
            sys.executable,
            "-m",
            "cadence",
            "train",
            config_name,
            f"seed={seed}",
            f"env.name={ENV_ID}",
            f"trainer.num_env_steps={env_steps}",
            "trainer.eval_interval=0",
            # The last iteration's evaluation (outside train_time): one step, not 8 games.
            "trainer.num_eval_episodes=1",
            "trainer.eval_max_episode_steps=1",
            "trainer.checkpoint_interval=0",
            "trainer.progress_bar=off",
            f"trainer.num_threads={threads}",
            f"root_dir={root}/run",
            *overrides,
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        last = read_metrics(f"{root}/run")[-1]
        replay_bytes = _cadence_replay_bytes_per_step(Path(root) / "run")
    return last["env_steps"] / last["train_time"], replay_bytes


def _cadence_replay_bytes_per_step(run: Path) -> float | None:
    """Bytes of one stored step, from a chunk of the run's last checkpointed buffer."""
    chunks = sorted(run.glob("checkpoints/*/data/env*-chunk*.pt"))
    if not chunks:
        return None  # an on-policy run
    rows = torch.load(chunks[0], weights_only=True)
    return float(sum(field[0].numel() * field.element_size() for field in rows.values()))


def _sb3_atari_env(seed: int):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    # frameskip=1: SB3's AtariWrapper skips (and max-pools) 4 frames itself, as
    # Gymnasium's AtariPreprocessing does on cadence's side.
    env = make_atari_env(ENV_ID, n_envs=8, seed=seed, env_kwargs={"frameskip": 1})
    return VecFrameStack(env, n_stack=4)


def run_sb3_ppo(env_steps: int, seed: int) -> tuple[float, None]:
    """Env steps per second of Stable-Baselines3's PPO with the same hyperparameters."""
    from stable_baselines3 import PPO

    env = _sb3_atari_env(seed)
    model = PPO(
        "CnnPolicy",
        env,
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
    return _learning_speed(model, env, env_steps), None


def run_sb3_dqn(env_steps: int, seed: int, learning_starts: int) -> tuple[float, float]:
    """Env steps per second of Stable-Baselines3's DQN with ``dqn_atari``'s hyperparameters,
    and its replay bytes per stored step."""
    from stable_baselines3 import DQN

    env = _sb3_atari_env(seed)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=100_000,
        learning_rate=1e-4,
        batch_size=32,
        learning_starts=learning_starts,
        train_freq=(16, "step"),  # 16 steps of 8 envs: 128 env steps, then 32 updates
        gradient_steps=32,
        target_update_interval=1_000,
        exploration_fraction=0.1,
        exploration_final_eps=0.01,
        max_grad_norm=10.0,
        seed=seed,
        device="cpu",
    )
    buffer = model.replay_buffer
    arrays = [buffer.observations, buffer.next_observations, buffer.actions, buffer.rewards]
    arrays += [buffer.dones, buffer.timeouts]
    bytes_per_step = sum(a.nbytes for a in arrays) / (buffer.buffer_size * buffer.n_envs)
    return _learning_speed(model, env, env_steps), bytes_per_step


def _learning_speed(model, env, env_steps: int) -> float:
    """Env steps per second of ``model.learn`` (then closes ``env``)."""
    start = time.perf_counter()
    model.learn(total_timesteps=env_steps)
    seconds = time.perf_counter() - start
    env.close()
    return model.num_timesteps / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algorithm", choices=["ppo", "dqn"], default="ppo")
    parser.add_argument("--env-steps", type=int, default=20_480, help="per run (every side)")
    parser.add_argument(
        "--learning-starts", type=int, default=1_024, help="DQN: random env steps first"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (every side)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    steps, seeds, threads = args.env_steps, range(args.rounds), args.threads
    if args.algorithm == "ppo":
        sides = {"cadence": lambda seed: run_cadence("ppo_atari", steps, seed, threads, [])}
        if not args.skip_sb3:
            sides["sb3"] = lambda seed: run_sb3_ppo(steps, seed)
    else:
        starts = [f"algorithm.off_policy.initial_collect_steps={args.learning_starts}"]
        double = [*starts, "algorithm.double_q=true"]
        sides = {
            "cadence": lambda seed: run_cadence("dqn_atari", steps, seed, threads, starts),
            "cadence 2Q": lambda seed: run_cadence("dqn_atari", steps, seed, threads, double),
        }
        if not args.skip_sb3:
            sides["sb3"] = lambda seed: run_sb3_dqn(steps, seed, args.learning_starts)
    speeds: dict[str, list[float]] = {name: [] for name in sides}
    replay_bytes: dict[str, float | None] = {}
    for seed in seeds:
        for name, run in sides.items():
            speed, replay_bytes[name] = run(seed)
            speeds[name].append(speed)
            print(f"round {seed}: {name:<10} {speed:.0f} env steps/s", flush=True)
    print(
        f"\n{args.algorithm.upper()} on {ENV_ID}, {steps} env steps per run, {threads} torch "
        f"thread(s); median of {args.rounds} round(s)"
    )
    if args.algorithm == "dqn":
        print("cadence: dqn_atari (plain Q targets, as sb3's); cadence 2Q: with double Q")
    memory = any(value is not None for value in replay_bytes.values())
    header = f"{'library':<11} {'env steps/s':>12} {'runs':>20}"
    print(header + (f" {'replay bytes/step':>18}" if memory else ""))
    for name, runs in speeds.items():
        line = (
            f"{name:<11} {statistics.median(runs):>12.0f} {' '.join(f'{r:.0f}' for r in runs):>20}"
        )
        if memory and replay_bytes[name] is not None:
            line += f" {replay_bytes[name]:>18,.0f}"
        print(line)
    if "sb3" in speeds:
        ratio = statistics.median(speeds["cadence"]) / statistics.median(speeds["sb3"])
        print(f"\ncadence / sb3 env steps per second: {ratio:.2f}x")
        if memory and replay_bytes["cadence"] and replay_bytes["sb3"]:
            print(
                f"sb3 / cadence replay memory: {replay_bytes['sb3'] / replay_bytes['cadence']:.1f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
