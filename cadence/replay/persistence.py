"""Replay snapshots on disk: the buffer as chunk files and a ``meta.pt``, each with a checksum.

Each env's ring is cut into *chunks* of ``chunk_length`` positions (ring slot
``c`` holds positions ``[c * chunk_length, (c + 1) * chunk_length)``). A snapshot
directory looks like::

    snapshot/
      meta.pt                 counts, fields, row structure, sampler state
      env00000-chunk00000.pt  one chunk of one env's ring: {key: [chunk_length, *shape]}
      ...

`write_snapshot` writes and fsyncs every file and returns ``{file name: sha256}``;
publishing the directory is its caller's job: the trainer writes it as the ``data/``
part of a checkpoint, whose manifest records those digests and whose publish is atomic
(`cadence.trainer.checkpoint`). `read_snapshot` verifies every checksum it is given
before touching the buffer and refuses, naming the file, anything that does not
verify. Every file is read with ``torch.load(weights_only=True)``, so loading never
runs code. Writing, fsyncing and hashing go through `cadence.data.durable`.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from cadence.data.durable import sha256_of_bytes, write_durable
from cadence.replay.buffer import ReplayBuffer
from cadence.replay.storage import RingStorage, lazy_zeros

FORMAT_VERSION = 1
CHUNK_PATTERN = re.compile(r"env(\d+)-chunk(\d+)\.pt")
"""The name of a chunk file (its env and ring slot)."""


class ChecksumError(ValueError):
    """A checkpoint file is missing, unreadable or does not match its checksum.

    Attributes:
        path: the offending file.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}; refusing to load this replay checkpoint")
        self.path = path


@dataclasses.dataclass(frozen=True)
class FlushedChunk:
    """A chunk file already on disk: which data it holds and its checksum.

    Attributes:
        start_time: time (see `cadence.replay.storage`) of its first step.
        path: the file.
        sha256: hex digest of its bytes.
    """

    start_time: int
    path: Path
    sha256: str


def chunk_name(env: int, slot: int) -> str:
    """File name of ring slot ``slot`` of env ``env``."""
    return f"env{env:05d}-chunk{slot:05d}.pt"


def encode(value: Any) -> bytes:
    """``torch.save`` bytes of ``value`` (tensors are made compact first)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def chunk_fields(
    storage: RingStorage, env: int, slot: int, chunk_length: int
) -> dict[str, torch.Tensor]:
    """The ring contents of one chunk, ``{key: [chunk_length, *shape]}`` (compact copies)."""
    window = slice(slot * chunk_length, (slot + 1) * chunk_length)
    return {key: ring[env, window].clone() for key, ring in storage.fields.items()}


def check_chunk_length(capacity: int, chunk_length: int) -> None:
    """Chunks must tile the ring so that a chunk never straddles the wrap-around.

    Raises:
        ValueError: ``chunk_length`` does not divide ``capacity``.
    """
    if chunk_length < 1 or capacity % chunk_length:
        raise ValueError(f"chunk_length {chunk_length} must divide the capacity {capacity}")


def write_snapshot(
    buffer: ReplayBuffer,
    directory: Path,
    chunk_length: int = 4096,
    flushed: Mapping[tuple[int, int], FlushedChunk] | None = None,
) -> dict[str, str]:
    """Writes the buffer as chunk files and ``meta.pt`` into the existing ``directory``.

    Every file is fsynced (the directory itself is the caller's to sync and publish).
    Chunks in ``flushed`` that still hold what the ring holds are hard-linked, not
    written: with a `ChunkWriter` following the buffer, only the chunks the write
    heads are in the middle of cost a write.

    Returns:
        ``{file name: sha256}`` of everything written.
    """
    storage = buffer.storage
    check_chunk_length(storage.capacity, chunk_length)
    files = _write_chunks(storage, directory, chunk_length, flushed or {})
    meta = encode(_meta(buffer, chunk_length))
    write_durable(directory / "meta.pt", meta)
    files["meta.pt"] = sha256_of_bytes(meta)
    return files


def read_snapshot(
    buffer: ReplayBuffer, snapshot: Path, files: Mapping[str, str] | None = None
) -> None:
    """Loads a snapshot written by `write_snapshot` into ``buffer``.

    Every chunk is checked against ``meta.pt`` (the set of chunks its counts imply, each
    field's shape and dtype) before the buffer is touched.

    Args:
        buffer: a buffer of the snapshot's size.
        snapshot: the directory `write_snapshot` wrote.
        files: ``{file name: sha256}`` to verify each file against; None when the caller
            has verified them already (a checkpoint manifest covers them).

    Raises:
        ChecksumError: a file is missing, does not match its checksum or cannot be decoded.
        ValueError: the snapshot is of another size, or its chunks do not match its metadata
            (named).
    """
    meta = _decode(_read(snapshot / "meta.pt", files), snapshot / "meta.pt")
    size = (meta["num_envs"], meta["capacity"])
    if size != (buffer.num_envs, buffer.capacity):
        raise ValueError(
            f"{snapshot} holds {size[0]} envs x {size[1]} steps, the buffer {buffer.num_envs} x "
            f"{buffer.capacity}"
        )
    state = _snapshot_state(snapshot, meta, files, buffer.storage.device)
    buffer.load_state_dict(state, copy=False)


def snapshot_state(
    snapshot: Path, files: Mapping[str, str] | None = None, device: torch.device | str = "cpu"
) -> dict[str, Any]:
    """The `ReplayBuffer.state_dict` a snapshot holds, without a buffer (checked as in
    `read_snapshot`): for tools and tests that compare runs."""
    meta = _decode(_read(snapshot / "meta.pt", files), snapshot / "meta.pt")
    return _snapshot_state(snapshot, meta, files, torch.device(device))


def _snapshot_state(
    snapshot: Path, meta: Mapping[str, Any], files: Mapping[str, str] | None, device: torch.device
) -> dict[str, Any]:
    chunk_length = meta["chunk_length"]
    chunks = stored_chunks(meta["num_added"], meta["capacity"], chunk_length)
    names = sorted(chunk_name(env, slot) for env, slot, _ in chunks)
    fields = _empty_fields(meta, device)
    for name in names:
        if not (snapshot / name).is_file():
            raise ChecksumError(snapshot / name, "is missing (meta.pt's counts imply it)")
        chunk = _decode(_read(snapshot / name, files), snapshot / name)
        _place_chunk(fields, snapshot / name, chunk, chunk_length)
    storage = {key: meta[key] for key in ("num_envs", "capacity", "num_added", "structure")}
    return {"storage": {**storage, "fields": fields}, "sampler": meta["sampler"]}


def snapshot_chunk_length(snapshot: Path) -> int:
    """The chunk length a snapshot was written with (reads only ``meta.pt``)."""
    return int(_decode((snapshot / "meta.pt").read_bytes(), snapshot / "meta.pt")["chunk_length"])


# ------------------------------------------------------------------- writing


def _write_chunks(
    storage: RingStorage,
    staging: Path,
    chunk_length: int,
    flushed: Mapping[tuple[int, int], FlushedChunk],
) -> dict[str, str]:
    """Puts every chunk that holds data into ``staging``; returns ``{name: sha256}``."""
    files = {}
    for env, slot, complete_since in stored_chunks(
        storage.num_added, storage.capacity, chunk_length
    ):
        name = chunk_name(env, slot)
        known = flushed.get((env, slot))
        if (
            known is not None
            and known.start_time == complete_since
            and _link(known.path, staging / name)
        ):
            files[name] = known.sha256
            continue
        data = encode(chunk_fields(storage, env, slot, chunk_length))
        write_durable(staging / name, data)
        files[name] = sha256_of_bytes(data)
    return files


def stored_chunks(
    num_added: torch.Tensor, capacity: int, chunk_length: int
) -> list[tuple[int, int, int]]:
    """``(env, slot, start_time)`` of every ring slot holding data.

    Args:
        num_added: ``[num_envs]`` steps ever added per env (`RingStorage.num_added`).
        capacity: the ring size.
        chunk_length: positions per chunk.

    Returns:
        for each slot, ``start_time`` is the first time of the complete chunk it holds,
        or -1 for the slot a write head is in the middle of (it must be written now).
    """
    slots_per_ring = capacity // chunk_length
    chunks = []
    for env, added in enumerate(num_added.tolist()):
        head = (added % capacity) // chunk_length
        for slot in range(slots_per_ring):
            if added < capacity and slot * chunk_length >= added:
                break
            if slot == head and added % chunk_length:
                chunks.append((env, slot, -1))
                continue
            last_complete = added // chunk_length - 1
            chunk = last_complete - (last_complete - slot) % slots_per_ring
            chunks.append((env, slot, chunk * chunk_length))
    return chunks


def _meta(buffer: ReplayBuffer, chunk_length: int) -> dict[str, Any]:
    storage = buffer.storage
    return {
        "format": FORMAT_VERSION,
        "num_envs": storage.num_envs,
        "capacity": storage.capacity,
        "chunk_length": chunk_length,
        "num_added": storage.num_added.cpu().clone(),
        "structure": storage.structure if storage.initialized else None,
        "fields": {
            key: (list(ring.shape[2:]), str(ring.dtype).removeprefix("torch."))
            for key, ring in storage.fields.items()
        },
        "sampler": _to_cpu(buffer.sampler.state_dict()),
    }


def _link(source: Path, target: Path) -> bool:
    """Hard-links ``source`` (cheap: chunk files are never modified in place); False if impossible."""
    try:
        os.link(source, target)
    except OSError:
        return False
    return True


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    return value


# ------------------------------------------------------------------- reading


def _verified(path: Path, digest: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ChecksumError(path, f"cannot be read ({error})") from error
    if sha256_of_bytes(data) != digest:
        raise ChecksumError(path, "checksum mismatch")
    return data


def _read(path: Path, files: Mapping[str, str] | None) -> bytes:
    """The bytes of ``path``, verified against ``files[path.name]`` when ``files`` is given."""
    if files is None:
        try:
            return path.read_bytes()
        except OSError as error:
            raise ChecksumError(path, f"cannot be read ({error})") from error
    if path.name not in files:
        raise ChecksumError(path, "not listed in the manifest")
    return _verified(path, files[path.name])


def _decode(data: bytes, path: Path) -> Any:
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # a verified but undecodable file is refused like a corrupt one
        raise ChecksumError(path, f"cannot be decoded ({error})") from error


def _empty_fields(meta: Mapping[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    outer = (meta["num_envs"], meta["capacity"])
    return {
        key: lazy_zeros(outer + tuple(shape), getattr(torch, dtype), device)
        for key, (shape, dtype) in meta["fields"].items()
    }


def _place_chunk(
    fields: dict[str, torch.Tensor],
    path: Path,
    chunk: Mapping[str, torch.Tensor],
    chunk_length: int,
) -> None:
    """Copies one chunk into the rings after checking it against the snapshot's fields."""
    match = CHUNK_PATTERN.fullmatch(path.name)
    if match is None or not isinstance(chunk, Mapping) or set(chunk) != set(fields):
        raise ValueError(f"{path} is not a chunk of this snapshot's fields {sorted(fields)}")
    env, slot = int(match.group(1)), int(match.group(2))
    for key, ring in fields.items():
        value = chunk[key]
        expected = (chunk_length, *ring.shape[2:])
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != expected:
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{path}: field {key!r} is {shape}, meta.pt says {list(expected)}")
        if value.dtype != ring.dtype:
            raise ValueError(f"{path}: field {key!r} is {value.dtype}, meta.pt says {ring.dtype}")
        ring[env, slot * chunk_length : (slot + 1) * chunk_length] = value
