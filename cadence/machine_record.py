"""Choices that ``auto`` measures once per machine and every later process reads back.

Some of cadence's ``auto`` choices come from a timing (whether an env's steps are worth
worker processes) and also decide a run's numbers: a run whose envs get workers leaves
them its cores and trains on fewer torch threads, whose multiplies split, and so round,
differently. Measured in every process, such a choice follows the machine's load, and
two runs of one seed and config can end apart. `recorded` takes the measurement in the
first process that needs it and keeps it in a JSON file in the compile cache folder,
keyed by what it depends on; every later process on the machine reads it there, so a
seed gives the same numbers in every run, sweeps and test sessions included. A lock makes
processes that start together wait for the first one's measurement. Deleting the file
measures again.

``compile: auto`` measures along the way instead, timing a run's first updates and unrolls
each way: the first run to choose records its choices (`record_first`), and later runs
take them from their first call (`recall`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def recorded(
    file_name: str,
    key: str,
    measure: Callable[[], Any],
    usable: Callable[[Any], bool],
) -> Any:
    """The value recorded under ``key`` in ``file_name`` (in `record_directory`), measured
    and recorded first where there is none or this process cannot use it.

    Args:
        file_name: the record, e.g. ``"env_step_cost.json"``: one JSON object.
        key: what the measurement depends on (`machine_key` and the measured thing).
        measure: takes the measurement and returns what to record (JSON: a choice, a time).
        usable: whether this process can act on a recorded value (e.g. a kernel that no
            longer loads); one it cannot is measured again.

    Returns:
        The recorded value, or the one just measured. Where the folder cannot be written
        (read only), a warning says so and this process keeps its own measurement.
    """
    path = record_directory() / file_name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(path.with_name(path.name + ".lock")):
            records = _read(path)
            if usable(records.get(key)):
                return records[key]
            records[key] = measure()
            _write(path, records)
            return records[key]
    except OSError as error:
        logger.warning("cannot record a measurement in %s (%s)", path, error)
        return measure()


def recall(file_name: str | Path, key: str) -> Any:
    """The value recorded under ``key`` in ``file_name`` (in `record_directory`; a path
    is taken as it is), None where there is none."""
    return _read(record_directory() / file_name).get(key)


def record_first(file_name: str | Path, key: str, value: Any) -> None:
    """Records ``value`` under ``key`` in ``file_name`` unless a value is there already:
    for a choice a run measures along the way (`recorded` measures up front), the first
    process to finish its measurement sets it for the machine. Where the folder cannot be
    written, a warning says so."""
    path = record_directory() / file_name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(path.with_name(path.name + ".lock")):
            records = _read(path)
            if key not in records:
                records[key] = value
                _write(path, records)
    except OSError as error:
        logger.warning("cannot record a measurement in %s (%s)", path, error)


def compile_cache_dir() -> Path:
    """Where compiled artifacts and the machine's records persist: ``$CADENCE_COMPILE_CACHE``,
    else ``$XDG_CACHE_HOME/cadence/torch-compile`` (``~/.cache/...``; PyTorch's own default
    is under ``/tmp``, which a reboot empties). The caches key every entry by the torch
    version, the code and the shapes, so one folder serves every config and version."""
    explicit = os.environ.get("CADENCE_COMPILE_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "cadence" / "torch-compile"


def record_directory() -> Path:
    """The compile cache folder (`compile_cache_dir`), which holds the records with the
    compiled code."""
    return compile_cache_dir()


def machine_key() -> str:
    """The machine as the records key it: the architecture, a digest of the instruction-set
    flags and the processor model (a cache folder may be shared by several machines)."""
    return f"{machine()} {_cpu_model()}"


def machine() -> str:
    """The processor's architecture and a digest of its instruction-set flags: a cache
    folder shared by several machines keeps each one's kernels and records apart."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return f"{platform.machine()}:{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def _cpuinfo_field(name: str) -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            line = next((line for line in cpuinfo if line.startswith(name)), "")
    except OSError:
        line = ""
    return line.partition(":")[2].strip()


def _cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or "unknown"


def _read(path: Path) -> dict[str, Any]:
    """The recorded choices, or none where the file is missing or damaged."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def _write(path: Path, records: dict[str, Any]) -> None:
    # Under the lock: a write cut short leaves a damaged record, measured again.
    path.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` among processes, which the OS releases if the
    holder dies (where ``fcntl`` exists; elsewhere nothing is locked)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
