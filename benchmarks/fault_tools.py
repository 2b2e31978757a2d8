"""What `fault_campaign.py` does to a ``cadence train`` run, and what it reads back from one.

Damage (`flip_byte`, `truncate_file`) and where to do it (`corruptible_files`, by
`file_kind`); processes started and signalled at a chosen moment (`invoke`, `Fault`);
and the evidence a run leaves (`metrics_problems`, `torn_lines`,
`tensorboard_duplicates`, `resumed_iteration`, `last_logged_iteration`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cadence
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.metrics import read_metrics

# What a run directory holds besides checkpoints and durable replay: never damaged.
_LOG_FILES = {"config.yaml", "config_changes.jsonl", "snapshot.tar.gz", "metrics.jsonl", "COMPLETE"}
_LOG_DIRS = {"tb", "videos"}  # outputs a run never reads back
_RESUMED = re.compile(r"resumed from \S+ \(iteration (\d+)\)")


# ----------------------------------------------------------------------- damage
def flip_byte(path: Path, offset: int | None = None) -> int:
    """Flips every bit of one byte of ``path`` (the middle one by default); returns its offset."""
    data = bytearray(Path(path).read_bytes())
    if not data:
        raise ValueError(f"{path} is empty: no byte to flip")
    offset = len(data) // 2 if offset is None else offset
    data[offset] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    return offset


def truncate_file(path: Path) -> int:
    """Cuts ``path`` to half its size (a write torn by a crash or a full disk); returns it."""
    size = Path(path).stat().st_size // 2
    os.truncate(path, size)
    return size


def file_kind(relative: str) -> str:
    """A file's kind: its path in the run directory with each run of digits as ``N``.

    >>> file_kind("checkpoints/00000012/state.pt")
    'checkpoints/N/state.pt'
    """
    return re.sub(r"\d+", "N", relative)


def corruptible_files(run_dir: Path) -> dict[str, list[Path]]:
    """The files of ``run_dir`` a fault may corrupt, by `file_kind`.

    Those of the checkpoint ``LATEST`` names, ``LATEST`` itself, and every other file
    outside ``checkpoints/`` that is not a log (`_LOG_FILES`, ``tb/``, ``videos/``): durable
    replay.
    """
    run_dir = Path(run_dir)
    found: list[Path] = []
    checkpoints = run_dir / "checkpoints"
    newest = CheckpointManager(checkpoints).latest()
    if newest is not None:
        found += sorted(p for p in newest.rglob("*") if p.is_file())
    if (checkpoints / "LATEST").is_file():
        found.append(checkpoints / "LATEST")
    for top in sorted(run_dir.iterdir()):
        if top.name in _LOG_FILES or top.name in _LOG_DIRS or top.name == "checkpoints":
            continue
        found += sorted(p for p in ([top] if top.is_file() else top.rglob("*")) if p.is_file())
    kinds: dict[str, list[Path]] = {}
    for path in found:
        kinds.setdefault(file_kind(path.relative_to(run_dir).as_posix()), []).append(path)
    return kinds


def identifying_names(path: Path, run_dir: Path) -> list[str]:
    """How an output may name ``path``: its name where no other file of the run has it,
    else with its folder (``00000006/state.pt``), or its full path."""
    names = [str(path), f"{path.parent.name}/{path.name}"]
    same = [p for p in run_dir.rglob(path.name) if p.is_file()]
    return names + ([path.name] if len(same) <= 1 else [])


def metrics_problems(records: Sequence[dict[str, Any]], expected: Sequence[int]) -> list[str]:
    """What is wrong with a run's ``metrics.jsonl`` rows, given the iterations it must log.

    Args:
        records: the rows (`cadence.trainer.metrics.read_metrics`).
        expected: the iterations of the uninterrupted run's rows, in order.

    Returns:
        One message per problem (duplicated, missing, unexpected or out-of-order
        iterations); empty when the rows log exactly ``expected``.
    """
    iterations = [int(r["iteration"]) for r in records]
    problems = []
    seen: set[int] = set()
    duplicates = sorted({i for i in iterations if i in seen or seen.add(i)})
    if duplicates:
        problems.append(f"iterations logged twice: {_span(duplicates)}")
    if any(b < a for a, b in zip(iterations, iterations[1:], strict=False)):
        problems.append("iterations out of order")
    missing = sorted(set(expected) - seen)
    if missing:
        problems.append(f"iterations missing: {_span(missing)}")
    extra = sorted(seen - set(expected))
    if extra:
        problems.append(f"iterations not in the uninterrupted run: {_span(extra)}")
    return problems


def torn_lines(run_dir: Path) -> int:
    """How many lines of ``metrics.jsonl`` do not parse."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if not _parses(line))


def tensorboard_duplicates(run_dir: Path) -> list[str]:
    """Scalars TensorBoard shows twice at one step (after applying the resumes' purges)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return []
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # it warns of every purge
    accumulator = EventAccumulator(str(Path(run_dir) / "tb"), size_guidance={"scalars": 0})
    accumulator.Reload()
    duplicated = []
    for tag in accumulator.Tags()["scalars"]:
        steps = [event.step for event in accumulator.Scalars(tag)]
        if len(steps) != len(set(steps)):
            duplicated.append(tag)
    return duplicated


def resumed_iteration(output: str) -> int:
    """The iteration a ``cadence train`` output says it resumed from (0: a fresh start)."""
    found = _RESUMED.findall(output)
    return int(found[-1]) if found else 0


def _span(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:8]))
    return shown + (f", ... ({len(values)} in all)" if len(values) > 8 else "")


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------- processes
@dataclasses.dataclass
class Invocation:
    """One ``cadence train`` process: how it ended and what it printed."""

    returncode: int
    output: str
    wall_s: float
    landed: bool = False
    detail: str = ""
    logged_iteration: int = 0  # the last iteration in metrics.jsonl when it exited
    first_row_s: float | None = None  # when metrics.jsonl got its first row (if watched)
    last_row_s: float | None = None  # when it got its last row (if watched)


@dataclasses.dataclass(frozen=True)
class Fault:
    """When to signal a process: ``at_s`` after its start, or ``delay_s`` after the row
    of iteration ``after_row`` is logged (with ``row_fraction``: that fraction of the time
    the live run took between its two rows before, when it logged two; so a run faster or
    slower than the reference is hit at the same point of its iteration), or ``delay_s``
    after the ``staging``-th
    checkpoint staging directory appears, or once ``after_checkpoint`` is published."""

    sig: int
    at_s: float | None = None
    after_row: int | None = None
    staging: int | None = None
    delay_s: float = 0.0
    row_fraction: float | None = None
    after_checkpoint: int | None = None

    def describe(self) -> str:
        name = signal.Signals(self.sig).name
        if self.after_row is not None:
            return f"{name} {self.delay_s:.3f} s after iteration {self.after_row}'s metrics row"
        if self.staging is not None:
            return f"{name} {self.delay_s * 1e3:.0f} ms after checkpoint staging #{self.staging}"
        if self.after_checkpoint is not None:
            return f"{name} once checkpoint {self.after_checkpoint} is published"
        return f"{name} at {self.at_s:.2f} s"


def invoke(
    command: Sequence[str],
    run_dir: Path,
    log: Path,
    timeout_s: float,
    fault: Fault | None = None,
    watch_rows: bool = False,
) -> Invocation:
    """Runs ``command`` to its end, sending ``fault`` if given; its output goes to ``log``.

    With ``watch_rows``, notes when training logged its first row (the end of startup) and
    its last one (the start of the final save and exit).
    """
    start = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_sigint,
            env=_child_environment(),
        )
        landed, detail, row_times = False, "", (None, None)
        try:
            if watch_rows:
                row_times = _row_times(process, run_dir, start, start + timeout_s)
            if fault is not None:
                landed, detail = _send_when_due(process, run_dir, fault, start + timeout_s)
            process.wait(timeout=max(1.0, start + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            detail = f"timed out after {timeout_s:.0f} s and was killed"
    records = read_metrics(run_dir)
    return Invocation(
        process.returncode,
        log.read_text(errors="replace"),
        time.monotonic() - start,
        landed,
        detail,
        max((int(r["iteration"]) for r in records), default=0),
        *row_times,
    )


def _row_times(
    process: subprocess.Popen, run_dir: Path, start: float, deadline: float
) -> tuple[float | None, float | None]:
    """When ``metrics.jsonl`` first and last grew, in seconds after ``start``, watched
    until the process exits (None: it never grew)."""
    metrics = run_dir / "metrics.jsonl"
    first = last = None
    size = 0
    while process.poll() is None and time.monotonic() < deadline:
        grown = metrics.stat().st_size if metrics.exists() else 0
        if grown > size:
            size, last = grown, time.monotonic() - start
            first = last if first is None else first
        time.sleep(0.005)
    return first, last


def _send_when_due(
    process: subprocess.Popen, run_dir: Path, fault: Fault, deadline: float
) -> tuple[bool, str]:
    """Waits for ``fault``'s moment and signals; returns (landed, what the moment found)."""
    checkpoints = run_dir / "checkpoints"
    start = time.monotonic()
    seen: set[str] = set()
    rows: list[tuple[int, float]] = []  # (iteration, when it was seen) as rows appear
    while process.poll() is None and time.monotonic() < deadline:
        if fault.at_s is not None and time.monotonic() - start >= fault.at_s:
            break
        if fault.after_checkpoint is not None:
            if latest_iteration(checkpoints) >= fault.after_checkpoint:
                break
        if fault.after_row is not None:
            logged = last_logged_iteration(run_dir)
            if logged and (not rows or rows[-1][0] != logged):
                rows.append((logged, time.monotonic()))
            if logged >= fault.after_row:
                time.sleep(_row_delay(fault, rows))
                break
        if fault.staging is not None:
            seen |= _staging_names(checkpoints)
            if len(seen) >= fault.staging:
                time.sleep(fault.delay_s)
                break
        time.sleep(0.001 if fault.staging is not None else 0.005)
    if process.poll() is not None or (run_dir / "COMPLETE").exists():
        return False, "the run had ended"
    in_write = bool(_staging_names(checkpoints))
    process.send_signal(fault.sig)
    return True, "during a checkpoint write" if in_write else ""


def _row_delay(fault: Fault, rows: list[tuple[int, float]]) -> float:
    """``fault``'s delay after its row: ``row_fraction`` of the live run's last row interval
    (per iteration) when it has logged two rows, else the reference's ``delay_s``."""
    if fault.row_fraction is None or len(rows) < 2:
        return fault.delay_s
    (before, seen_before), (last, seen_last) = rows[-2], rows[-1]
    return fault.row_fraction * (seen_last - seen_before) / max(1, last - before)


def last_logged_iteration(run_dir: Path) -> int:
    """The iteration of the last whole row of ``metrics.jsonl`` (0: none yet)."""
    try:
        with open(Path(run_dir) / "metrics.jsonl", "rb") as f:
            start = f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            lines = f.read().decode(errors="replace").split("\n")
    except FileNotFoundError:
        return 0
    for line in reversed(lines[1:] if start > 0 else lines):  # the first may be cut
        if _parses(line) and line.strip():
            return int(json.loads(line)["iteration"])
    return 0


def _staging_names(checkpoints: Path) -> set[str]:
    """The checkpoint directories being written (``.<iteration>.tmp``; not ``.LATEST.tmp``)."""
    try:
        return {e.name for e in os.scandir(checkpoints) if e.name.endswith(".tmp") and e.is_dir()}
    except FileNotFoundError:
        return set()


def _child_environment() -> dict[str, str]:
    """This environment, with the cadence this script imported first on the path."""
    root = str(Path(cadence.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _default_sigint() -> None:
    # A shell's background job inherits SIGINT ignored; the trainer should see the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
