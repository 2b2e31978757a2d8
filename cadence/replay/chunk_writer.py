"""`ChunkWriter`: a background thread that keeps completed ring chunks on disk.

Writing a large replay buffer at checkpoint time stalls training for as long as
the disk takes. Instead, whenever the write head of a ring leaves a chunk (see
`cadence.replay.persistence`), the chunk is copied on the training thread (one
vectorized gather) and written, with its checksum, by a writer thread. A
checkpoint then waits for the writer, hard-links the files still current and
writes only the chunks the heads are in the middle of.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path

import torch

from cadence.replay.buffer import ReplayBuffer
from cadence.replay.persistence import (
    FlushedChunk,
    check_chunk_length,
    chunk_name,
    encode,
    save_checkpoint,
    sha256,
    write_durable,
)
from cadence.replay.storage import RingStorage

logger = logging.getLogger(__name__)

_Job = tuple[list[tuple[int, int, int]], dict[str, torch.Tensor]]
"""``([(env, slot, start_time), ...], {key: [num_chunks, chunk_length, *shape]})``."""


class ChunkWriter:
    """Flushes completed chunks of a buffer's rings to ``directory`` in a background thread.

    Give it to a `ReplayBuffer` as its ``observer``; close it when done (or use
    it as a context manager).

    Args:
        directory: where the live chunk files go (created if missing).
        chunk_length: positions per chunk; must divide the buffer's capacity.
        max_pending: chunk batches that may wait for the writer before an add blocks.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, ChunkWriter(f"{tmp}/live", 2) as writer:
    ...     buffer = ReplayBuffer(num_envs=1, capacity=4, observer=writer)
    ...     buffer.add_sequence({"x": torch.arange(3.0).view(3, 1)})
    ...     snapshot = writer.checkpoint(buffer, f"{tmp}/ckpt")
    ...     sorted(p.name for p in snapshot.iterdir())
    ['env00000-chunk00000.pt', 'env00000-chunk00001.pt', 'manifest.json', 'meta.pt']
    """

    def __init__(
        self, directory: str | os.PathLike, chunk_length: int = 4096, max_pending: int = 64
    ):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
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
        check_chunk_length(storage.capacity, self.chunk_length)
        envs, starts = _completed_chunks(storage, env_ids, num_steps, self.chunk_length)
        if len(envs) == 0:
            return
        steps = torch.arange(self.chunk_length, device=storage.device)
        positions = (starts.unsqueeze(1) + steps) % storage.capacity
        data = {key: ring[envs.unsqueeze(1), positions] for key, ring in storage.fields.items()}
        slots = (starts % storage.capacity) // self.chunk_length
        chunks = list(zip(envs.tolist(), slots.tolist(), starts.tolist(), strict=True))
        self._queue.put((chunks, {key: value.cpu() for key, value in data.items()}))

    def on_reset(self, storage: RingStorage) -> None:
        """Forgets the files written so far: the rings were replaced wholesale."""
        self.wait()
        with self._lock:
            stale, self._flushed = self._flushed, {}
        for chunk in stale.values():
            chunk.path.unlink(missing_ok=True)

    def wait(self) -> None:
        """Blocks until every queued chunk is on disk.

        Raises:
            RuntimeError: the writer thread failed (its error is the cause).
        """
        self._queue.join()
        self._raise_writer_error()

    def checkpoint(self, buffer: ReplayBuffer, directory: str | os.PathLike) -> Path:
        """Waits for the writer, then publishes a snapshot atomically (see `save_checkpoint`)."""
        self.wait()
        with self._lock:
            flushed = dict(self._flushed)
        return save_checkpoint(buffer, directory, self.chunk_length, flushed)

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
            staging = path.with_suffix(".tmp")
            write_durable(staging, blob)
            # A new inode per flush: snapshots that hard-linked the old file keep it intact.
            os.replace(staging, path)
            with self._lock:
                self._flushed[(env, slot)] = FlushedChunk(start_time, path, sha256(blob))

    def _raise_writer_error(self) -> None:
        if self._error is not None:
            raise RuntimeError("the replay chunk writer failed") from self._error


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
