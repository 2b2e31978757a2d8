"""An acquisition of the `Batcher`: what `execute` started, and reading it into `Trajectories`.

The trajectory block (`cadence.collect.batcher.shared`) holds every slot's rows; an acquisition
reads those of the slots that ran, up to the longest segment, and adds the per-segment
``info``. A dead worker's slots end at the last step it wrote, marked as cut (LAST with
discount 1, as `ParallelEnvironment` ends the episodes of a dead worker). The Ray back
end's actors return their rows instead of writing them in place: `write_rows` puts them
where a local worker would have.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

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
    """What `execute` started: which workers, which slots, on which weights and parameters."""

    workers: list[int]
    slots: np.ndarray
    version: int
    agent_info: DictTensor
    deadline: float | None  # a `time.monotonic` time; None: no deadline


def deadline(timeout_s: float | None) -> float | None:
    """The `time.monotonic` time ``timeout_s`` from now (``None``: none)."""
    return None if timeout_s is None else time.monotonic() + timeout_s


def read_trajectories(
    arrays: Mapping[str, np.ndarray],
    acquisition: Acquisition,
    env_info: DictTensor,
    cut: Sequence[slice],
) -> Trajectories:
    """Copies the acquisition's rows out of the block ``arrays``.

    Args:
        arrays: the trajectory block's arrays, ``[N, T, ...]`` and ``[N, ...]``.
        acquisition: what was acquired.
        env_info: ``[N, ...]`` every slot's environment parameters.
        cut: the slots of the workers that died during it (their steps end cut).
    """
    rows = acquisition.slots
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
    info = {
        **state,
        **acquisition.agent_info[index].prepend_key("agent_info/").to_dict(),
        **env_info[index].prepend_key("env_info/").to_dict(),
        "weights_version": torch.full((rows.size,), acquisition.version, dtype=torch.int64),
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
