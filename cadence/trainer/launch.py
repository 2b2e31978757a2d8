"""The local rank group: starts the N ranks of a multi-process learner on this machine
(``cadence train NAME --nproc N``), as ``torchrun --standalone --nproc-per-node N`` would
(docs/ddp.md), and keeps them.

The ranks are ``python -m cadence.cli.rank RUN_DIR`` processes with
``torchrun``'s environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), and, as under ``torchrun``, the group's rendezvous
store lives in this process rather than in rank 0's (`GroupStore`), so that no rank loses
it while the others are still shutting down. Each reads the run's ``config.yaml``, which
the caller has checked and written first (`cadence.trainer.run.prepare_run`, so a refused
config or a finished run is reported there, before any rank starts), and trains its rank
with `cadence.trainer.run.train`. This module imports neither: `cadence.trainer.run` calls
it.

This process stays as the group's keeper: SIGTERM, SIGUSR1 and Ctrl-C are passed on to
the ranks (each checkpoints the group at the same iteration and exits 0, as one process
does); a rank that fails makes the others stop (they see their peer gone in their next
collective; any still running after a grace period are killed), and the failure is
reported with the rank's exit status.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
GRACE_S = 60.0
"""Seconds the other ranks have to stop on their own once one has failed."""


class RankFailedError(RuntimeError):
    """A rank of the group exited with an error; the message names it and its status."""


def launch_ranks(config: Any) -> str | None:
    """Trains ``config`` (whose ``trainer.num_ranks`` > 1) with that many local ranks.

    The run directory must be prepared (`cadence.trainer.run.prepare_run` returned True):
    the ranks read its ``config.yaml``.

    Returns:
        How training ended (as `cadence.trainer.run.train` returns it), or None when
        rank 0 reported nothing.

    Raises:
        RankFailedError: a rank exited with an error (its output says which).
    """
    num_ranks = config.trainer.num_ranks
    with (
        tempfile.TemporaryDirectory(prefix="cadence-launch-") as scratch,
        GroupStore(num_ranks, config.trainer.collective_timeout_s) as store,
    ):
        outcome_file = Path(scratch) / "outcome"
        command = [
            sys.executable,
            "-m",
            "cadence.cli.rank",
            config.root_dir,
            str(outcome_file),
        ]
        ranks = [
            subprocess.Popen(
                command,
                env=store.rank_environment(rank),
                # Their own process group: a Ctrl-C in the terminal reaches them once, from here.
                process_group=0,
            )
            for rank in range(num_ranks)
        ]
        codes, first = _wait(ranks)
        if first is not None:
            others = [rank for rank, code in enumerate(codes) if code != 0 and rank != first]
            raise RankFailedError(
                f"rank {first} {_describe(codes[first])} (see its output above)"
                + (f", then rank(s) {', '.join(map(str, others))} stopped" if others else "")
                + ". The same command resumes from the last checkpoint."
            )
        return outcome_file.read_text().strip() if outcome_file.exists() else None


class GroupStore:
    """The rendezvous store of a group of local ranks, kept by the process that starts
    them (as ``torchrun``'s agent keeps it), with the environment each rank needs.

    Args:
        num_ranks: the ranks of the group.
        timeout_s: how long a rank waits for the others to join.
    """

    def __init__(self, num_ranks: int, timeout_s: float = 600.0) -> None:
        self.num_ranks = num_ranks
        self.timeout_s = timeout_s
        self._store: Any = None

    def __enter__(self) -> GroupStore:
        import datetime

        from torch.distributed import TCPStore

        self._store = TCPStore(
            "127.0.0.1",
            0,  # a free port, chosen by the store
            self.num_ranks,
            is_master=True,
            timeout=datetime.timedelta(seconds=self.timeout_s),
            wait_for_workers=False,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._store = None

    def rank_environment(self, rank: int) -> dict[str, str]:
        """``os.environ`` plus what rank ``rank`` needs to join the group."""
        return {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self._store.port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(self.num_ranks),
            "LOCAL_WORLD_SIZE": str(self.num_ranks),
        }


def _wait(ranks: list[subprocess.Popen]) -> tuple[list[int], int | None]:
    """Waits for every rank, passing signals on; kills the rest ``GRACE_S`` after a failure.

    Returns:
        each rank's exit status, and the rank that failed first (None if none failed).
    """

    def forward(signum: int, frame: FrameType | None) -> None:
        for process in ranks:
            if process.poll() is None:
                process.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    failed_at, first = None, None
    try:
        while any(process.poll() is None for process in ranks):
            failed = [rank for rank, process in enumerate(ranks) if process.poll() not in (None, 0)]
            if failed_at is None and failed:
                failed_at, first = time.monotonic(), failed[0]
            if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
                for process in ranks:
                    if process.poll() is None:
                        process.kill()
            time.sleep(0.05)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    codes = [int(process.returncode) for process in ranks]
    if first is None:
        first = next((rank for rank, code in enumerate(codes) if code != 0), None)
    return codes, first


def _describe(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
