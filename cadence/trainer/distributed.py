"""The ranks of a multi-process learner (``torchrun``, ``cadence train --nproc N``): the
process group, what the trainer agrees on across ranks, and checkpoints with every
rank's part (docs/ddp.md).

Every rank runs the same `Trainer` on its own environments. Gradients are averaged by
the algorithm's gradient-sync hook and the loss statistics are global
(`cadence.data.distributed`); the trainer adds, once per iteration, the iteration's
metrics and episodes of all ranks (so the counters and the log are those of the whole
group) and the pre-emption flag (a signal to any rank stops all of them at the same
iteration). Rank 0 alone writes the run directory; a checkpoint holds every rank's own
state: rank 0's at its top, rank r's under ``rank_<r>/``, all in one manifest.

In one process, `Ranks.single` answers every question locally, without collectives.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cadence.algorithms.scheme import IterationResult
from cadence.trainer.checkpoint import STATE_FILE, CheckpointManager
from cadence.trainer.errors import CheckpointError

logger = logging.getLogger(__name__)

WRITER_RANK = 0


class Ranks:
    """This process's place in the group, and the few things all ranks agree on.

    Args:
        rank: this process's rank (0 writes the run directory).
        world_size: the number of ranks.
        local_rank: the rank on this machine (its CUDA device).
        control_group: the CPU (gloo) group for flags and small objects; None for the
            default group (itself gloo on CPU).
    """

    def __init__(
        self, rank: int, world_size: int, local_rank: int = 0, control_group: Any = None
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.control_group = control_group

    @classmethod
    def single(cls) -> Ranks:
        """One process: every method answers locally."""
        return cls(0, 1)

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the run directory (metrics, config, checkpoints)."""
        return self.rank == WRITER_RANK

    @property
    def part(self) -> str:
        """This rank's directory inside a checkpoint (``""``: its top, rank 0's)."""
        return checkpoint_part(self.rank)

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (one collective)."""
        if self.world_size == 1:
            return flag
        value = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control_group)
        return bool(value.item())

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.control_group)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        if self.world_size == 1:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value, group=self.control_group)
        return values

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` (picklable) on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=WRITER_RANK, group=self.control_group)
        return box[0]

    def combine(self, result: IterationResult) -> IterationResult:
        """One iteration of the whole group: each metric averaged over the ranks (the
        losses' shares average to their global means), the episodes of all ranks
        (rank order), non-finite if any rank's was."""
        if self.world_size == 1:
            return result
        episodes = {k: v.detach().cpu() for k, v in result.episodes.items()}
        gathered = self.gather((result.metrics, episodes, bool(result.nonfinite)))
        metrics = {
            key: sum(metrics[key] for metrics, _, _ in gathered) / self.world_size
            for key in result.metrics
        }
        return IterationResult(
            metrics,
            _cat_episodes([episodes for _, episodes, _ in gathered]),
            torch.tensor(any(nonfinite for _, _, nonfinite in gathered)),
        )

    def gather_episodes(self, episodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The episode stats of all ranks, concatenated in rank order."""
        if self.world_size == 1:
            return episodes
        return _cat_episodes(self.gather({k: v.detach().cpu() for k, v in episodes.items()}))


def checkpoint_part(rank: int) -> str:
    """Rank ``rank``'s directory inside a checkpoint (``""``: the top, rank 0's)."""
    return "" if rank == WRITER_RANK else f"rank_{rank}"


def _cat_episodes(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    keys = [key for key in parts[0] if all(key in part for part in parts)]
    return {key: torch.cat([part[key] for part in parts]) for key in keys}


# ----------------------------------------------------------------- the group
def world_size_from_env() -> int:
    """``WORLD_SIZE`` as ``torchrun`` sets it (1 outside ``torchrun``)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextlib.contextmanager
def start_ranks(num_ranks: int, device: str, timeout_s: float) -> Iterator[Ranks]:
    """Joins the group that ``torchrun`` (or `cadence.trainer.launch`) started, for the
    duration of a run; `Ranks.single` outside one.

    gloo on CPU; NCCL for CUDA, with a gloo group beside it for flags and objects.

    Raises:
        ValueError: ``WORLD_SIZE`` is not ``num_ranks`` (the config's trainer.num_ranks).
    """
    world_size = world_size_from_env()
    if world_size != num_ranks:
        raise ValueError(
            f"trainer.num_ranks={num_ranks} but {world_size} rank(s) were started "
            f"(WORLD_SIZE={world_size}); start {num_ranks} (torchrun --nproc-per-node "
            f"{num_ranks}, or cadence train --nproc {num_ranks}) or set trainer.num_ranks"
        )
    if world_size == 1:
        yield Ranks.single()
        return
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=timeout_s)
    _import_group_capturing_modules()
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    try:
        control = dist.new_group(backend="gloo", timeout=timeout) if cuda else None
        ranks = Ranks(rank, world_size, local_rank, control)
        yield ranks
        ranks.barrier()  # all done with the group before any rank leaves it
        _leave_together(rank, world_size, timeout)
    finally:
        dist.destroy_process_group()


def _import_group_capturing_modules() -> None:
    """Imports, before the group exists, the torch modules whose functions take the
    default group as a default argument (``group=group.WORLD``, evaluated at import).

    Imported while a group is up (as anything that imports inductor does:
    ``torch.use_deterministic_algorithms``, ``torch.compile``, tensordict through
    torch's compiler), they would hold that group for the life of the process:
    ``destroy_process_group`` could not free it, and its gloo worker threads, still
    running when the interpreter shuts down, abort the process ("terminate called without
    an active exception") once in a few dozen runs. Imported now, they capture None.
    """
    import torch.distributed.nn.functional  # noqa: F401


def _leave_together(rank: int, world_size: int, timeout: datetime.timedelta) -> None:
    """Waits, through the rendezvous store, until every rank is out of the last barrier.

    A gloo barrier can return on one rank while another still waits for its last message:
    a rank that then tore the group down would close that connection under the other.
    The store outlives the ranks (torchrun's agent holds it), so it can say when all are
    out.
    """
    store = dist.distributed_c10d._get_default_store()
    store.set(f"cadence/left/{rank}", "1")
    store.wait([f"cadence/left/{r}" for r in range(world_size)], timeout)


def rank_device(device: str, ranks: Ranks) -> str:
    """The learner device of this rank: ``cuda`` becomes ``cuda:<local rank>``."""
    if ranks.world_size > 1 and device == "cuda":
        return f"cuda:{ranks.local_rank}"
    return device


# ------------------------------------------------------------- checkpoints
def save_checkpoint_of_ranks(
    manager: CheckpointManager,
    ranks: Ranks,
    iteration: int,
    state: dict[str, Any],
    write_files: Callable[[Path], Mapping[str, str]],
    eval_return: float | None,
) -> None:
    """Every rank writes its part of checkpoint ``iteration`` into rank 0's staging
    directory; rank 0 then writes the manifest over all of them and publishes it.

    Raises:
        OSError: any rank's part, or the publishing, failed (on every rank); the
            checkpoints published before are untouched.
    """
    staging = manager.staging_path(iteration)
    error = None
    if ranks.is_writer:
        try:
            manager.prepare_staging(staging)
        except OSError as failure:
            error = f"rank {ranks.rank}: {failure}"
    error = ranks.broadcast(error)
    if error is not None:
        raise OSError(error)
    known: dict[str, str] = {}
    try:
        part = staging / ranks.part
        prefix = f"{ranks.part}/" if ranks.part else ""
        written = manager.write_part(part, state, write_files)
        known = {prefix + name: digest for name, digest in written.items()}
    except OSError as failure:
        error = f"rank {ranks.rank}: {failure}"
    parts = ranks.gather((known, error))
    failures = [failure for _, failure in parts if failure is not None]
    if ranks.is_writer:
        if failures:
            manager.discard_staging(staging)
        else:
            try:
                merged = {name: digest for files, _ in parts for name, digest in files.items()}
                manager.publish(iteration, staging, merged, eval_return)
            except OSError as failure:
                failures.append(f"rank {ranks.rank}: {failure}")
    failures = ranks.broadcast(failures)
    if failures:
        raise OSError("; ".join(failures))


def load_checkpoint_of_ranks(
    manager: CheckpointManager, ranks: Ranks, map_location: Any
) -> tuple[Path, dict[str, Any], dict[str, str]] | None:
    """This rank's part of the newest checkpoint that verifies (rank 0 verifies the whole
    checkpoint and chooses it for all), or None when the run has none.

    Returns:
        the checkpoint, this rank's state, and ``{path relative to this rank's part:
        sha256}`` of the part's files.

    Raises:
        CheckpointError: no checkpoint verifies, or the chosen one has no part for this rank.
    """
    chosen: Any = None
    if ranks.is_writer:
        try:
            if manager.has_checkpoints():
                path, state = manager.load_verified(map_location=map_location)
                chosen = path.name
        except Exception as failure:  # noqa: BLE001 - every rank stops with it
            chosen = failure
    chosen = ranks.broadcast(chosen)
    if isinstance(chosen, BaseException):
        raise chosen
    if chosen is None:
        return None
    path = manager.directory / chosen
    prefix = f"{ranks.part}/" if ranks.part else ""
    if not ranks.is_writer:
        state_file = path / ranks.part / STATE_FILE
        if not state_file.is_file():
            raise CheckpointError(
                f"{path} holds no part for rank {ranks.rank} ({state_file} is missing): it was "
                "written by a group of another size"
            )
        state = torch.load(state_file, map_location=map_location, weights_only=True)
    files = {
        name.removeprefix(prefix): digest
        for name, digest in manager.manifest_files(path).items()
        if name.startswith(prefix) and (prefix or not name.startswith("rank_"))
    }
    return path, state, files
