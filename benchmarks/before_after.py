"""Two checkouts of cadence timed by the same benchmarks, interleaved round by round.

The speed check of a change that must not change speed (a restructuring): each round runs
every measurement below once on each checkout, the checkouts' order alternating from
round to round, so a machine whose load drifts slows both alike. Each checkout runs its
own copy of the benchmark scripts against its own code (``PYTHONPATH``), with a compile
cache of its own that the first, untimed round fills:

- ``compiled_loop``: ``compiled_loop.py --skip-solve``, cadence's eager and compiled PPO
  runs on CartPole (run seconds, compiling excluded);
- ``time_to_solve``: ``time_to_solve.py --skip-sb3`` for ``ppo_cartpole`` and
  ``sac_pendulum`` as shipped, seed 0 (training seconds to the bar);
- ``update_speed``: ``update_speed.py --skip-sb3``, SAC updates/s eager and compiled at
  both shapes, one thread;
- ``world_model_speed``: cadence's world-model and actor-critic updates/s at the
  Pendulum shapes (the function the script times them with; its TorchRL side needs a
  virtual environment of its own and does not change).

The table gives, per figure, each checkout's median over the timed rounds, the speed
ratio of after to before (>1: after is faster; the median of the rounds' ratios) and the
round-to-round spread: the largest ratio between two rounds of the same checkout, the
noise a ratio has to stand out from.

    git worktree add --detach /tmp/before <commit>
    python benchmarks/before_after.py --before /tmp/before --after . --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORLD_MODEL = (
    "import json, sys, torch; sys.path.insert(0, 'benchmarks'); import world_model_speed as w; "
    "torch.set_num_threads(1); torch.manual_seed(0); "
    "print(json.dumps(w.cadence_updates(w.SHAPES['pendulum'], 10, 2, False, 'off')))"
)

COMMANDS = {
    "compiled_loop": ["benchmarks/compiled_loop.py", "--skip-solve", "--seeds", "0"],
    "time_to_solve ppo": [
        "benchmarks/time_to_solve.py", "--task", "ppo_cartpole", "--seeds", "0", "--skip-sb3",
    ],
    "time_to_solve sac": [
        "benchmarks/time_to_solve.py", "--task", "sac_pendulum", "--seeds", "0", "--skip-sb3",
    ],
    "update_speed": [
        "benchmarks/update_speed.py", "--skip-sb3", "--threads", "1", "--repeats", "5",
        "--compile", "off", "default",
    ],
    "world_model_speed": ["-c", WORLD_MODEL],
}  # fmt: skip


def figures(name: str, output: str) -> dict[str, tuple[float, bool]]:
    """The figures of a benchmark's output: label -> (value, whether higher is faster)."""
    found: dict[str, tuple[float, bool]] = {}
    if name == "compiled_loop":
        for match in re.finditer(r"^(cadence \w+)\s+\S+\s+\S+\s+([\d.]+)\s+[\d,]+$", output, re.M):
            found[f"{name}: {match[1]} run s"] = (float(match[2]), False)
    elif name.startswith("time_to_solve"):
        for match in re.finditer(r"^(cadence\[.*?\]) seed \d+: solved in ([\d.]+) s", output, re.M):
            found[f"{name}: {match[1]} train s"] = (float(match[2]), False)
    elif name == "update_speed":
        shape = ""
        for line in output.splitlines():
            if header := re.match(r"^(\w+) \(obs ", line):
                shape = header[1]
            elif rate := re.match(r"^\s+(cadence.*?)\s+([\d.]+) updates/s", line):
                found[f"{name}: {shape} {rate[1]} updates/s"] = (float(rate[2]), True)
    else:
        for key, value in json.loads(output.strip().splitlines()[-1]).items():
            if key.endswith("per_s") or "updates" in key:
                found[f"{name}: {key}"] = (float(value), True)
    if not found:
        raise RuntimeError(f"no figures in {name}'s output:\n{output[-2000:]}")
    return found


def run(tree: Path, name: str, cache: Path) -> dict[str, tuple[float, bool]]:
    """One measurement on the checkout at ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CADENCE_COMPILE_CACHE": str(cache)}
    result = subprocess.run(
        [sys.executable, *COMMANDS[name]], cwd=tree, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed in {tree}:\n{result.stderr[-3000:]}")
    return figures(name, result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout (worktree)")
    parser.add_argument("--after", type=Path, required=True, help="a checkout (worktree)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds")
    parser.add_argument("--only", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    values: dict[str, dict[str, list[float]]] = {}
    faster_up: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as caches:
        for round_ in range(args.rounds + 1):  # round 0 fills the compile caches, untimed
            order = list(trees) if round_ % 2 else list(reversed(trees))
            for name in args.only:
                for version in order:
                    got = run(trees[version], name, Path(caches) / version)
                    print(f"round {round_} {version} {name}: {got}", flush=True)
                    if round_ == 0:
                        continue
                    for label, (value, up) in got.items():
                        values.setdefault(label, {"before": [], "after": []})[version].append(value)
                        faster_up[label] = up
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    print("| figure | before | after | after's speed / before's | rounds' spread |")
    print("|---|---|---|---|---|")
    for label, by_version in values.items():
        before, after = by_version["before"], by_version["after"]
        if len(before) != len(after):
            continue  # a figure one checkout printed in some rounds only (e.g. unsolved)
        ratios = [
            (a / b if faster_up[label] else b / a) for a, b in zip(after, before, strict=True)
        ]
        spread = max(max(v) / min(v) for v in (before, after))
        print(
            f"| {label} | {statistics.median(before):.2f} | {statistics.median(after):.2f} | "
            f"{statistics.median(ratios):.3f} | {spread:.3f} |"
        )


if __name__ == "__main__":
    main()
