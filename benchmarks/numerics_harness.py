"""Numerics harness: do two commits train every named config to the same numbers?

A restructuring must change no numbers. This script runs a short, CPU-sized training of
every named config (`cadence.testing.resume.cpu_sized_overrides`: a few iterations of
2 envs, one torch thread, ATen matmuls), once per ``--compile`` mode, and records what the
run produced: its ``metrics.jsonl`` without what measures time
(`cadence.testing.resume.comparable_metrics`) and a digest of every tensor and value of
its final checkpoint's ``algorithm`` and ``scheme`` state (`cadence.testing.resume.final_state`).
Run ``record`` once from each commit (the ``cadence`` imported is the one on ``PYTHONPATH``
or the current directory, so a ``git worktree`` of the older commit serves), then
``compare`` the two files:

    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=$PWD python /path/to/benchmarks/numerics_harness.py \\
        record --out /tmp/before.json --jobs 2)
    python benchmarks/numerics_harness.py record --out /tmp/after.json --jobs 2
    python benchmarks/numerics_harness.py compare /tmp/before.json /tmp/after.json

A ``record`` into a file that exists runs only what it lacks (an interrupted record resumes).
``compare`` prints one row per (config, compile mode): metric rows, metric values that
differ, state entries that differ, entries present on one side only; it exits 1 when any
value differs or a run failed on one side only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def record(args: argparse.Namespace) -> int:
    """Trains each (config, compile mode) and writes what it produced to ``args.out``."""
    import cadence
    from cadence.config.catalog import list_configs

    names = sorted(list_configs()) if "all" in args.configs else args.configs
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    jobs = [(n, m) for n in names for m in args.compile if f"{n} compile={m}" not in results]
    print(f"cadence from {Path(cadence.__file__).parent}: {len(jobs)} runs "
          f"({len(results)} already in {out})", flush=True)  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_one, name, mode, args.iterations): (name, mode) for name, mode in jobs}  # fmt: skip
        for future in concurrent.futures.as_completed(futures):
            name, mode = futures[future]
            results[f"{name} compile={mode}"] = outcome = future.result()
            status = "failed" if "error" in outcome else f"{len(outcome['metrics'])} rows"
            print(f"  {name} compile={mode}: {status} ({outcome['wall_s']:.0f} s)", flush=True)
            out.write_text(json.dumps(dict(sorted(results.items())), indent=1))  # a rerun resumes
    return 0


def run_one(name: str, mode: str, iterations: int) -> dict[str, Any]:
    """One ``cadence train`` process of ``name``; its comparable metrics and state digest."""
    from cadence.testing.resume import comparable_metrics, cpu_sized_overrides, final_state
    from cadence.trainer.metrics import read_metrics

    start = time.monotonic()
    overrides = [*cpu_sized_overrides(name, iterations=iterations), f"algorithm.compile={mode}"]
    with tempfile.TemporaryDirectory() as root:
        run_dir = Path(root) / "run"
        command = [sys.executable, "-m", "cadence", "train", name, "--root-dir", str(run_dir),
                   "seed=0", *overrides]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=_environment())
        wall_s = time.monotonic() - start
        if done.returncode != 0:
            return {"error": (done.stdout + done.stderr)[-2000:], "wall_s": wall_s}
        state = final_state(run_dir)
        return {
            "metrics": comparable_metrics(read_metrics(run_dir)),
            "state": digest({"algorithm": state.get("algorithm"), "scheme": state.get("scheme")}),
            "wall_s": wall_s,
        }


def _environment() -> dict[str, str]:
    """This environment, with the cadence this script imported first on the path."""
    import cadence

    root = str(Path(cadence.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def digest(value: Any, prefix: str = "") -> dict[str, str]:
    """A flat ``{path: digest}`` of a nest: tensors by dtype, shape and bytes; other
    leaves by their ``repr`` (floats exactly)."""
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for key in sorted(value, key=str):
            flat.update(digest(value[key], f"{prefix}/{key}"))
        return flat
    if isinstance(value, (list, tuple)):
        flat = {}
        for index, item in enumerate(value):
            flat.update(digest(item, f"{prefix}[{index}]"))
        return flat
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        buffer = io.BytesIO()
        buffer.write(str((tensor.dtype, tuple(tensor.shape))).encode())
        buffer.write(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")  # fmt: skip
        return {prefix: hashlib.sha256(buffer.getvalue()).hexdigest()[:16]}
    if isinstance(value, float):
        return {prefix: value.hex()}
    return {prefix: repr(value)}


def compare(args: argparse.Namespace) -> int:
    """Prints the per-run differences of two ``record`` files; 1 when any value differs."""
    before = json.loads(Path(args.before).read_text())
    after = json.loads(Path(args.after).read_text())
    header = f"{'run':44s} {'rows':>5s} {'metric values':>14s} {'state entries':>14s} {'one side only':>14s}"
    print(header)
    bad = 0
    for run in sorted(set(before) | set(after)):
        a, b = before.get(run), after.get(run)
        if a is None or b is None:
            print(f"{run:44s} recorded on one side only")
            continue
        if "error" in a or "error" in b:
            both = "error" in a and "error" in b
            bad += not both
            print(f"{run:44s} failed {'on both sides' if both else 'on one side'}")
            continue
        metric_diffs = _metric_differences(a["metrics"], b["metrics"])
        state_diffs = sum(a["state"][k] != b["state"][k] for k in set(a["state"]) & set(b["state"]))
        one_side = len(set(a["state"]) ^ set(b["state"]))
        bad += bool(metric_diffs or state_diffs)
        print(f"{run:44s} {len(b['metrics']):>5d} {metric_diffs:>14d} {state_diffs:>14d} {one_side:>14d}")  # fmt: skip
    print(f"{bad} run(s) with differing values" if bad else "0 differing values")
    return 1 if bad else 0


def _metric_differences(a: list[dict], b: list[dict]) -> int:
    """Values that differ between two runs' rows (a row missing on one side counts whole)."""
    differing = 0
    for index in range(max(len(a), len(b))):
        row_a = a[index] if index < len(a) else {}
        row_b = b[index] if index < len(b) else {}
        differing += sum(row_a.get(k) != row_b.get(k) for k in set(row_a) | set(row_b))
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="train every config, write what they produced")
    rec.add_argument("--out", required=True)
    rec.add_argument("--configs", nargs="+", default=["all"], help="named configs, or 'all'")
    rec.add_argument("--compile", nargs="+", default=["off", "default"], help="compile modes")
    rec.add_argument("--iterations", type=int, default=4, help="iterations per run")
    rec.add_argument("--jobs", type=int, default=1, help="runs at once")
    cmp = commands.add_parser("compare", help="compare two record files")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args(argv)
    return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
