"""A fault campaign anyone can rerun: real ``cadence train`` processes, real faults.

Each attempt starts ``python -m cadence.cli train NAME key=value ... --root-dir RUN``,
injects one fault, then runs the same command again until the run is complete, and
judges what is left against an uninterrupted run of the same command and seed.

Faults (``--kinds``):

- ``sigkill``: SIGKILL at a random moment of the run: during the startup, or a random
  fraction of an iteration's time after a random iteration's ``metrics.jsonl`` row
  (in its evaluation, its checkpoint, the next iteration; after the last row: the
  final save and exit);
- ``sigkill-checkpoint``: SIGKILL when the k-th checkpoint staging directory
  (``checkpoints/.<iteration>.tmp``) appears, after a random delay of 0-40 ms, so it
  lands while a checkpoint is written, fsynced or published;
- ``sigterm``, ``sigusr1``: the pre-emption signals at such a moment ("checkpoint and
  exit 0"; one that arrives before the trainer installs its handlers kills the process);
- ``flip``, ``truncate``: a run is SIGKILLed after a checkpoint, then one byte in the
  middle of a file is flipped (or the file cut to half its size), one copy of the run
  per kind of file: each file of the newest checkpoint, ``checkpoints/LATEST``, and
  anything else the run wrote outside its logs (durable replay chunks and their
  manifest, once the trainer writes them). Kinds are discovered by listing the run
  directory; a file's kind is its path with the digits replaced (`file_kind`);
- ``worker-raise``, ``worker-exit``, ``worker-segfault``, ``worker-hang``: an env worker
  of ``env.backend=parallel`` fails once (``cadence.testing.fakes``' ``FaultyEnv``).

Judgement of one attempt:

- *finished*: the run reached ``COMPLETE`` and every invocation after the fault exited
  0 (for the worker kinds: the faulted invocation itself exited 0, having recovered).
- *equal*: ``metrics.jsonl`` equals the uninterrupted run's (bar timings)
  (`cadence.testing.resume.comparable_metrics`), and so do the final checkpoint's
  ``algorithm`` and ``scheme`` state. Judged for the signal kinds, where the env state
  is restored (the tensor back end and Gymnasium envs whose state pickles); shown for
  the file kinds too; "n/a" for the worker kinds (a restarted worker's envs reset).
- *lost*: any of
    1. the run could not resume: ``COMPLETE`` not reached within `MAX_RERUNS` reruns,
       or a rerun exited non-zero (e.g. 2: no checkpoint verifies);
    2. ``metrics.jsonl``: a row missing, duplicated or out of order (its iterations
       must be exactly the uninterrupted run's), or a line that does not parse;
    3. the final checkpoint does not verify (`CheckpointManager.load_verified` must
       return the checkpoint ``LATEST`` names, at the final iteration);
    4. work redone: the iterations the faulted process had logged minus the iteration
       the rerun resumed from exceed one checkpoint interval (a SIGKILL), zero (a
       pre-emption signal that the trainer handled), two intervals (a corrupted
       checkpoint: falling back by one is the design);
    5. TensorBoard: a scalar logged twice at one step once purges are applied;
    6. a corrupted file that the rerun's output does not name.

Prints one row per (config, fault): attempts, landed (the fault hit a live, unfinished
run), finished, equal, lost, wall time, notes; then the total wall time. Exit status
1 if anything was lost or did not finish. Every attempt's random choices come from
``--seed``, the config, the kind and the attempt's index alone, so a rerun with the
same flags (any ``--jobs``) makes the same choices; the moments count from rows and
the uninterrupted run's pace, so they land alike on a busy or an idle machine. The
tools that damage, signal and read runs are in `fault_tools.py` beside this script.

    python benchmarks/fault_campaign.py --quick                # CI-sized, a few minutes
    python benchmarks/fault_campaign.py --jobs 2               # the full campaign
    python benchmarks/fault_campaign.py --kinds sigkill --configs ppo_cartpole --attempts 5
    python benchmarks/fault_campaign.py --configs all --kinds sigkill flip --attempts 2 --jobs 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import random
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fault_tools import (
    Fault,
    Invocation,
    corruptible_files,
    flip_byte,
    identifying_names,
    invoke,
    metrics_problems,
    resumed_iteration,
    tensorboard_duplicates,
    torn_lines,
    truncate_file,
)

from cadence.config import list_configs
from cadence.testing.resume import (
    assert_equal_nests,
    cli_train_command,
    comparable_metrics,
    cpu_sized_overrides,
)
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.metrics import read_metrics

SIGNAL_KINDS = ("sigkill", "sigkill-checkpoint", "sigterm", "sigusr1")
FILE_KINDS = ("flip", "truncate")
WORKER_KINDS = ("worker-raise", "worker-exit", "worker-segfault", "worker-hang")
KINDS = SIGNAL_KINDS + FILE_KINDS + WORKER_KINDS

MAX_RERUNS = 4
"""Reruns after the fault before the run counts as one that could not resume."""
STEP_TIMEOUT_S = 5.0
"""``env.step_timeout_s`` of the worker kinds (a hung worker is declared dead after it)."""
RESTART_ALLOWANCE_S = 20.0
"""What a worker fault may add to the run's wall time beyond ``env.step_timeout_s``."""
REPLAY_HINTS = ("replay", "chunk", "/data/")
"""A file kind with one of these in its path holds replay (its absence is shown as n/a)."""
FAULTY_ENV = "cadence.testing.fakes:cadence-testing/Faulty-v0"
FAULT_AT_STEP = 50
"""The env step of the worker fault (per env: a few iterations into the run)."""


@dataclasses.dataclass(frozen=True)
class CampaignConfig:
    """A short run of a named config, small enough for tens of attempts.

    Attributes:
        named: the named config (``cadence list``).
        overrides: ``key=value`` overrides (the training seed is added per campaign).
        worker_overrides: the overrides that swap the env for ``FaultyEnv`` on the
            parallel back end (besides ``env.env_kwargs``), or None where it does not fit.
        worker_kwargs: ``FaultyEnv``'s arguments besides the fault's (YAML flow mapping items).
    """

    named: str
    overrides: tuple[str, ...]
    worker_overrides: tuple[str, ...] | None = None
    worker_kwargs: str = ""

    @property
    def checkpoint_interval(self) -> int:
        """``trainer.checkpoint_interval`` as ``overrides`` set it."""
        prefix = "trainer.checkpoint_interval="
        return int(next(o for o in self.overrides if o.startswith(prefix)).removeprefix(prefix))


CONFIGS = {
    # Off-policy on the tensor back end: 40 iterations of 25 steps, ~10 s on one core.
    "sac_pendulum": CampaignConfig(
        "sac_pendulum",
        (
            "trainer.num_env_steps=1000",
            "trainer.unroll_length=25",
            "trainer.checkpoint_interval=3",
            "trainer.summary_interval=1",
            "trainer.eval_interval=10",
            "trainer.num_eval_episodes=1",
            "algorithm.off_policy.initial_collect_steps=100",
            "algorithm.off_policy.num_updates_per_train_iter=4",
            "algorithm.off_policy.mini_batch_size=64",
            "trainer.progress_bar=off",
            "trainer.num_threads=1",
        ),
        worker_overrides=(
            f"env.name={FAULTY_ENV}",
            "env.backend=parallel",
            "env.num_envs=2",
            "env.num_workers=2",
            f"env.step_timeout_s={STEP_TIMEOUT_S:g}",
        ),
        worker_kwargs="continuous: true",
    ),
    # On-policy on the serial back end (CartPole's state pickles): 32 iterations, ~10 s.
    "ppo_cartpole": CampaignConfig(
        "ppo_cartpole",
        (
            "env.num_envs=4",
            "trainer.unroll_length=32",
            "trainer.num_env_steps=4096",
            "trainer.checkpoint_interval=3",
            "trainer.summary_interval=1",
            "trainer.eval_interval=8",
            "trainer.num_eval_episodes=2",
            "trainer.progress_bar=off",
            "trainer.num_threads=1",
        ),
        worker_overrides=(
            f"env.name={FAULTY_ENV}",
            "env.backend=parallel",
            "env.num_workers=2",
            f"env.step_timeout_s={STEP_TIMEOUT_S:g}",
        ),
    ),
}

CAMPAIGN_ITERATIONS = 8
"""Iterations of a named config without its own entry in `CONFIGS` (`campaign_config`)."""


def campaign_config(name: str) -> CampaignConfig:
    """``CONFIGS[name]``, or for any other named config its CPU-sized run
    (`cadence.testing.resume.cpu_sized_overrides`) of `CAMPAIGN_ITERATIONS` iterations,
    checkpointing every second and evaluating every fourth (no worker-fault variant)."""
    if name in CONFIGS:
        return CONFIGS[name]
    kept = [
        o
        for o in cpu_sized_overrides(name, iterations=CAMPAIGN_ITERATIONS)
        if not o.startswith(("trainer.checkpoint_interval=", "trainer.eval_interval="))
    ]
    return CampaignConfig(name, (*kept, "trainer.checkpoint_interval=2", "trainer.eval_interval=4"))


def resolve_configs(names: Sequence[str]) -> list[str]:
    """The named configs ``--configs`` asks for (``all``: every one of ``cadence list``),
    each added to `CONFIGS` (`campaign_config`).

    Raises:
        SystemExit: a name is not a named config.
    """
    named = sorted(list_configs())
    chosen = named if "all" in names else list(dict.fromkeys(names))
    unknown = [name for name in chosen if name not in named]
    if unknown:
        raise SystemExit(f"--configs: not named configs: {', '.join(unknown)} (see cadence list)")
    for name in chosen:
        CONFIGS[name] = campaign_config(name)
    return chosen


# ---------------------------------------------------------------------- judging
@dataclasses.dataclass
class Reference:
    """The uninterrupted run of one config."""

    run_dir: Path
    command: list[str]
    wall_s: float
    first_row_s: float  # the startup: from the start to the first metrics row
    last_row_s: float  # from the start to the last row; after it, the final save and exit
    iterations: list[int]
    metrics: list[dict[str, Any]]
    state: dict[str, Any]


@dataclasses.dataclass
class Result:
    """One attempt's verdict (see the module docstring)."""

    config: str
    kind: str
    index: int
    landed: bool = False
    finished: bool = False
    equal: bool | None = None
    lost: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    reproduce: str = ""
    named: bool | None = None  # a damaged file: whether the rerun's output named it
    skipped: str = ""  # why the kind does not apply ("n/a (...)")


def rerun_to_completion(
    command: Sequence[str], run_dir: Path, timeout_s: float, result: Result, first: int = 1
) -> list[Invocation]:
    """Runs ``command`` again until ``COMPLETE`` (at most `MAX_RERUNS` times)."""
    reruns = []
    for n in range(first, first + MAX_RERUNS):
        if (run_dir / "COMPLETE").exists():
            break
        rerun = invoke(command, run_dir, run_dir.parent / f"{run_dir.name}.rerun{n}.log", timeout_s)
        reruns.append(rerun)
        if rerun.returncode != 0:
            detail = f" ({rerun.detail})" if rerun.detail else ""
            result.lost.append(
                f"rerun {n} exited {rerun.returncode}{detail}: {_last_line(rerun.output)}"
            )
    if not (run_dir / "COMPLETE").exists():
        result.lost.append(f"not complete after {MAX_RERUNS} reruns")
    return reruns


def judge_run(
    run_dir: Path, reference: Reference, result: Result, expect_equal: bool | None
) -> None:
    """Checks a finished run for what was lost (items 2, 3, 5) and against ``reference``."""
    records = read_metrics(run_dir)
    result.lost += [f"metrics.jsonl: {p}" for p in metrics_problems(records, reference.iterations)]
    torn = torn_lines(run_dir)
    if torn:
        result.lost.append(f"metrics.jsonl: {torn} line(s) that do not parse")
    duplicated = tensorboard_duplicates(run_dir)
    if duplicated:
        result.lost.append(
            f"TensorBoard: {len(duplicated)} tag(s) twice at a step, e.g. {duplicated[0]}"
        )
    state = _final_checkpoint(run_dir, reference.iterations[-1], result)
    if expect_equal is None or state is None:
        return
    result.equal = _equal_runs(records, state, reference, result)
    if expect_equal and not result.equal:
        result.notes.append("differs from the uninterrupted run")


def _final_checkpoint(run_dir: Path, final: int, result: Result) -> dict[str, Any] | None:
    manager = CheckpointManager(run_dir / "checkpoints")
    try:
        path, state = manager.load_verified()
    except Exception as error:  # noqa: BLE001 - whatever fails, the checkpoint is lost
        result.lost.append(f"final checkpoint: {_last_line(str(error))}")
        return None
    named = latest_iteration(manager.directory)
    iteration = int(state["counters"]["iteration"])
    if int(path.name) != named or iteration != final:
        result.lost.append(
            f"final checkpoint: {path.name} (iteration {iteration}) verifies, LATEST names "
            f"{named}, the run ends at {final}"
        )
        return None
    return state


def _equal_runs(
    records: list[dict[str, Any]], state: dict[str, Any], reference: Reference, result: Result
) -> bool:
    if comparable_metrics(records) != comparable_metrics(reference.metrics):
        result.notes.append("metrics differ")
        return False
    try:
        for key in ("algorithm", "scheme"):
            assert_equal_nests(state[key], reference.state[key], key)
    except AssertionError as error:
        result.notes.append(f"state differs at {str(error)[:80]}")
        return False
    return True


def check_redone(result: Result, logged: int, resumed: int, allowed: int, why: str) -> None:
    """Lost item 4: more iterations redone than ``allowed``."""
    if logged - resumed > allowed:
        result.lost.append(
            f"redone: logged iteration {logged}, resumed from {resumed} "
            f"({logged - resumed} > {allowed}, {why})"
        )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# --------------------------------------------------------------------- attempts
@dataclasses.dataclass
class Campaign:
    """Where and how the attempts run."""

    workdir: Path
    seed: int
    references: dict[str, Reference]
    keep_runs: bool = False

    def command(self, config: str, run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
        spec = CONFIGS[config]
        return cli_train_command(
            spec.named, run_dir, [*spec.overrides, *extra, f"seed={self.seed}"]
        )

    def timeout_s(self, config: str) -> float:
        return 10 * self.references[config].wall_s + 120

    def rng(self, config: str, kind: str, index: int) -> random.Random:
        return random.Random(f"{self.seed}/{config}/{kind}/{index}")

    def run_dir(self, config: str, kind: str, index: int) -> Path:
        path = self.workdir / config / f"{kind}-{index:03d}" / "run"
        shutil.rmtree(path.parent, ignore_errors=True)
        path.parent.mkdir(parents=True)
        return path

    def tidy(self, results: Sequence[Result], run_dir: Path) -> None:
        """Removes an attempt's files when every verdict is clean (kept with --keep-runs)."""
        clean = all(r.finished and not r.lost and r.equal is not False for r in results)
        if clean and not self.keep_runs:
            shutil.rmtree(run_dir.parent, ignore_errors=True)


def signal_attempt(campaign: Campaign, config: str, kind: str, index: int) -> list[Result]:
    """One ``sigkill``, ``sigkill-checkpoint``, ``sigterm`` or ``sigusr1`` attempt."""
    start = time.monotonic()
    reference = campaign.references[config]
    interval = CONFIGS[config].checkpoint_interval
    fault = draw_signal_fault(kind, campaign.rng(config, kind, index), reference, interval)
    run_dir = campaign.run_dir(config, kind, index)
    command = campaign.command(config, run_dir)
    result = Result(config, kind, index, reproduce=_reproduction(command, fault.describe()))
    faulted = invoke(
        command, run_dir, run_dir.parent / "run.log", campaign.timeout_s(config), fault
    )
    result.landed = faulted.landed and not (run_dir / "COMPLETE").exists()
    preempted = fault.sig != signal.SIGKILL and faulted.returncode == 0
    if faulted.returncode not in (0, -fault.sig):
        result.lost.append(
            f"the signalled run exited {faulted.returncode}: {_last_line(faulted.output)}"
        )
    if faulted.detail:
        result.notes.append(faulted.detail)
    if fault.sig != signal.SIGKILL and faulted.returncode == -fault.sig:
        result.notes.append("died before the trainer's handlers were installed")
    reruns = rerun_to_completion(command, run_dir, campaign.timeout_s(config), result)
    if reruns:
        allowed = 0 if preempted else CONFIGS[config].checkpoint_interval
        why = "pre-empted" if preempted else "one checkpoint interval"
        check_redone(
            result, faulted.logged_iteration, resumed_iteration(reruns[0].output), allowed, why
        )
    result.finished = (run_dir / "COMPLETE").exists() and all(r.returncode == 0 for r in reruns)
    judge_run(run_dir, reference, result, expect_equal=True)
    result.wall_s = time.monotonic() - start
    campaign.tidy([result], run_dir)
    return [result]


def draw_signal_fault(
    kind: str, rng: random.Random, reference: Reference, checkpoint_interval: int
) -> Fault:
    """The moment of a signal kind's fault, drawn from ``rng`` alone."""
    if kind == "sigkill-checkpoint":
        checkpoints = max(1, reference.iterations[-1] // checkpoint_interval)
        return Fault(
            signal.SIGKILL, staging=rng.randint(1, checkpoints), delay_s=rng.uniform(0, 0.04)
        )
    sig = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigusr1": signal.SIGUSR1}[kind]
    # A position in [-1, final): before 0, a moment of the startup and first iteration;
    # else a fraction of an iteration's time after the row of iteration position + 1 (after
    # the last row: a fraction of the final save and exit). Counted from rows rather than
    # seconds, the moments land alike on a busy or an idle machine. An iteration's time is
    # the span between the first and the last row, not the whole run's after the first: that
    # counts the final save and the interpreter's exit too, which on a short run outlast its
    # iterations and sent most faults past the end.
    final = reference.iterations[-1]
    position = rng.uniform(-1, final)
    if position < 0:
        return Fault(sig, at_s=(1 + position) * reference.first_row_s)
    after_row = int(position) + 1
    if after_row >= final:
        span = max(reference.wall_s - reference.last_row_s, 0.0)
        return Fault(sig, after_row=after_row, delay_s=(position % 1) * span)
    rows = max(1, final - reference.iterations[0])
    span = max(reference.last_row_s - reference.first_row_s, 0.0) / rows
    # Between rows the live run's own pace sets the delay (`Fault.row_fraction`): a run on a
    # machine busier or idler than the reference's is hit at the same point of an iteration.
    fraction = position % 1
    return Fault(sig, after_row=after_row, delay_s=fraction * span, row_fraction=fraction)


def file_attempt(campaign: Campaign, config: str, kind: str, index: int) -> list[Result]:
    """One ``flip`` or ``truncate`` attempt: a run killed after a checkpoint, then one
    copy of it per kind of file, that file damaged, each copy run to completion."""
    start = time.monotonic()
    reference = campaign.references[config]
    interval = CONFIGS[config].checkpoint_interval
    rng = campaign.rng(config, kind, index)
    # At least two checkpoints, so that an older one is there to fall back to.
    after = interval * rng.randint(2, max(2, reference.iterations[-1] // interval - 1))
    base = campaign.run_dir(config, kind, index)
    fault = Fault(signal.SIGKILL, after_checkpoint=after)
    killed = invoke(
        campaign.command(config, base),
        base,
        base.parent / "run.log",
        campaign.timeout_s(config),
        fault,
    )
    if not killed.landed or (base / "COMPLETE").exists():
        result = Result(config, kind, index, wall_s=time.monotonic() - start)
        result.lost.append(
            f"the run to damage was not killed ({killed.detail or killed.returncode})"
        )
        return [result]
    results = []
    for name, paths in sorted(corruptible_files(base).items()):
        result = damage_and_resume(campaign, config, kind, index, base, rng.choice(paths), killed)
        result.kind = f"{kind} {name}"
        results.append(result)
    for result in results:
        result.wall_s = (time.monotonic() - start) / len(results)
    campaign.tidy(results, base)
    return results


def damage_and_resume(
    campaign: Campaign,
    config: str,
    kind: str,
    index: int,
    base: Path,
    original: Path,
    killed: Invocation,
) -> Result:
    """Damages ``original``'s counterpart in a copy of ``base`` and resumes the copy."""
    run_dir = base.parent / re.sub(r"[^\w.]+", "_", original.relative_to(base).as_posix()) / "run"
    shutil.copytree(base, run_dir)
    target = run_dir / original.relative_to(base)
    damage = flip_byte if kind == "flip" else truncate_file
    where = damage(target)
    command = campaign.command(config, run_dir)
    what = f"{kind} {target.relative_to(run_dir)} at byte {where}"
    result = Result(config, kind, index, landed=True, reproduce=_reproduction(command, what))
    reruns = rerun_to_completion(command, run_dir, campaign.timeout_s(config), result)
    output = "".join(r.output for r in reruns)
    result.named = any(name in output for name in identifying_names(target, run_dir))
    if not result.named:
        result.lost.append(f"{target.name} damaged, but the output does not name it")
    if reruns:
        interval = CONFIGS[config].checkpoint_interval
        resumed = resumed_iteration(reruns[0].output)
        check_redone(result, killed.logged_iteration, resumed, 2 * interval, "a fallback by one")
    result.finished = (run_dir / "COMPLETE").exists() and all(r.returncode == 0 for r in reruns)
    judge_run(run_dir, campaign.references[config], result, expect_equal=False)
    return result


def worker_attempt(campaign: Campaign, config: str, kind: str, index: int) -> list[Result]:
    """One worker fault: ``FaultyEnv`` fails once in a worker of the parallel back end."""
    start = time.monotonic()
    fault = kind.removeprefix("worker-")
    result = Result(config, kind, index)
    run_dir = campaign.run_dir(config, kind, index)
    at_step = campaign.rng(config, kind, index).randint(FAULT_AT_STEP // 2, 2 * FAULT_AT_STEP)
    command = worker_command(campaign, config, run_dir, fault, at_step, run_dir.parent / "fired")
    result.reproduce = _reproduction(command, f"{fault} at env step {at_step}")
    timeout_s = campaign.timeout_s(config) + 10 * STEP_TIMEOUT_S
    faulted = invoke(command, run_dir, run_dir.parent / "run.log", timeout_s)
    result.landed = (run_dir.parent / "fired").exists()
    result.finished = faulted.returncode == 0 and (run_dir / "COMPLETE").exists()
    if not result.finished:
        result.notes.append(
            f"the faulted run exited {faulted.returncode}"
            + (f" ({faulted.detail})" if faulted.detail else "")
            + f": {_last_line(faulted.output)[:120]}"
        )
        reruns = rerun_to_completion(command, run_dir, timeout_s, result)
        if reruns:
            resumed = resumed_iteration(reruns[0].output)
            interval = CONFIGS[config].checkpoint_interval
            check_redone(
                result, faulted.logged_iteration, resumed, interval, "one checkpoint interval"
            )
    baseline = campaign.references[f"{config}/workers"]
    if result.finished:
        extra = faulted.wall_s - baseline.wall_s
        result.notes.append(f"+{max(0.0, extra):.0f} s")
        if extra > STEP_TIMEOUT_S + RESTART_ALLOWANCE_S:
            result.notes.append(f"recovery slower than {STEP_TIMEOUT_S + RESTART_ALLOWANCE_S:g} s")
    judge_run(run_dir, baseline, result, expect_equal=None)
    result.wall_s = time.monotonic() - start
    campaign.tidy([result], run_dir)
    return [result]


def worker_command(
    campaign: Campaign, config: str, run_dir: Path, fault: str, at_step: int, once_file: Path
) -> list[str]:
    """The command of a worker fault (``once_file`` existing: the fault never fires)."""
    return campaign.command(config, run_dir, worker_overrides(config, fault, at_step, once_file))


def worker_overrides(config: str, fault: str, at_step: int, once_file: Path) -> list[str]:
    """``config``'s overrides for ``FaultyEnv`` failing with ``fault`` at ``at_step`` once."""
    spec = CONFIGS[config]
    items = [f"fault: {fault}", f"at_step: {at_step}", f"once_file: '{once_file}'"]
    items += [spec.worker_kwargs] if spec.worker_kwargs else []
    # "++": Hydra refuses a plain "=" for a dict the config holds empty.
    return [*spec.worker_overrides, f"++env.env_kwargs={{{', '.join(items)}}}"]


def worker_kinds_missing(kind: str) -> str | None:
    """Why a worker kind cannot run here ("n/a (...)"), or None."""
    try:
        from cadence.testing import fakes
    except ImportError as error:  # pragma: no cover - cadence itself is missing
        return f"n/a ({error})"
    if not hasattr(fakes, "FaultyEnv"):
        return "n/a (FaultyEnv not available)"
    import attrs

    from cadence.envs.config import EnvConfig

    if "step_timeout_s" not in attrs.fields_dict(EnvConfig):
        return "n/a (env.step_timeout_s not available)"
    return None


def _reproduction(command: Sequence[str], fault: str) -> str:
    return f"{shlex.join(command)}   # then: {fault}; rerun the command until complete"


# ------------------------------------------------------------------ references
def run_reference(
    workdir: Path, config: str, seed: int, name: str = "uninterrupted", extra: Sequence[str] = ()
) -> Reference:
    """Trains ``config`` without a fault; its metrics and final state are the yardstick."""
    run_dir = workdir / config / name / "run"
    shutil.rmtree(run_dir.parent, ignore_errors=True)
    run_dir.parent.mkdir(parents=True)
    spec = CONFIGS[config]
    command = cli_train_command(spec.named, run_dir, [*spec.overrides, *extra, f"seed={seed}"])
    done = _uninterrupted(command, run_dir)
    if AUTO_MEASURED.search(done.output):
        # ``compile: auto``'s first run on a machine times eager against compiled updates
        # (both train) before it records its choice; every later run reads the record and
        # rounds differently from that first one. The yardstick must be such a later run.
        shutil.rmtree(run_dir)
        done = _uninterrupted(command, run_dir)
    records = read_metrics(run_dir)
    state = CheckpointManager(run_dir / "checkpoints").load_verified()[1]
    iterations = [int(r["iteration"]) for r in records]
    first_row_s = done.first_row_s if done.first_row_s is not None else 0.0
    last_row_s = done.last_row_s if done.last_row_s is not None else first_row_s
    return Reference(
        run_dir, command, done.wall_s, first_row_s, last_row_s, iterations, records, state
    )


AUTO_MEASURED = re.compile(r"compile=auto: .*(per call|eager [0-9.]+ ms, compiled)")
"""What a run logs when ``compile: auto`` measured its choice (rather than reading it)."""


def _uninterrupted(command: Sequence[str], run_dir: Path) -> Invocation:
    done = invoke(command, run_dir, run_dir.parent / "run.log", 1800, watch_rows=True)
    if done.returncode != 0 or not (run_dir / "COMPLETE").exists():
        raise RuntimeError(
            f"{shlex.join(command)} failed ({done.returncode}):\n{done.output[-3000:]}"
        )
    return done


def worker_reference(campaign: Campaign, config: str) -> Reference:
    """The FaultyEnv run whose fault never fires (its once-file exists): the time to beat."""
    once = campaign.workdir / config / "workers-never-fires"
    once.parent.mkdir(parents=True, exist_ok=True)
    once.touch()
    overrides = worker_overrides(config, "exit", 1, once)
    return run_reference(campaign.workdir, config, campaign.seed, "workers", overrides)


# ------------------------------------------------------------------------- table
def summarize(results: Sequence[Result]) -> list[dict[str, Any]]:
    """One row per (config, fault) in the order first seen."""
    rows: dict[tuple[str, str], list[Result]] = {}
    for result in results:
        rows.setdefault((result.config, result.kind), []).append(result)
    summary = []
    for (config, kind), group in rows.items():
        ran = [r for r in group if not r.skipped]
        notes: dict[str, int] = {}
        for r in ran:
            for note in r.notes:
                notes[note] = notes.get(note, 0) + 1
        judged = [r.equal for r in ran if r.equal is not None]
        named = [r.named for r in ran if r.named is not None]
        if named:
            notes[f"named {sum(named)}/{len(named)}"] = 1
        summary.append(
            {
                "config": config,
                "fault": kind,
                "skipped": group[0].skipped if not ran else "",
                "attempts": len(ran),
                "landed": sum(r.landed for r in ran),
                "finished": sum(r.finished for r in ran),
                "equal": f"{sum(judged)}/{len(judged)}" if judged else "n/a",
                "lost": sum(bool(r.lost) for r in ran),
                "named": sum(named) if named else None,
                "wall_s": sum(r.wall_s for r in ran),
                "notes": "; ".join(f"{n} (x{k})" if k > 1 else n for n, k in notes.items()),
            }
        )
    return summary


def format_table(summary: Sequence[dict[str, Any]]) -> str:
    header = (
        "config",
        "fault",
        "attempts",
        "landed",
        "finished",
        "equal",
        "lost",
        "wall s",
        "notes",
    )
    lines = [header]
    for row in summary:
        if row["skipped"]:
            lines.append((row["config"], row["fault"], row["skipped"], "", "", "", "", "", ""))
            continue
        lines.append(
            (
                row["config"],
                row["fault"],
                str(row["attempts"]),
                str(row["landed"]),
                str(row["finished"]),
                row["equal"],
                str(row["lost"]),
                f"{row['wall_s']:.0f}",
                row["notes"][:150],
            )
        )
    regular = [line for line in lines if not line[2].startswith("n/a")]
    widths = [max(len(line[i]) for line in (lines if i < 2 else regular)) for i in range(8)]
    return "\n".join(_format_line(line, widths) for line in lines)


def _format_line(line: Sequence[str], widths: Sequence[int]) -> str:
    if line[2].startswith("n/a"):
        return f"{line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]}"
    cells = [
        f"{cell:<{w}}" if i < 2 else f"{cell:>{w}}"
        for i, (cell, w) in enumerate(zip(line, widths, strict=False))
    ]
    return "  ".join(cells) + (f"  {line[8]}" if line[8] else "")


# -------------------------------------------------------------------------- main
def plan(args: argparse.Namespace) -> list[tuple[Callable[..., list[Result]], str, str, int]]:
    """The attempts to run: (function, config, kind, index)."""
    tasks = []
    for config in args.configs:
        for kind in args.kinds:
            if kind in SIGNAL_KINDS:
                tasks += [(signal_attempt, config, kind, i) for i in range(args.attempts)]
            elif kind in FILE_KINDS:
                tasks += [(file_attempt, config, kind, i) for i in range(args.repeats)]
            else:
                tasks += [(worker_attempt, config, kind, i) for i in range(args.repeats)]
    return tasks


def skipped_results(args: argparse.Namespace) -> dict[tuple[str, str], Result]:
    """The (config, worker kind) pairs that cannot run here, with why."""
    skipped = {}
    for config in args.configs:
        for kind in args.kinds:
            if kind not in WORKER_KINDS:
                continue
            why = (
                "n/a (no FaultyEnv variant of this config)"
                if CONFIGS[config].worker_overrides is None
                else worker_kinds_missing(kind)
            )
            if why:
                skipped[config, kind] = Result(config, kind, 0, skipped=why)
    return skipped


def missing_replay_rows(args: argparse.Namespace, results: Sequence[Result]) -> list[Result]:
    """An "n/a (no such files)" row per (config, file fault) that found no replay files."""
    rows = []
    for config in args.configs:
        for kind in (k for k in args.kinds if k in FILE_KINDS):
            kinds = {r.kind for r in results if r.config == config and r.kind.startswith(kind)}
            if not any(hint in k for k in kinds for hint in REPLAY_HINTS):
                rows.append(
                    Result(config, f"{kind} replay files", 0, skipped="n/a (no such files)")
                )
    return rows


def run_campaign(args: argparse.Namespace) -> list[Result]:
    skipped = skipped_results(args)
    tasks = [t for t in plan(args) if (t[1], t[2]) not in skipped]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        references = {
            config: pool.submit(run_reference, args.workdir, config, args.seed)
            for config in args.configs
        }
        campaign = Campaign(args.workdir, args.seed, {}, args.keep_runs)
        if any(t[0] is worker_attempt for t in tasks):
            for config in {t[1] for t in tasks if t[0] is worker_attempt}:
                references[f"{config}/workers"] = pool.submit(worker_reference, campaign, config)
        campaign.references = {name: future.result() for name, future in references.items()}
        for name, reference in campaign.references.items():
            print(
                f"uninterrupted {name}: {reference.wall_s:.1f} s, {len(reference.iterations)} rows"
            )
        futures = [pool.submit(function, campaign, *rest) for function, *rest in tasks]
        results: list[Result] = []
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            for result in future.result():
                report_attempt(result, done, len(futures), args)
                results.append(result)
    order = {(c, k): i for i, (_, c, k, _) in enumerate(tasks)}
    results.sort(key=lambda r: (order.get((r.config, r.kind.split()[0]), 0), r.kind, r.index))
    return results + list(skipped.values()) + missing_replay_rows(args, results)


def report_attempt(result: Result, done: int, total: int, args: argparse.Namespace) -> None:
    verdict = "ok" if result.finished and not result.lost else "FAILED"
    equal = {True: ", equal", False: ", not equal", None: ""}[result.equal]
    print(
        f"[{done}/{total}] {result.config} {result.kind} #{result.index}: {verdict}{equal}"
        f" ({result.wall_s:.1f} s){'; ' + '; '.join(result.notes) if result.notes else ''}",
        flush=True,
    )
    if verdict == "FAILED":
        for item in result.lost:
            print(f"    lost: {item}")
        print(f"    reproduce: {result.reproduce}")
        print(
            f"    or: python benchmarks/fault_campaign.py --configs {result.config} --kinds "
            f"{result.kind.split()[0]} --seed {args.seed} --attempts {result.index + 1} "
            f"--repeats {result.index + 1} --keep-runs"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="the CI-sized subset (2 and 1 attempts)"
    )
    parser.add_argument(
        "--attempts", type=int, help="attempts per signal kind (default 20, --quick 2)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help="runs per file kind and worker kind (default 2, --quick 1)",
    )
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--configs",
        nargs="+",
        default=list(CONFIGS),
        metavar="NAME",
        help=f"named configs, or 'all' for every one (default: {' '.join(CONFIGS)}); one "
        "without a tuned entry here runs CPU-sized, with no worker-fault variant",
    )
    parser.add_argument("--seed", type=int, default=0, help="training seed and fault moments")
    parser.add_argument("--workdir", type=Path, help="where the runs go (default: a new temp dir)")
    parser.add_argument("--jobs", type=int, default=1, help="attempts run at once")
    parser.add_argument("--keep-runs", action="store_true", help="keep clean attempts' runs too")
    parser.add_argument("--json", type=Path, help="also write the rows and every failure here")
    args = parser.parse_args(argv)
    args.configs = resolve_configs(args.configs)
    args.attempts = args.attempts if args.attempts is not None else (2 if args.quick else 20)
    args.repeats = args.repeats if args.repeats is not None else (1 if args.quick else 2)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="fault_campaign-"))
    args.workdir = args.workdir.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    print(f"fault campaign in {args.workdir} (seed {args.seed}, {args.jobs} job(s))", flush=True)
    results = run_campaign(args)
    summary = summarize(results)
    print()
    print(format_table(summary))
    total = time.monotonic() - start
    print(f"\ntotal wall time: {total:.0f} s ({total / 60:.1f} min)")
    failures = [r for r in results if not r.skipped and (r.lost or not r.finished)]
    if args.json is not None:
        failed = [dataclasses.asdict(r) for r in failures]
        args.json.write_text(
            json.dumps({"rows": summary, "failures": failed, "wall_s": total}, indent=1)
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
