"""`ChunkWriter`: a background thread that keeps completed ring chunks on disk.

Writing a large replay buffer at checkpoint time stalls training for as long as
the disk takes. Instead, whenever the write head of a ring leaves a chunk (see
`cadence.replay.persistence`), the chunk is copied on the training thread (one
vectorized gather) and written, with its checksum, by a writer thread. A
checkpoint then waits for the writer, hard-links the files still current and
writes only the chunks the heads are in the middle of: its time and extra memory
no longer grow with the buffer.

Without a given ``chunk_length`` the writer picks one when the rows are known: the
largest divisor of the capacity whose chunk stays under `TARGET_CHUNK_BYTES`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path

import torch

from cadence.data.durable import sha256_of_bytes, sha256_of_file, write_atomic
from cadence.replay.buffer import ReplayBuffer
from cadence.replay.persistence import (
    CHUNK_PATTERN,
    FlushedChunk,
    check_chunk_length,
    chunk_name,
    encode,
    read_snapshot,
    stored_chunks,
    write_snapshot,
)
from cadence.replay.storage import RingStorage

logger = logging.getLogger(__name__)

TARGET_CHUNK_BYTES = 4 << 20
"""The size an automatically chosen chunk stays under (one file per chunk)."""


class ChunkWriteError(OSError):
    """The writer thread could not write a chunk (e.g. a full disk); raised on the
    training thread by the next add, `wait` or `close`."""


_Job = tuple[list[tuple[int, int, int]], dict[str, torch.Tensor]]
"""``([(env, slot, start_time), ...], {key: [num_chunks, chunk_length, *shape]})``."""


class ChunkWriter:
    """Flushes completed chunks of a buffer's rings to ``directory`` in a background thread.

    Give it to a `ReplayBuffer` as its ``observer``; close it when done (or use
    it as a context manager).

    Args:
        directory: where the live chunk files go (created if missing). It is the writer's
            own: chunk files an earlier process left there are removed.
        chunk_length: positions per chunk; must divide the buffer's capacity (None: chosen
            from the row size when the first rows arrive, see `auto_chunk_length`).
        max_pending: chunk batches that may wait for the writer before an add blocks.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, ChunkWriter(f"{tmp}/live", 2) as writer:
    ...     buffer = ReplayBuffer(num_envs=1, capacity=4, observer=writer)
    ...     buffer.add_sequence({"x": torch.arange(3.0).view(3, 1)})
    ...     snapshot = Path(tmp, "snapshot")
    ...     snapshot.mkdir()
    ...     sorted(writer.write_snapshot(buffer, snapshot))
    ['env00000-chunk00000.pt', 'env00000-chunk00001.pt', 'meta.pt']
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        chunk_length: int | None = None,
        max_pending: int = 64,
    ):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.iterdir():
            if CHUNK_PATTERN.fullmatch(stale.name) or stale.name.endswith(".tmp"):
                stale.unlink()
        self.chunk_length = chunk_length
        self._flushed: dict[tuple[int, int], FlushedChunk] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="replay-chunk-writer", daemon=True)
        self._thread.start()

    def on_add(self, storage: RingStorage, env_ids: torch.Tensor, num_steps: int) -> None:
        """Queues the chunks that the last add completed (copied now, written later)."""
        self._raise_writer_error()
        chunk_length = self._chunk_length(storage)
        envs, starts = _completed_chunks(storage, env_ids, num_steps, chunk_length)
        if len(envs) == 0:
            return
        steps = torch.arange(chunk_length, device=storage.device)
        positions = (starts.unsqueeze(1) + steps) % storage.capacity
        data = {key: ring[envs.unsqueeze(1), positions] for key, ring in storage.fields.items()}
        slots = (starts % storage.capacity) // chunk_length
        chunks = list(zip(envs.tolist(), slots.tolist(), starts.tolist(), strict=True))
        self._queue.put((chunks, {key: value.cpu() for key, value in data.items()}))

    def on_reset(self, storage: RingStorage) -> None:
        """Forgets the files written so far: the rings were replaced wholesale."""
        self.wait()
        with self._lock:
            stale, self._flushed = self._flushed, {}
        for chunk in stale.values():
            chunk.path.unlink(missing_ok=True)

    def on_overwrite(
        self, storage: RingStorage, env_ids: torch.Tensor, times: torch.Tensor
    ) -> None:
        """Forgets the files of the chunks holding those steps: the next snapshot writes them."""
        self.wait()
        chunk_length = self._chunk_length(storage)
        starts = (times // chunk_length * chunk_length).tolist()
        with self._lock:
            for env, start in zip(env_ids.tolist(), starts, strict=True):
                slot = (start % storage.capacity) // chunk_length
                known = self._flushed.get((env, slot))
                if known is not None and known.start_time == start:
                    del self._flushed[(env, slot)]

    def wait(self) -> None:
        """Blocks until every queued chunk is on disk.

        Raises:
            ChunkWriteError: the writer thread could not write (e.g. a full disk).
            RuntimeError: the writer thread failed otherwise (its error is the cause).
        """
        self._queue.join()
        self._raise_writer_error()

    def write_snapshot(self, buffer: ReplayBuffer, directory: Path) -> dict[str, str]:
        """Waits for the writer, then writes the buffer into ``directory`` (see
        `cadence.replay.persistence.write_snapshot`): chunks on disk are hard-linked.

        Returns:
            ``{file name: sha256}`` of the snapshot's files.
        """
        self.wait()
        return write_snapshot(
            buffer, directory, self._chunk_length(buffer.storage), self._flushed_now()
        )

    def read_snapshot(
        self, buffer: ReplayBuffer, snapshot: Path, files: dict[str, str] | None = None
    ) -> None:
        """Loads ``snapshot`` into ``buffer`` (see `cadence.replay.persistence.read_snapshot`)
        and adopts its complete chunks as this writer's files (hard links), so that the next
        snapshot writes only what is new since.
        """
        read_snapshot(buffer, snapshot, files)  # the buffer's reset makes us forget our files
        storage = buffer.storage
        chunk_length = self._chunk_length(storage)
        for env, slot, start_time in stored_chunks(
            storage.num_added, storage.capacity, chunk_length
        ):
            if start_time < 0:
                continue  # the chunk a head is in: rewritten when it completes
            name = chunk_name(env, slot)
            source, target = snapshot / name, self.directory / name
            staging = target.with_suffix(".tmp")
            staging.unlink(missing_ok=True)
            try:
                os.link(source, staging)
            except OSError:
                continue  # no hard links here: the next snapshot writes it again
            os.replace(staging, target)
            digest = files[name] if files is not None else sha256_of_file(target)
            with self._lock:
                self._flushed[(env, slot)] = FlushedChunk(start_time, target, digest)

    def close(self) -> None:
        """Writes what is queued and stops the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_writer_error()

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _flushed_now(self) -> dict[tuple[int, int], FlushedChunk]:
        with self._lock:
            return dict(self._flushed)

    def _chunk_length(self, storage: RingStorage) -> int:
        if self.chunk_length is None:
            self.chunk_length = auto_chunk_length(storage)
        check_chunk_length(storage.capacity, self.chunk_length)
        return self.chunk_length

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                if self._error is None:
                    self._write(*job)
            except BaseException as error:  # reported to the training thread by wait/on_add
                logger.exception("replay chunk writer failed")
                self._error = error
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _write(self, chunks: list[tuple[int, int, int]], data: dict[str, torch.Tensor]) -> None:
        for row, (env, slot, start_time) in enumerate(chunks):
            blob = encode({key: value[row].clone() for key, value in data.items()})
            path = self.directory / chunk_name(env, slot)
            # A new inode per flush: snapshots that hard-linked the old file keep it intact.
            # The live directory is not synced: a checkpoint links its files into a staging
            # directory that the checkpoint syncs itself.
            write_atomic(path, blob, temporary=path.with_suffix(".tmp"), sync_directory=False)
            with self._lock:
                self._flushed[(env, slot)] = FlushedChunk(start_time, path, sha256_of_bytes(blob))

    def _raise_writer_error(self) -> None:
        error = self._error
        if isinstance(error, OSError):  # a full disk: the caller can say what to do
            raise ChunkWriteError(
                error.errno, f"the replay chunk writer failed: {error.strerror}", error.filename
            ) from error
        if error is not None:
            raise RuntimeError("the replay chunk writer failed") from error


def auto_chunk_length(storage: RingStorage) -> int:
    """The largest divisor of the capacity whose chunk (all fields) fits `TARGET_CHUNK_BYTES`.

    A capacity with only large prime factors may leave no divisor near the target; then
    a whole ring is one chunk (a checkpoint rewrites it every time) and a warning says so.
    """
    row_bytes = sum(ring[0, 0].numel() * ring.element_size() for ring in storage.fields.values())
    most = max(1, TARGET_CHUNK_BYTES // max(row_bytes, 1))
    capacity = storage.capacity
    if capacity <= most:
        return capacity
    best = max(d for d in _divisors(capacity) if d <= most)
    if best * 64 < most:
        logger.warning(
            "replay_buffer_length %d has no divisor near %d steps (%d bytes per step): each "
            "checkpoint rewrites the whole buffer; a length with small prime factors (e.g. a "
            "multiple of 1024) lets checkpoints write only what is new",
            capacity,
            most,
            row_bytes,
        )
        return capacity
    return best


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return small + [n // d for d in small]


def _completed_chunks(
    storage: RingStorage, env_ids: torch.Tensor, num_steps: int, chunk_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([M] env, [M] start time)`` of the chunks the last add completed and that are still stored."""
    added = storage.num_added[env_ids]
    done_before = (added - num_steps) // chunk_length
    # A chunk overwritten within the same add is not worth writing.
    oldest_kept = -(-(added - storage.capacity).clamp(min=0) // chunk_length)
    first = torch.maximum(done_before, oldest_kept)
    count = (added // chunk_length - first).clamp(min=0)
    longest = int(count.max()) if len(count) else 0
    if longest == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=storage.device)
        return empty, empty
    offsets = torch.arange(longest, device=storage.device)
    mask = offsets < count.unsqueeze(1)
    starts = (first.unsqueeze(1) + offsets) * chunk_length
    return env_ids.unsqueeze(1).expand_as(starts)[mask], starts[mask]
