"""Durable writes: files that a crash leaves whole or untouched, and their SHA-256 digests.

Checkpoints (`cadence.trainer.checkpoint`) and the replay buffer's chunk files
(`cadence.replay.persistence`, `cadence.replay.chunk_writer`) both write files that
must survive a kill or a power cut and that are checked on the way back in. This is
the one place that knows how: write and ``fsync`` a file, replace a file or directory
atomically and make the rename itself durable (``fsync`` of the directory holding
it), and hash what was written.

It lives in `cadence.data`, the ground of the layer order (DESIGN §1), because
`cadence.replay` sits below `cadence.trainer` and both import it; it needs nothing
but the standard library, so the ground gains no dependency.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "LATEST"
...     write_atomic(path, b"00000004 abc\\n")
...     path.read_bytes(), sha256_of_file(path) == sha256_of_bytes(b"00000004 abc\\n")
(b'00000004 abc\\n', True)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_BLOCK = 1 << 20
"""Bytes hashed at a time by `sha256_of_file` (a large file is never read whole)."""


def sha256_of_bytes(data: bytes) -> str:
    """The hex SHA-256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_of_file(path: str | os.PathLike) -> str:
    """The hex SHA-256 digest of the file ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_durable(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` (created or truncated) and fsyncs it.

    Not atomic: a crash may leave a partial ``path``. Write to a temporary name and
    `replace_durably` it, or use `write_atomic`, where readers may see ``path``.
    """
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def fsync_file(path: str | os.PathLike) -> None:
    """Fsyncs a file that something else wrote (e.g. ``torch.save`` to a path)."""
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def fsync_directory(path: str | os.PathLike) -> None:
    """Makes renames and new entries in the directory ``path`` durable.

    A no-op where the platform cannot open or sync a directory (a rename is then as
    durable as that file system makes it).
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def replace_durably(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Renames ``source`` (a file or a directory) over ``target`` atomically, then fsyncs
    the directory holding ``target`` so that the rename survives a crash."""
    os.replace(source, target)
    fsync_directory(Path(target).parent)


def write_atomic(
    path: str | os.PathLike,
    data: bytes,
    temporary: str | os.PathLike | None = None,
    sync_directory: bool = True,
) -> None:
    """Replaces ``path``'s content with ``data`` so that a reader (or a crash) sees the old
    file or the new one, never a mix.

    Args:
        path: the file to write.
        data: its new content.
        temporary: where ``data`` is written and fsynced first (same directory as
            ``path``); None: ``.<name>.tmp`` beside it.
        sync_directory: fsync the directory after the rename. False only where nothing
            relies on the new name surviving a crash on its own (a cache whose files a
            checkpoint links and syncs itself).
    """
    path = Path(path)
    temporary = Path(temporary) if temporary is not None else path.with_name(f".{path.name}.tmp")
    write_durable(temporary, data)
    if sync_directory:
        replace_durably(temporary, path)
    else:
        os.replace(temporary, path)
