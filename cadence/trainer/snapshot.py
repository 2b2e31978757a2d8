"""The code snapshot: the ``cadence`` package as it was when a run started, written and run.

A new run writes ``snapshot.tar.gz`` (`write_snapshot`); ``cadence play --use-snapshot``
runs the code of that archive instead of the installed package (`use_snapshot`).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "snapshot.tar.gz"


class SnapshotError(ValueError):
    """A run has no code snapshot, or its archive is not a cadence package."""


def write_snapshot(path: Path) -> None:
    """Writes ``cadence/`` (sources only) to the tar.gz ``path``."""
    package_dir = Path(__file__).parent.parent  # cadence/ (this is cadence/trainer/snapshot.py)
    temporary = path.with_suffix(".tmp")
    with tarfile.open(temporary, "w:gz") as tar:
        tar.add(package_dir, arcname="cadence", filter=_sources_only)
    temporary.replace(path)


def _sources_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if "__pycache__" in info.name or info.name.endswith((".pyc", ".pyo")):
        return None
    return info


def use_snapshot(run_dir: Path) -> Path:
    """Makes ``import cadence`` load the package saved in ``run_dir/snapshot.tar.gz``.

    The archive is extracted once into ``run_dir/.snapshot-<digest>/`` (or a
    temporary directory when the run directory is read-only), put first on
    ``sys.path``, and every ``cadence`` module imported so far is dropped from
    ``sys.modules`` so that the next import of one finds the snapshot's.

    Returns:
        The directory holding the snapshot's ``cadence`` package.

    Raises:
        SnapshotError: the run has no snapshot, or the archive is not a cadence package.
    """
    archive = Path(run_dir) / SNAPSHOT_FILE
    if not archive.is_file():
        raise SnapshotError(f"{run_dir} has no {SNAPSHOT_FILE} to run")
    root = _extracted_snapshot(archive)
    sys.path.insert(0, str(root))
    for name in [name for name in sys.modules if name == "cadence" or name.startswith("cadence.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    return root


def _extracted_snapshot(archive: Path) -> Path:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    cached = archive.parent / f".snapshot-{digest}"
    if (cached / "cadence").is_dir():
        if _matches_archive(archive, cached):
            return cached
        # Someone changed the extracted code: never import it; extract afresh.
        logger.warning(
            "cadence: %s no longer matches %s; extracting it again", cached, archive.name
        )
        shutil.rmtree(cached, ignore_errors=True)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".snapshot-tmp-", dir=archive.parent))
    except OSError:  # a read-only run directory: a temporary copy, for this process only
        staging = Path(tempfile.mkdtemp(prefix="cadence-snapshot-"))
        _extract(archive, staging)
        return staging
    _extract(archive, staging)
    try:
        staging.rename(cached)  # atomic: a concurrent `play` sees all of it or none
    except OSError:  # another process won the race; its copy is the same archive
        return cached if (cached / "cadence").is_dir() else staging
    return cached


def _matches_archive(archive: Path, root: Path) -> bool:
    """Whether the files under ``root`` are exactly the archive's regular files."""
    with tarfile.open(archive, "r:gz") as tar:
        expected = {
            member.name: tar.extractfile(member).read() for member in tar if member.isfile()
        }
    found = {
        str(path.relative_to(root)): path
        for path in (root / "cadence").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    if set(found) != set(expected):
        return False
    return all(path.read_bytes() == expected[name] for name, path in found.items())


def _extract(archive: Path, target: Path) -> None:
    """Extracts the ``cadence/`` tree of ``archive``, refusing links and paths outside it."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            parts = Path(member.name).parts
            if (
                not (member.isfile() or member.isdir())
                or ".." in parts
                or parts[:1] != ("cadence",)
            ):
                raise SnapshotError(
                    f"{archive} is not a cadence snapshot: unexpected entry {member.name!r}"
                )
        tar.extractall(target, members=members, filter="data")
    if not (target / "cadence" / "__init__.py").is_file():
        raise SnapshotError(f"{archive} is not a cadence snapshot: cadence/__init__.py is missing")
