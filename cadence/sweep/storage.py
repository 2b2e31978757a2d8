"""The study's storage: an Optuna storage URL opened under a lock, and what trials record in it."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cadence.sweep.dependency import require_optuna

_T = TypeVar("_T")

SPEC_ATTR = "cadence_sweep"  # the study's user attribute holding its SweepSpec
RUN_ATTR = "run"  # a trial's run directory number (a retried trial keeps its original's)
OVERRIDES_ATTR = "overrides"
HEARTBEAT_ATTR = "heartbeat"
RETRIES_ATTR = "retries"


def storage_url(sweep_dir: Path, storage: str | None) -> str:
    """``storage``, or the default ``sqlite:///<sweep_dir>/study.db``."""
    return storage or f"sqlite:///{Path(sweep_dir).resolve() / 'study.db'}"


def open_storage(url: str) -> tuple[Any, StudyLock]:
    """The Optuna storage of ``url`` and the lock that serializes its users on one machine
    (a file beside a SQLite or journal file; none for a database server, which has its own
    locking). The storage is created under the lock: two processes creating one SQLite
    database at once would both write its schema.

    ``sqlite:///PATH`` is a SQLite file in WAL mode, waiting up to 60 s for a lock;
    ``journal:///PATH`` is Optuna's journal file storage (for file systems shared by
    several machines, e.g. NFS); any other URL is an SQLAlchemy URL (PostgreSQL, MySQL).
    """
    optuna = require_optuna()
    if url.startswith("journal://"):
        path = Path(url.removeprefix("journal://")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            from optuna.storages.journal import JournalFileBackend
        except ImportError:  # Optuna < 4
            from optuna.storages import JournalFileStorage as JournalFileBackend
        lock = StudyLock(_lock_path(path))
        backend = lock.call(JournalFileBackend, str(path))
        return optuna.storages.JournalStorage(backend), lock
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = StudyLock(_lock_path(path))
        lock.call(_use_wal, path)
        connect_args = {"connect_args": {"timeout": 60}}
        return lock.call(optuna.storages.RDBStorage, url, engine_kwargs=connect_args), lock
    lock = StudyLock(None)
    return lock.call(optuna.storages.RDBStorage, url), lock


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _use_wal(path: Path) -> None:
    """WAL lets readers (a dashboard, ``--summary``) read while a sweep writes; the mode is
    stored in the database file, so setting it once holds for every later connection."""
    import sqlite3

    connection = sqlite3.connect(path, timeout=60)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


class StudyLock:
    """Serializes the storage operations of the sweep processes of one machine.

    Every call takes an exclusive ``flock`` on ``path`` (when there is one) and retries an
    operation that a busy database refused (``database is locked``, e.g. while a dashboard
    reads), so that SQLite, which allows one writer at a time, never fails a sweep.
    """

    def __init__(self, path: Path | None, attempts: int = 20):
        self.path = path
        self.attempts = attempts

    def call(self, operation: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``operation(*args, **kwargs)`` under the lock, retried while the database is busy."""
        for attempt in range(self.attempts):
            with self._held():
                try:
                    return operation(*args, **kwargs)
                except Exception as error:  # noqa: BLE001 - only a busy database is retried
                    if attempt + 1 == self.attempts or not _is_busy(error):
                        raise
            time.sleep(min(5.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        import fcntl

        with open(self.path, "a") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)


def _is_busy(error: Exception) -> bool:
    text = str(error).lower()
    return "database is locked" in text or "database is busy" in text
