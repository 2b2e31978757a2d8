"""Checkpoints: one complete directory per iteration, published by rename (DESIGN §8).

    checkpoints/<iteration>/state.pt   an explicit dict of state dicts
    checkpoints/LATEST                 the name of the newest complete checkpoint

A checkpoint is written to a temporary directory, then renamed into place, then
``LATEST`` is replaced atomically, so a run killed at any moment leaves either
the old or the new checkpoint, never half of one. Loading uses
``weights_only=True``: it never runs code.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

_STATE_FILE = "state.pt"


class CheckpointManager:
    """Saves, finds and loads the checkpoints of one run.

    Args:
        directory: ``<root_dir>/checkpoints``.
        keep: how many of the most recent checkpoints to keep.
    """

    def __init__(self, directory: Path, keep: int = 3):
        self.directory = Path(directory)
        self.keep = keep

    def save(self, iteration: int, state: dict[str, Any]) -> Path:
        """Writes ``state`` as checkpoint ``iteration`` and publishes it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{iteration:08d}"
        staging = self.directory / f".{final.name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        torch.save(state, staging / _STATE_FILE)
        _fsync_file(staging / _STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        self._write_latest(final.name)
        self._prune()
        logger.info("checkpoint %s written", final)
        return final

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        latest_file = self.directory / "LATEST"
        if not latest_file.exists():
            return None
        path = self.directory / latest_file.read_text().strip()
        return path if (path / _STATE_FILE).exists() else None

    def load(self, path: Path | None = None, map_location: Any = "cpu") -> dict[str, Any]:
        """Loads checkpoint ``path`` (default: the latest) without running any code."""
        path = path or self.latest()
        if path is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        return torch.load(path / _STATE_FILE, map_location=map_location, weights_only=True)

    def _write_latest(self, name: str) -> None:
        temporary = self.directory / ".LATEST.tmp"
        temporary.write_text(name)
        _fsync_file(temporary)
        os.replace(temporary, self.directory / "LATEST")

    def _prune(self) -> None:
        complete = sorted(p for p in self.directory.iterdir() if p.is_dir() and p.name.isdigit())
        for old in complete[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
