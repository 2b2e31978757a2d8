"""The code snapshot: the ``cadence`` package as it was when a run started."""

from __future__ import annotations

import tarfile
from pathlib import Path


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
