"""Training speed on a shared machine: one core held by a busy loop, torch's default thread
choice (``trainer.num_threads=0``) against 1 and 2 pinned threads.

A researcher's machine is rarely idle: a second run, a test suite, a browser. Torch's
intra-op threads wait for each other by spinning, so when another process holds a core
the thread that lost it holds up the rest (`cadence.trainer.placement.PARALLEL_MIN_FLOPS`).
This script starts one ``python -c "while True: pass"`` process, then measures, in a fresh
process each (so torch starts from its own default thread count every time):

- update throughput: updates per second of ``sac_pendulum`` and ``dreamer_pendulum`` once
  their initial collection is done (the iterations' time less their unrolls');
- whole runs: ``sac_pendulum`` for ``--sac-steps`` env steps (3,000: 1,000 random steps,
  then 40 iterations of 50 updates), and ``dreamer_pendulum`` on a reduced budget that
  still trains several iterations (``--dreamer-steps`` 5,000 simulator steps with
  ``--dreamer-updates`` 20 updates per iteration: 2 prefill iterations, then 3 training
  iterations of 20 updates each and their evaluations, where the config trains 100
  updates per iteration over 20,000 steps).

Each measurement runs ``--rounds`` times (3), the variants interleaved within a round in
a rotating order, and the table gives the medians; the last column is the default's
time over the best pinned count's (updates: the best rate over the default's), and the
bar is the default at most ``BAR`` (1.25) times the best pinned count. A measurement
that exceeds ``--timeout`` seconds, or twice the fastest variant's time for it so far
(`time_cap`), is stopped and counts as that long (marked ``>``; a rate as ``<``).

    python benchmarks/shared_machine.py
    python benchmarks/shared_machine.py --quick   # a smoke run: tiny sizes, one round, bar not enforced
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BAR = 1.25
VARIANTS = {"default": 0, "1 thread": 1, "2 threads": 2}
BUSY_LOOP = "while True: pass"


def child_updates(name: str, threads: int, iterations: int, overrides: list[str]) -> dict:
    """Updates per second of the named config once its initial collection is done."""
    import cadence
    from cadence.algorithms.off_policy_config import off_policy_config
    from cadence.trainer.run import build_trainer

    with tempfile.TemporaryDirectory() as root:
        config = cadence.load_config(
            name,
            [f"trainer.num_threads={threads}", "trainer.progress_bar=off", *overrides],
            root_dir=root,
        )
        trainer = build_trainer(config, Path(root))
        off_policy = off_policy_config(config.algorithm)
        unroll_seconds: list[float] = []
        unroll = trainer.collector.unroll

        def timed_unroll(*args, **kwargs):
            start = time.perf_counter()
            result = unroll(*args, **kwargs)
            unroll_seconds.append(time.perf_counter() - start)
            return result

        trainer.collector.unroll = timed_unroll
        steps_per_unroll = trainer.collector.num_env_steps_per_unroll
        for _ in range(-(-off_policy.initial_collect_steps // steps_per_unroll) + 1):
            trainer.scheme.train_iter()  # the random steps, then one warm-up iteration
        unroll_seconds.clear()
        start = time.perf_counter()
        for _ in range(iterations):
            trainer.scheme.train_iter()
        seconds = time.perf_counter() - start - sum(unroll_seconds)
        trainer.scheme.close()
        trainer.collector.env.close()
        placement = json.loads((Path(root) / "placement.json").read_text())
    updates = iterations * off_policy.num_updates_per_train_iter
    return {"value": updates / seconds, "threads": placement["num_threads"]}


def child_run(name: str, threads: int, overrides: list[str]) -> dict:
    """The wall seconds of a whole ``cadence.train`` of the named config, start to end."""
    import cadence

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        config = cadence.load_config(
            name,
            [f"trainer.num_threads={threads}", "trainer.progress_bar=off", *overrides],
            root_dir=root,
        )
        cadence.train(config)
        placement = json.loads((Path(root) / "placement.json").read_text())
    return {"value": time.perf_counter() - start, "threads": placement["num_threads"]}


def measurements(args: argparse.Namespace) -> list[dict]:
    """What to measure: a label, the child's arguments, and whether higher is better."""
    sac = ["seed=0"]
    dreamer = [
        "seed=0",
        f"algorithm.off_policy.num_updates_per_train_iter={args.dreamer_updates}",
    ]
    if args.quick:  # a smoke run: tiny budgets and minibatches
        sac += ["algorithm.off_policy.initial_collect_steps=100", "trainer.unroll_length=10",
                "algorithm.off_policy.num_updates_per_train_iter=5",
                "algorithm.off_policy.mini_batch_size=32", "trainer.num_eval_episodes=1"]  # fmt: skip
        dreamer += ["algorithm.off_policy.initial_collect_steps=100", "trainer.unroll_length=50",
                    "algorithm.off_policy.mini_batch_size=4",
                    "algorithm.off_policy.mini_batch_length=8",
                    "algorithm.actor_critic.num_start_states=8", "trainer.num_eval_episodes=1",
                    "trainer.eval_max_episode_steps=20"]  # fmt: skip
    return [
        {"label": "sac_pendulum updates/s", "higher": True,
         "child": ["updates", "sac_pendulum", str(args.iterations), *sac]},
        {"label": "dreamer_pendulum updates/s", "higher": True,
         "child": ["updates", "dreamer_pendulum", "1", *dreamer]},
        {"label": f"sac_pendulum {args.sac_steps}-step run, s", "higher": False,
         "child": ["run", "sac_pendulum", f"trainer.num_env_steps={args.sac_steps}", *sac]},
        {"label": f"dreamer_pendulum {args.dreamer_steps}-step run, s", "higher": False,
         "child": ["run", "dreamer_pendulum", f"trainer.num_env_steps={args.dreamer_steps}",
                   *dreamer]},
    ]  # fmt: skip


def run_child(child: list[str], threads: int, timeout: float) -> dict:
    """One measurement in a fresh process, with its wall seconds (``wall``); one that
    exceeds ``timeout`` is stopped and counts as that long (a run) or as no update at all
    (a rate), marked ``timed_out``: a lower bound on its time."""
    kind, name, *rest = child
    command = [sys.executable, __file__, "--child", kind, name, str(threads), *rest]
    start = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        elapsed = time.perf_counter() - start
        value = elapsed if kind == "run" else 0.0
        return {"value": value, "threads": None, "timed_out": True, "wall": elapsed}
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return {
        **json.loads(result.stdout.strip().splitlines()[-1]),
        "wall": time.perf_counter() - start,
    }


def time_cap(earlier: list[dict], timeout: float) -> float:
    """A measurement's time limit: ``timeout``, or twice the fastest wall time any variant
    took for it so far (at least a minute). A variant stopped there took more than twice
    the best one's time, so it cannot be the best: the bar compares with that one, and a
    slow variant's full time (minutes on a busy machine) tells nothing more."""
    walls = [r["wall"] for r in earlier if not r.get("timed_out")]
    return min(timeout, max(60.0, 2 * min(walls))) if walls else timeout


def load_note() -> str:
    try:
        import os

        one, five, _ = os.getloadavg()
        return f"load {one:.1f} (1 min), {five:.1f} (5 min)"
    except (AttributeError, OSError):
        return "load unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=4, help="SAC iterations timed")
    parser.add_argument("--sac-steps", type=int, default=3000)
    parser.add_argument("--dreamer-steps", type=int, default=5000)
    parser.add_argument("--dreamer-updates", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument("--only", nargs="*", default=None, help="labels starting with these")
    parser.add_argument("--no-busy-loop", action="store_true", help="measure without one")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, name, threads, *rest = args.child
        if kind == "updates":
            result = child_updates(name, int(threads), int(rest[0]), rest[1:])
        else:
            result = child_run(name, int(threads), rest)
        print(json.dumps(result))
        return 0
    if args.quick:
        args.rounds, args.iterations = 1, 1
        args.sac_steps, args.dreamer_steps, args.dreamer_updates = 150, 300, 2
    todo = measurements(args)
    if args.only:
        todo = [m for m in todo if any(m["label"].startswith(prefix) for prefix in args.only)]
    busy = None if args.no_busy_loop else subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    results: dict[str, dict[str, list[dict]]] = {m["label"]: {} for m in todo}
    print(f"start: {load_note()}, busy loop: {'no' if busy is None else 'one process'}")
    try:
        variants = list(VARIANTS.items())
        for round_index in range(args.rounds):
            order = (
                variants[round_index % len(variants) :] + variants[: round_index % len(variants)]
            )
            for measurement in todo:
                for variant, threads in order:
                    earlier = [r for rs in results[measurement["label"]].values() for r in rs]
                    cap = time_cap(earlier, args.timeout)
                    result = run_child(measurement["child"], threads, cap)
                    results[measurement["label"]].setdefault(variant, []).append(result)
                    print(f"  round {round_index + 1}, {measurement['label']}, {variant}: "
                          f"{result['value']:.3g} (threads {result['threads']})", flush=True)  # fmt: skip
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    print(f"end: {load_note()}")
    status = report(todo, results)
    if args.quick:  # one round of tiny sizes measures noise as much as threads
        print("smoke run (--quick, one round): the bar is reported, not enforced")
        return 0
    return status


def report(todo: list[dict], results: dict[str, dict[str, list[dict]]]) -> int:
    """Prints the table of medians and the bar; returns 1 when a row misses it."""
    header = f"{'median of runs':38s}" + "".join(f"{v:>12s}" for v in VARIANTS)
    print(header + f"{'default / best pinned':>24s}")
    missed = []
    for measurement in todo:
        row = results[measurement["label"]]
        medians, cells = {}, []
        for variant in VARIANTS:
            values = [r["value"] for r in row[variant]]
            medians[variant] = statistics.median(values)
            timed_out = any(r.get("timed_out") for r in row[variant])
            threads = {r["threads"] for r in row[variant]} - {None}
            note = f"[{'/'.join(map(str, sorted(threads)))}]" if variant == "default" else ""
            mark = ("<" if measurement["higher"] else ">") if timed_out else ""
            cells.append(f"{mark + f'{medians[variant]:.3g}' + note:>12s}")
        pinned = [medians[v] for v in VARIANTS if v != "default"]
        if measurement["higher"] and not max(pinned):  # every variant timed out
            print(f"{measurement['label']:38s}" + "".join(cells) + f"{'all timed out':>24s}")
            continue
        if measurement["higher"]:
            ratio = max(pinned) / medians["default"] if medians["default"] else float("inf")
        else:
            ratio = medians["default"] / min(pinned)
        if ratio > BAR:
            missed.append(measurement["label"])
        print(f"{measurement['label']:38s}" + "".join(cells) + f"{ratio:>23.2f}x")
    print("default [its update thread count]; ratio: the default's time over the best pinned")
    print(
        f"bar: default <= {BAR}x the best pinned count: "
        + ("missed by " + ", ".join(missed) if missed else "met")
    )
    return 1 if missed else 0  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
