"""PPO on the tensor-native CartPole with thousands of envs on a GPU: env steps per second
of the whole training loop, compiled against eager.

Both modes train ``cadence train ppo_cartpole`` with the envs on the learner's device
(``env.backend=tensor trainer.device=cuda``): 4096 envs x 32 steps per unroll (131,072
env steps), then 4 passes of 4 minibatches of 32,768 (16 updates), no evaluation until
the end, each run a fresh process. "Loop" counts everything of an iteration (the unroll,
advantages, updates, logging); it is the median of the iterations' own rates, the first
(which compiles) left out, and "whole run" divides all env steps by the training time,
compilation included. The compiled mode runs twice on one compile cache: cold (empty)
and warm (the second process loads the graphs).

    python benchmarks/gpu_loop.py [--device cuda] [--num-envs 4096] [--iterations 30] [--graphs]

``--graphs`` adds a third compiled run on the warm cache with ``algorithm.compile=
reduce-overhead``, whose unroll and updates replay as CUDA graphs.

On a machine without a GPU ``--device cpu`` runs the same comparison on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_loop import train_records  # noqa: E402

UNROLL_LENGTH = 32
PASSES = 4
MINIBATCHES = 4


def overrides(device: str, num_envs: int, iterations: int) -> list[str]:
    steps = num_envs * UNROLL_LENGTH
    return [
        "env.backend=tensor",
        f"env.num_envs={num_envs}",
        f"trainer.unroll_length={UNROLL_LENGTH}",
        f"algorithm.num_updates_per_train_iter={PASSES}",
        f"algorithm.mini_batch_size={steps // MINIBATCHES}",
        f"trainer.num_env_steps={steps * iterations}",
        f"trainer.device={device}",
        "trainer.eval_interval=0",
        "trainer.checkpoint_interval=0",
        "trainer.progress_bar=off",
    ]


def run(mode: str, args: argparse.Namespace, cache: Path) -> dict[str, float]:
    """One ``cadence train`` process: its loop rate, whole-run rate and compile seconds."""
    records = train_records(
        [
            *overrides(args.device, args.num_envs, args.iterations),
            f"algorithm.compile={mode}",
            f"seed={args.seed}",
        ],
        cache,
    )
    last = records[-1]
    rates = [r["perf/env_steps_per_s"] for r in records[1:] if "perf/env_steps_per_s" in r]
    return {
        "loop": statistics.median(rates),
        "whole": last["env_steps"] / last["train_time"],
        "compile_s": float(last.get("perf/compile_s", 0.0)),
        "first_loss": records[0]["loss/total"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--graphs", action="store_true", help="also time compile=reduce-overhead (CUDA graphs)"
    )
    args = parser.parse_args()

    import torch

    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    runs = [("eager", "off"), ("compiled, cold cache", "default")]
    runs += [("compiled, warm cache", "default")]
    runs += [("CUDA graphs, warm", "reduce-overhead")] if args.graphs else []
    rows = {}
    with tempfile.TemporaryDirectory() as eager_cache, tempfile.TemporaryDirectory() as cache:
        for label, mode in runs:
            # Eager gets a cache of its own so that the compiled cold run starts empty.
            rows[label] = run(mode, args, Path(eager_cache if mode == "off" else cache))
            print(f"{label} done: {rows[label]}", file=sys.stderr, flush=True)

    steps = args.num_envs * UNROLL_LENGTH
    print(
        f"\nPPO, tensor-native CartPole on {name} (torch {torch.__version__}): "
        f"{args.num_envs} envs x {UNROLL_LENGTH} steps, {PASSES} passes x {MINIBATCHES} "
        f"minibatches of {steps // MINIBATCHES:,}, {args.iterations} iterations"
    )
    print(
        f"{'':<22} {'loop steps/s':>13} {'whole run steps/s':>18} {'compile s':>10} {'loss 1':>8}"
    )
    for label, row in rows.items():
        print(
            f"{label:<22} {row['loop']:>13,.0f} {row['whole']:>18,.0f} "
            f"{row['compile_s']:>10.1f} {row['first_loss']:>8.4f}"
        )
    eager, warm = rows["eager"], rows["compiled, warm cache"]
    print(f"\ncompiled loop / eager loop: {warm['loop'] / eager['loop']:.2f}x")
    print(
        f"compiled whole run (warm cache) / eager whole run: {warm['whole'] / eager['whole']:.2f}x"
    )
    if args.graphs:
        graphs = rows["CUDA graphs, warm"]
        print(f"CUDA graphs loop / compiled loop: {graphs['loop'] / warm['loop']:.2f}x")


if __name__ == "__main__":
    main()
