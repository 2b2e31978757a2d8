"""The `Batcher`'s acquisitions: what `execute` started in each worker, waiting for those
that finished, and reading them into `Trajectories`.

Each worker's acquisition is its own (`Acquisition`): its slots, the weights version and
``agent_info`` it started with, and its deadline. `finished` says which of those in
flight are done, waiting (on the pool, not spinning) until they hold enough slots. The
trajectory block (`cadence.collect.batcher.shared`) holds every slot's rows; the
acquisitions taken are read from the rows of their slots, up to the longest segment,
with the per-segment ``info``. A dead worker's slots end at the last step it wrote,
marked as cut (LAST with discount 1, as `ParallelEnvironment` ends the episodes of a
dead worker). The Ray back end's actors return their rows instead of writing them in
place: `write_rows` puts them where a local worker would have.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.time_step import StepType
from cadence.data.trajectories import Trajectories

_LAST = int(StepType.LAST)
_STEP_ROOTS = ("observation", "action", "_observation")


@dataclasses.dataclass
class Acquisition:
    """What `execute` started in one worker: its slots, on which weights and parameters."""

    slots: np.ndarray  # the running slots it acquires, indices in the whole batch
    version: int
    agent_info: DictTensor  # [N, ...] every slot's, as they were at its execute
    deadline: float | None  # a `time.monotonic` time; None: no deadline

    def overdue(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


def deadline(timeout_s: float | None) -> float | None:
    """The `time.monotonic` time ``timeout_s`` from now (``None``: none)."""
    return None if timeout_s is None else time.monotonic() + timeout_s


def finished(
    pool: Any, in_flight: Mapping[int, Acquisition], min_slots: int, blocking: bool
) -> list[int]:
    """The workers of ``in_flight`` that are done: answered, died, or past their deadline.

    Args:
        pool: the workers' pool (`WorkerPool` or `RayWorkerPool`: its ``ready``).
        in_flight: each worker's acquisition.
        min_slots: how many slots the finished workers must hold (at most all of them).
        blocking: wait (on the pool's answers, deaths and deadlines) until they do;
            else look once.

    Returns:
        Those workers in order, or none (not blocking) when they hold fewer slots.
    """
    need = min(min_slots, sum(a.slots.size for a in in_flight.values()))
    while True:
        now = time.monotonic()
        done = pool.ready(in_flight) | {w for w, a in in_flight.items() if a.overdue(now)}
        if sum(in_flight[w].slots.size for w in done) >= need:
            return sorted(done)
        if not blocking:
            return []
        waiting = [w for w in in_flight if w not in done]
        deadlines = [in_flight[w].deadline for w in waiting if in_flight[w].deadline is not None]
        pool.ready(waiting, None if not deadlines else max(0.0, min(deadlines) - now))


def read_trajectories(
    arrays: Mapping[str, np.ndarray],
    taken: Sequence[Acquisition],
    env_info: DictTensor,
    cut: Sequence[slice],
) -> Trajectories:
    """Copies the rows of the acquisitions ``taken`` out of the block ``arrays``.

    Args:
        arrays: the trajectory block's arrays, ``[N, T, ...]`` and ``[N, ...]``.
        taken: the acquisitions to read, in slot order.
        env_info: ``[N, ...]`` every slot's environment parameters.
        cut: the slots of the workers that died during them (their steps end cut).

    Returns:
        A row per slot of ``taken``, ``[B, T']`` (``T'`` the longest segment); ``info``
        says which slot each row is (``env_id``) and the weights version it ran on.
    """
    rows = np.concatenate([a.slots for a in taken]).astype(np.int64)
    lengths = torch.from_numpy(arrays["progress"][rows].copy())
    longest = int(lengths.max()) if rows.size else 0
    steps: dict[str, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    for key, array in arrays.items():
        if key.startswith("agent_state/"):
            state[key] = torch.from_numpy(array[rows])
        elif key != "progress":
            steps[key] = torch.from_numpy(array[rows, :longest])
    for slots in cut:
        _mark_cut(steps, lengths, rows, slots)
    index = torch.from_numpy(rows)
    agent_info = [a.agent_info[torch.from_numpy(a.slots)].to_dict() for a in taken]
    info = {
        **state,
        **{f"agent_info/{k}": torch.cat([i[k] for i in agent_info]) for k in agent_info[0]},
        **env_info[index].prepend_key("env_info/").to_dict(),
        "env_id": index.clone(),
        "weights_version": torch.cat(
            [torch.full((a.slots.size,), a.version, dtype=torch.int64) for a in taken]
        ),
    }
    info_dt = DictTensor(info, batch_size=rows.size)
    return Trajectories(info_dt, TemporalDictTensor(steps, lengths))


def write_rows(
    arrays: Mapping[str, np.ndarray], slots: slice, rows: Mapping[str, np.ndarray]
) -> None:
    """Writes a worker's returned ``rows`` (`Acquirer.rows_written`) into its ``slots``."""
    for key, values in rows.items():
        if key.split("/")[0] in _STEP_ROOTS:
            arrays[key][slots, : values.shape[1]] = values
        else:  # progress and agent_state/*: a row per slot
            arrays[key][slots] = values


def write_replies(
    arrays: Mapping[str, np.ndarray], replies: dict[int, Any], slots: Callable[[int], slice]
) -> dict[int, Any]:
    """Ray: writes the rows each actor returned (worker ``w``'s into ``slots(w)``) into
    ``arrays``; returns the replies as the local back end's (the slots still running)."""
    plain = {}
    for worker, (status, payload) in replies.items():
        if status == "ok":
            running, rows = payload
            write_rows(arrays, slots(worker), rows)
            payload = running
        plain[worker] = (status, payload)
    return plain


def _mark_cut(
    steps: dict[str, torch.Tensor], lengths: torch.Tensor, rows: np.ndarray, slots: slice
) -> None:
    """Ends the last written step of ``slots`` as a cut episode (LAST, discount 1)."""
    for i in np.flatnonzero((rows >= slots.start) & (rows < slots.stop)):
        t = int(lengths[i]) - 1
        if t < 0 or steps["_observation/done"][i, t]:
            continue  # no step, or one that ended its episode itself
        steps["_observation/done"][i, t] = True
        steps["_observation/step_type"][i, t] = _LAST
        steps["_observation/discount"][i, t] = 1.0
