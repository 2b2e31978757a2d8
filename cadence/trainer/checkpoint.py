"""Checkpoints: one complete, verified directory per iteration, published by rename (DESIGN §8).

    checkpoints/<iteration>/state.pt        an explicit dict of state dicts
    checkpoints/<iteration>/data/...        bulk files (a replay buffer's chunks), if any
    checkpoints/<iteration>/MANIFEST.json   each file's size and SHA-256, and its own digest
    checkpoints/LATEST                      "<iteration> <SHA-256 of that MANIFEST.json>"

Publishing: the files are written and fsynced in a hidden staging directory, which
is renamed into place; then ``LATEST`` is replaced atomically; only then is anything
removed (an older copy of the same iteration, checkpoints past ``keep``). A run
killed at any moment leaves every published checkpoint whole and ``LATEST`` naming
one of them.

Loading verifies before it unpickles: the manifest against ``LATEST``'s digest (and
its own), every file's size and checksum. A checkpoint that fails (a truncated file, a
flipped byte, a missing file, a ``LATEST`` naming something gone or outside the
directory) is reported with the file's name, and loading falls back to the newest
older checkpoint that verifies, with a warning naming the one used (and the one
``LATEST`` names, where that directory was deleted). Unpickling uses ``weights_only=True``: it never runs code.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Callable, Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from cadence.data.durable import (
    fsync_directory,
    fsync_file,
    replace_durably,
    sha256_of_bytes,
    sha256_of_file,
    write_atomic,
    write_durable,
)
from cadence.trainer.errors import CheckpointError, CorruptCheckpointError

logger = logging.getLogger(__name__)

STATE_FILE = "state.pt"
"""The file of a checkpoint holding its state dicts (what acting needs is all in it)."""
MANIFEST_FILE = "MANIFEST.json"
_LATEST_FILE = "LATEST"


class CheckpointManager:
    """Saves, finds, verifies and loads the checkpoints of one run.

    Args:
        directory: ``<root_dir>/checkpoints``.
        keep: how many of the most recent checkpoints to keep.
    """

    def __init__(self, directory: Path, keep: int = 3):
        self.directory = Path(directory)
        self.keep = keep

    # ------------------------------------------------------------------ saving
    def save(
        self,
        iteration: int,
        state: dict[str, Any],
        write_files: Callable[[Path], Mapping[str, str]] | None = None,
        eval_return: float | None = None,
    ) -> Path:
        """Writes ``state`` as checkpoint ``iteration`` and publishes it.

        Args:
            iteration: the checkpoint's name.
            state: what goes into ``state.pt``.
            write_files: writes bulk files (fsynced) into the staged checkpoint directory
                it is given, and returns ``{path relative to it: sha256}`` of those it
                knows the digest of (the others are hashed here).
            eval_return: the evaluation return of exactly this iteration, if it was
                evaluated: recorded in the manifest, it makes the checkpoint a candidate
                for ``best`` (`load_verified`), which pruning keeps.

        Raises:
            OSError: the checkpoint could not be written (e.g. a full disk); the
                checkpoints published before are untouched.
        """
        staging = self.staging_path(iteration)
        self.prepare_staging(staging)
        try:
            known = self.write_part(staging, state, write_files)
        except BaseException:
            self.discard_staging(staging)
            raise
        return self.publish(iteration, staging, known, eval_return)

    # The stages of `save`, which `cadence.trainer.distributed` runs with every rank
    # writing its part into rank 0's staging directory.
    def staging_path(self, iteration: int) -> Path:
        """The hidden directory checkpoint ``iteration`` is written in before publishing."""
        return self.directory / f".{iteration:08d}.tmp"

    def prepare_staging(self, staging: Path) -> None:
        """Makes ``staging`` a new, empty directory (what a killed save left is removed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()

    def write_part(
        self,
        part: Path,
        state: dict[str, Any],
        write_files: Callable[[Path], Mapping[str, str]] | None = None,
    ) -> dict[str, str]:
        """Writes ``write_files``' bulk files, then ``state`` as ``state.pt``, fsynced,
        into ``part``; returns the digests ``write_files`` knows (relative to ``part``)."""
        part.mkdir(parents=True, exist_ok=True)
        known = dict(write_files(part)) if write_files is not None else {}
        torch.save(state, part / STATE_FILE)
        fsync_file(part / STATE_FILE)
        return known

    def discard_staging(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def publish(
        self,
        iteration: int,
        staging: Path,
        known: Mapping[str, str] | None = None,
        eval_return: float | None = None,
    ) -> Path:
        """Writes the manifest of everything in ``staging``, renames it into place as
        checkpoint ``iteration``, moves ``LATEST`` to it, then prunes."""
        final = self.directory / f"{iteration:08d}"
        try:
            digest = _write_manifest(staging, known, eval_return)
        except BaseException:
            self.discard_staging(staging)
            raise
        # A directory of this iteration may exist (a run killed after publishing it but
        # before LATEST named it): moved aside, and removed only once LATEST has moved.
        replaced = self.directory / f".{final.name}.old"
        shutil.rmtree(replaced, ignore_errors=True)
        if final.exists():
            os.replace(final, replaced)
        replace_durably(staging, final)
        self._write_latest(final.name, digest)
        shutil.rmtree(replaced, ignore_errors=True)
        self._prune(keep=final)
        logger.info("checkpoint %s written", final)
        return final

    # ----------------------------------------------------------------- finding
    def latest(self) -> Path | None:
        """The checkpoint ``LATEST`` names, if that directory exists (not verified)."""
        name, _ = self._read_latest()
        path = self._checkpoint_path(name) if name is not None else None
        return path if path is not None and path.is_dir() else None

    def has_checkpoints(self) -> bool:
        """Whether any checkpoint directory exists, verified or not."""
        return bool(self._candidates())

    # ----------------------------------------------------------------- loading
    def verify(
        self,
        path: Path,
        manifest_digest: str | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, str]:
        """Checks checkpoint ``path`` against its manifest (and ``manifest_digest``).

        Args:
            path: the checkpoint directory.
            manifest_digest: what ``LATEST`` says the manifest's digest is, if it names ``path``.
            only: check only these files (and the manifest), e.g. `STATE_FILE` for a
                caller that reads nothing else; None checks every file.

        Returns:
            ``{file path relative to ``path``: sha256}`` of every file the manifest lists.

        Raises:
            CorruptCheckpointError: naming the file that is missing, truncated or changed.
        """
        manifest_path = path / MANIFEST_FILE
        if not manifest_path.is_file():
            raise CorruptCheckpointError(f"{manifest_path} is missing")
        raw = manifest_path.read_bytes()
        if manifest_digest is not None and sha256_of_bytes(raw) != manifest_digest:
            raise CorruptCheckpointError(f"{manifest_path} does not match the digest in LATEST")
        try:
            manifest = json.loads(raw)
            files = manifest["files"]
            own = manifest["digest"]
            digests = {name: entry["sha256"] for name, entry in files.items()}
        except (ValueError, KeyError, TypeError):
            raise CorruptCheckpointError(f"{manifest_path} is not a valid manifest") from None
        if _files_digest(files) != own:
            raise CorruptCheckpointError(f"{manifest_path} was changed (its digest does not match)")
        if STATE_FILE not in files or any(not _is_inside(name) for name in files):
            raise CorruptCheckpointError(f"{manifest_path} is not a valid manifest")
        for name, expected in files.items():
            if only is not None and name not in only:
                continue
            file = path / name
            if not file.is_file():
                raise CorruptCheckpointError(f"{file} is missing")
            size = file.stat().st_size
            if size != expected["size"]:
                raise CorruptCheckpointError(
                    f"{file} has {size} bytes, the manifest says {expected['size']} (truncated?)"
                )
            if sha256_of_file(file) != expected["sha256"]:
                raise CorruptCheckpointError(f"{file} does not match its checksum (corrupted)")
        return digests

    def load_verified(
        self,
        map_location: Any = "cpu",
        only: Collection[str] | None = None,
        which: str = "latest",
    ) -> tuple[Path, dict[str, Any]]:
        """The newest (or best, or a given) checkpoint that verifies, and its state.

        Args:
            map_location: where the tensors go.
            only: limits the files checked (see `verify`): a caller that needs nothing
                but ``state.pt`` (eval, play) does not read the replay buffer.
            which: ``"latest"``: ``LATEST``'s checkpoint first, then the others from the
                newest; ``"best"``: the evaluated checkpoints from the highest evaluation
                return (the newest of equals first); an iteration number: that checkpoint
                alone. Each one that fails is logged (naming the file) and skipped.

        Raises:
            FileNotFoundError: the run has no checkpoint (of that iteration; or, for
                ``"best"``, none saved at an evaluated iteration).
            CheckpointError: none verifies (every file is left where it is).
            ValueError: ``which`` is none of the above.
        """
        candidates = self._select(which)
        if not candidates:
            raise FileNotFoundError(
                f"no checkpoint in {self.directory}"
                + ("" if which == "latest" else f" for --checkpoint {which}")
                + (
                    " (only checkpoints saved at an evaluated iteration have a return to "
                    "compare: make trainer.checkpoint_interval a multiple of eval_interval)"
                    if which == "best"
                    else ""
                )
            )
        gone = self._latest_gone() if which == "latest" else None
        failures = [gone] if gone is not None else []
        for path, digest in candidates:
            try:
                state = self.load(path, map_location, manifest_digest=digest, only=only)
            except CorruptCheckpointError as error:
                failures.append(str(error))
                logger.warning("skipping checkpoint %s: %s", path.name, error)
                continue
            if gone is not None:
                logger.warning(
                    "%s; falling back to checkpoint %s, the newest that verifies", gone, path
                )
            elif failures:
                logger.warning("falling back to checkpoint %s, the newest that verifies", path)
            return path, state
        raise CheckpointError(
            f"no checkpoint in {self.directory} verifies; every file was left where it is:\n  "
            + "\n  ".join(failures)
        )

    def load(
        self,
        path: Path | None = None,
        map_location: Any = "cpu",
        manifest_digest: str | None = None,
        only: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """Loads checkpoint ``path``'s state after verifying it (see `verify`), without
        running any code.

        Without ``path``: the newest checkpoint that verifies (`load_verified`).

        Raises:
            FileNotFoundError: no checkpoint.
            CorruptCheckpointError: ``path`` does not verify.
        """
        if path is None:
            return self.load_verified(map_location, only)[1]
        self.verify(path, manifest_digest, only)
        try:
            return torch.load(path / STATE_FILE, map_location=map_location, weights_only=True)
        except (RuntimeError, EOFError, ValueError) as error:  # verified, yet unreadable
            raise CorruptCheckpointError(f"{path / STATE_FILE} cannot be read ({error})") from None

    def manifest_files(self, path: Path) -> dict[str, str]:
        """``{file path relative to path: sha256}`` from checkpoint ``path``'s manifest
        (not verified: call after `verify` or `load_verified`)."""
        files = json.loads((path / MANIFEST_FILE).read_bytes())["files"]
        return {name: entry["sha256"] for name, entry in files.items()}

    def iterations(self) -> list[int]:
        """The iterations of the published checkpoints, oldest first (not verified)."""
        return [int(path.name) for path in self._checkpoint_dirs()]

    def eval_returns(self) -> dict[Path, float]:
        """The recorded evaluation return of each checkpoint saved at an evaluated
        iteration (from its manifest, not verified)."""
        returns = {}
        for path in self._checkpoint_dirs():
            try:
                value = json.loads((path / MANIFEST_FILE).read_bytes()).get("eval_return")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                returns[path] = float(value)
        return returns

    # --------------------------------------------------------------- internals
    def _select(self, which: str) -> list[tuple[Path, str | None]]:
        """The candidates of `load_verified`'s ``which``, in the order to try them."""
        candidates = self._candidates()
        if which == "latest":
            return candidates
        if which == "best":
            returns = self.eval_returns()
            ranked = sorted(returns, key=lambda p: (returns[p], p.name), reverse=True)
            digests = dict(candidates)
            return [(path, digests.get(path)) for path in ranked]
        if which.isdigit():
            wanted = self.directory / f"{int(which):08d}"
            return [(path, digest) for path, digest in candidates if path == wanted]
        raise ValueError(f"--checkpoint must be 'latest', 'best' or an iteration, got {which!r}")

    def _checkpoint_dirs(self) -> list[Path]:
        """The published checkpoint directories, oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.is_dir() and p.name.isdigit())

    def _candidates(self) -> list[tuple[Path, str | None]]:
        """``(path, expected manifest digest)``: LATEST's checkpoint, then the rest newest first."""
        if not self.directory.is_dir():
            return []
        name, digest = self._read_latest()
        named = self._checkpoint_path(name) if name is not None else None
        others = self._checkpoint_dirs()[::-1]
        candidates = [(named, digest)] if named is not None and named.is_dir() else []
        return candidates + [(p, None) for p in others if p != named]

    def _latest_gone(self) -> str | None:
        """What is wrong with ``LATEST`` when it names no checkpoint directory (one deleted,
        or a name that is not a checkpoint's), for the warning of a fallback; else None."""
        name, _ = self._read_latest()
        if name is None:
            return None
        latest = self.directory / _LATEST_FILE
        path = self._checkpoint_path(name)
        if path is None:
            return f"{latest} names {name!r}, which is not a checkpoint's name"
        if not path.is_dir():
            return f"{latest} names checkpoint {path}, which is missing (deleted?)"
        return None

    def _checkpoint_path(self, name: str) -> Path | None:
        """``checkpoints/<name>`` if ``name`` is a checkpoint's name (never a path outside)."""
        return self.directory / name if name.isdigit() else None

    def _read_latest(self) -> tuple[str | None, str | None]:
        try:
            parts = (self.directory / _LATEST_FILE).read_text().split()
        except (FileNotFoundError, UnicodeDecodeError):
            return None, None
        if not parts:
            return None, None
        return parts[0], parts[1] if len(parts) > 1 else None

    def _write_latest(self, name: str, manifest_digest: str) -> None:
        write_atomic(self.directory / _LATEST_FILE, f"{name} {manifest_digest}\n".encode())

    def _prune(self, keep: Path) -> None:
        """Removes all but the ``keep`` newest checkpoints, ``keep`` itself and the best
        evaluated one (the highest recorded evaluation return)."""
        returns = self.eval_returns()
        best = max(returns, key=lambda p: (returns[p], p.name)) if returns else None
        for old in self._checkpoint_dirs()[: -self.keep]:
            if old not in (keep, best):
                shutil.rmtree(old, ignore_errors=True)


def latest_iteration(directory: Path) -> int:
    """The iteration ``directory/LATEST`` names (0 when there is none yet)."""
    name, _ = CheckpointManager(directory)._read_latest()
    return int(name) if name is not None and name.isdigit() else 0


def _write_manifest(
    directory: Path, known: Mapping[str, str] | None = None, eval_return: float | None = None
) -> str:
    """Writes ``MANIFEST.json`` for the files under ``directory`` (``known``: digests of
    some of them, by relative path; ``eval_return``: recorded beside them) and fsyncs
    every directory; returns its SHA-256."""
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_dir():
            fsync_directory(path)
            continue
        name = path.relative_to(directory).as_posix()
        if name == MANIFEST_FILE:
            continue
        digest = (known or {}).get(name) or sha256_of_file(path)
        files[name] = {"size": path.stat().st_size, "sha256": digest}
    manifest: dict[str, Any] = {"files": files, "digest": _files_digest(files)}
    if eval_return is not None and math.isfinite(eval_return):
        manifest["eval_return"] = eval_return
    raw = json.dumps(manifest, indent=1).encode()
    write_durable(directory / MANIFEST_FILE, raw)
    fsync_directory(directory)
    return sha256_of_bytes(raw)


def _is_inside(name: str) -> bool:
    """Whether a manifest's file name stays inside its checkpoint directory."""
    parts = PurePosixPath(name).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and ".." not in parts


def _files_digest(files: dict[str, Any]) -> str:
    return sha256_of_bytes(json.dumps(files, sort_keys=True).encode())
