"""World-model and actor-critic (imagination) updates per second: cadence vs TorchRL's Dreamer.

Both sides train Dreamer's world model (RSSM, encoder, decoder, reward head; observation
and reward NLL plus the KL with free nats; Adam, clip 100) on a fake replay minibatch of
``batch x length`` sequences, and its actor-critic (imagine ``horizon`` steps from
posterior states of the minibatch, λ-returns, actor and value steps) at the same sizes.
TorchRL runs in its own virtual environment (its tensordict pin differs from cadence's),
through ``benchmarks/peers/torchrl_dreamer.py``; make it with::

    python -m venv --system-site-packages .venvs/torchrl
    .venvs/torchrl/bin/pip install torchrl==0.14.1     # tensordict 0.14.3, torch 2.13 shared

then::

    python benchmarks/world_model_speed.py --threads 1

With ``--compile default`` (or another ``algorithm.compile`` mode) the table adds
cadence's compiled updates/s and the seconds each graph took to compile (both steps are
one graph each; the compile cache makes a second run load rather than compile them).

Shapes: ``pendulum`` (the CPU-sized Pendulum configs: belief 64, state 16, MLPs of 128,
imagination from 500 start states; the RSSM's hidden layers of 64, not the configs' 128,
because TorchRL's ``RSSMPrior`` needs them as wide as the belief), ``paper_vector`` and
``paper_image`` (the paper's: belief 200, state 30, MLPs of 400, 64x64 images with the
32/64/128/256 conv stack, imagination from all 2,500 states). Each side's rate is the
median over ``--iters`` updates after ``--warmup``; with ``--rounds R`` the two sides are
timed in R interleaved rounds (which side goes first alternates), and the table gives each
side's median rate and the median of the rounds' ratios, so that load from other
processes, which drifts within a run, weighs on both sides alike. With ``--flops`` the
table adds each side's achieved GFLOP/s (FLOPs of one update counted by
``torch.utils.flop_counter``) as a fraction of this machine's float32 matmul peak,
measured here: at the paper's shapes both sides are bound by matrix multiplies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from matmul_peak import count_flops, matmul_peak_gflops

from cadence.algorithms.compile_config import COMPILE_MODES

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "benchmarks" / "peers" / "torchrl_dreamer.py"
PEER_PYTHON = ROOT / ".venvs" / "torchrl" / "bin" / "python"

SHAPES = {
    "pendulum": dict(
        obs="vector", obs_dim=3, action_dim=1, belief=64, state=16, hidden=64,
        mlp_hidden=128, embedding=64, start_states=500,
    ),
    "paper_vector": dict(
        obs="vector", obs_dim=3, action_dim=1, belief=200, state=30, hidden=200,
        mlp_hidden=400, embedding=1024, start_states=2500,
    ),
    "paper_image": dict(
        obs="image", obs_dim=3, action_dim=6, belief=200, state=30, hidden=200,
        mlp_hidden=400, embedding=1024, start_states=2500,
    ),
}  # fmt: skip
BATCH, LENGTH, HORIZON = 50, 50, 15


def cadence_updates(
    shape: dict, iters: int, warmup: int, flops: bool, compile_mode: str = "off"
) -> dict[str, float]:
    """cadence's world-model and actor-critic updates/s (and FLOPs per update) at ``shape``;
    with ``compile_mode`` also compiled, with each step's compile seconds."""
    from cadence.data.specs import BoundedTensorSpec, TensorSpec
    from cadence.mbrl.build import make_model_based
    from cadence.mbrl.config import ActorCriticConfig, DreamerConfig, WorldModelConfig

    image = shape["obs"] == "image"
    observation_spec = (
        TensorSpec((3, 64, 64), torch.uint8) if image else TensorSpec((shape["obs_dim"],))
    )
    action_dim = shape["action_dim"]
    action_spec = BoundedTensorSpec((action_dim,), minimum=-1.0, maximum=1.0)
    config = DreamerConfig(
        world_model=WorldModelConfig(
            x_belief_size=shape["belief"],
            x_state_size=shape["state"],
            y_belief_size=0,
            y_state_size=0,
            hidden_size=shape["hidden"],
            mlp_hidden_size=shape["mlp_hidden"],
            embedding_size=shape["embedding"],
        ),
        actor_critic=ActorCriticConfig(
            horizon=HORIZON,
            hidden_size=shape["mlp_hidden"],
            num_layers=2 if shape["mlp_hidden"] < 400 else 3,
            num_start_states=shape["start_states"],
        ),
    )
    algorithm = make_model_based(config, observation_spec, action_spec)
    if image:
        observation = torch.randint(0, 256, (BATCH, LENGTH, 3, 64, 64), dtype=torch.uint8)
    else:
        observation = torch.randn(BATCH, LENGTH, shape["obs_dim"])
    step_type = torch.ones(BATCH, LENGTH, dtype=torch.int64)
    step_type[:, 0] = 0
    batch = {
        "observation": observation,
        "prev_action": torch.rand(BATCH, LENGTH, action_dim) * 2 - 1,
        "reward": torch.randn(BATCH, LENGTH),
        "step_type": step_type,
        "discount": torch.ones(BATCH, LENGTH),
        "action": torch.rand(BATCH, LENGTH, action_dim) * 2 - 1,
    }
    model = algorithm.world_model
    with torch.no_grad():
        latent = model.observe(batch["observation"], batch["prev_action"], step_type == 0).latent

    def world_model_update() -> None:
        algorithm.in_graph(algorithm.model_step, batch)

    def actor_critic_update() -> None:
        algorithm.in_graph(algorithm.policy_step, latent, batch)

    result = {
        "world_model_updates_per_s": _rate(world_model_update, iters, warmup),
        "actor_critic_updates_per_s": _rate(actor_critic_update, iters, warmup),
    }
    if flops:
        result["world_model_flops"] = count_flops(world_model_update)
        result["actor_critic_flops"] = count_flops(actor_critic_update)
    if compile_mode != "off":
        from cadence.accel import compile_update

        compile_update(algorithm, compile_mode)
        for kind, update in (
            ("world_model", world_model_update),
            ("actor_critic", actor_critic_update),
        ):
            before = algorithm.accelerator.compile_seconds
            update()  # compiles (or loads from the cache)
            result[f"{kind}_compile_s"] = algorithm.accelerator.compile_seconds - before
            result[f"{kind}_compiled_updates_per_s"] = _rate(update, iters, warmup)
    return result


def peer_updates(shape: dict, iters: int, warmup: int, threads: int, flops: bool) -> dict:
    """TorchRL's rates at ``shape``, from its own virtual environment."""
    if not PEER_PYTHON.exists():
        raise SystemExit(f"no TorchRL environment at {PEER_PYTHON}; see this script's docstring")
    arguments = {
        "obs": shape["obs"], "obs-dim": shape["obs_dim"], "action-dim": shape["action_dim"],
        "batch": BATCH, "length": LENGTH, "horizon": HORIZON, "belief": shape["belief"],
        "state": shape["state"], "hidden": shape["hidden"], "mlp-hidden": shape["mlp_hidden"],
        "start-states": shape["start_states"], "iters": iters, "warmup": warmup,
        "threads": threads,
    }  # fmt: skip
    command = [str(PEER_PYTHON), str(PEER)]
    for key, value in arguments.items():
        command += [f"--{key}", str(value)]
    if flops:
        command.append("--flops")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def _rate(update: Callable[[], None], iters: int, warmup: int) -> float:
    for _ in range(warmup):
        update()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        update()
        times.append(time.perf_counter() - start)
    return 1.0 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians kept")
    parser.add_argument("--flops", action="store_true")
    parser.add_argument(
        "--compile", default="off", choices=COMPILE_MODES, help="also time cadence compiled"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peak = matmul_peak_gflops(args.threads) if args.flops else None
    rounds: dict[str, list[tuple[dict, dict]]] = {name: [] for name in args.shapes}
    for r in range(args.rounds):
        for name in args.shapes:
            shape = SHAPES[name]
            iters = args.iters if name == "pendulum" else max(2, args.iters // 4)
            ours, theirs = time_both(shape, iters, args, peer_first=r % 2 == 1)
            rounds[name].append((ours, theirs))
            print(f"# round {r} {name}: cadence {json.dumps(ours)}", file=sys.stderr)
            print(f"# round {r} {name}: torchrl {json.dumps(theirs)}", file=sys.stderr)
    print_table(args, rounds, peak)


def time_both(
    shape: dict, iters: int, args: argparse.Namespace, peer_first: bool
) -> tuple[dict, dict]:
    """One round at ``shape``: cadence's rates and TorchRL's, in the order asked (it
    alternates over the rounds, so neither side always meets the load's drift first)."""
    if peer_first:
        theirs = peer_updates(shape, iters, args.warmup, args.threads, args.flops)
    ours = cadence_updates(shape, iters, args.warmup, args.flops, args.compile)
    if not peer_first:
        theirs = peer_updates(shape, iters, args.warmup, args.threads, args.flops)
    return ours, theirs


def print_table(args: argparse.Namespace, rounds: dict[str, list], peak: float | None) -> None:
    """Each side's median rate over the rounds and the median of the rounds' ratios."""
    print(
        f"threads={args.threads}, batch {BATCH} x {LENGTH}, horizon {HORIZON}, "
        f"{args.rounds} interleaved round(s): medians"
    )
    if peak:
        print(f"float32 matmul peak here: {peak:.1f} GFLOP/s")
    print(f"{'shape':<14} {'update':<13} {'cadence/s':>10} {'torchrl/s':>10} {'ratio':>6}", end="")
    print(f" {'cadence %peak':>13} {'torchrl %peak':>13}" if peak else "", end="")
    compiled = args.compile != "off"
    print(f" {'compiled/s':>10} {'/torchrl':>8} {'compile s':>9}" if compiled else "")

    def median(values) -> float:
        return statistics.median(list(values))

    for name, pairs in rounds.items():
        for kind in ("world_model", "actor_critic"):
            key = f"{kind}_updates_per_s"
            a, b = median(o[key] for o, _ in pairs), median(t[key] for _, t in pairs)
            ratio = median(o[key] / t[key] for o, t in pairs)
            print(f"{name:<14} {kind:<13} {a:>10.2f} {b:>10.2f} {ratio:>6.2f}", end="")
            if peak:
                fa = pairs[0][0][f"{kind}_flops"] * a / 1e9 / peak
                fb = pairs[0][1].get(f"{kind}_flops", float("nan")) * b / 1e9 / peak
                print(f" {100 * fa:>12.0f}% {100 * fb:>12.0f}%", end="")
            if compiled:
                compiled_key = f"{kind}_compiled_updates_per_s"
                c = median(o[compiled_key] for o, _ in pairs)
                over = median(o[compiled_key] / t[key] for o, t in pairs)
                seconds = pairs[0][0][
                    f"{kind}_compile_s"
                ]  # the first round's: compiled, not loaded
                print(f" {c:>10.2f} {over:>8.2f} {seconds:>9.1f}", end="")
            print()


if __name__ == "__main__":
    main()
