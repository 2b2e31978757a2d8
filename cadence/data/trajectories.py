"""`Trajectories`: segments of experience as rlstructures' batchers return them.

Follows the ``Trajectories`` of rlstructures (Denoyer et al., 2021,
https://arxiv.org/abs/2102.01010): what was known at the start of each segment,
and the segment's steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from cadence.data.dict_tensor import Device, DictTensor, RowIndex
from cadence.data.temporal_dict_tensor import TemporalDictTensor


@dataclasses.dataclass(frozen=True, eq=False)
class Trajectories:
    """A batch of ``B`` segments: their starting information and their steps.

    Attributes:
        info: ``[B, ...]`` by key, at the start of each segment: ``agent_info/*``
            (e.g. the exploration level), ``env_info/*`` (e.g. the env seed) and
            ``agent_state/*`` (the recurrent state to resume from). An empty
            ``info`` is given the batch size of ``trajectories``.
        trajectories: ``[B, T, ...]`` by key, with lengths: ``observation/*``
            (what the agent saw), ``action/*`` (what it did and its outputs) and
            ``_observation/*`` (what the environment returned after the action).

    Raises:
        ValueError: ``info`` and ``trajectories`` differ in batch size or device.

    >>> steps = TemporalDictTensor({"observation/x": torch.zeros(2, 5)}, torch.tensor([5, 3]))
    >>> info = DictTensor({"agent_state/h": torch.zeros(2, 8)})
    >>> batch = Trajectories(info, steps)
    >>> batch.n_elems(), batch[1].trajectories.lengths.tolist()
    (2, [3])
    """

    info: DictTensor
    trajectories: TemporalDictTensor

    def __post_init__(self) -> None:
        n_elems, device = self.trajectories.n_elems(), self.trajectories.device()
        if self.info.empty() and (self.info.n_elems(), self.info.device()) != (n_elems, device):
            # rlstructures allows an empty info of any size; keep rows aligned instead.
            object.__setattr__(self, "info", DictTensor({}, batch_size=n_elems, device=device))
        if self.info.n_elems() != n_elems:
            raise ValueError(
                f"info has {self.info.n_elems()} rows but trajectories have {n_elems}; "
                "both must hold one row per segment"
            )
        if self.info.device() != device:
            raise ValueError(f"info is on {self.info.device()} but trajectories on {device}")

    def device(self) -> torch.device:
        """The device of ``info`` and ``trajectories`` (a method, as in rlstructures)."""
        return self.trajectories.device()

    def n_elems(self) -> int:
        """``B``, the number of segments."""
        return self.trajectories.n_elems()

    def __len__(self) -> int:
        return self.n_elems()

    def __getitem__(self, index: RowIndex) -> Trajectories:
        """The segments ``index`` selects (an int keeps a batch of one)."""
        if isinstance(index, str):
            raise TypeError("index Trajectories by rows; read keys from .info or .trajectories")
        return Trajectories(self.info[index], self.trajectories[index])

    def to(self, device: Device) -> Trajectories:
        return Trajectories(self.info.to(device), self.trajectories.to(device))

    def clone(self) -> Trajectories:
        return Trajectories(self.info.clone(), self.trajectories.clone())

    def detach(self) -> Trajectories:
        return Trajectories(self.info.detach(), self.trajectories.detach())

    def sample(self, n: int) -> Trajectories:
        """Raises: rlstructures declares ``sample`` without implementing it; index rows."""
        raise NotImplementedError(
            f"Trajectories.sample({n}) is not implemented (nor is it in rlstructures): index "
            f"rows instead, e.g. trajectories[torch.randint(trajectories.n_elems(), ({n},))]"
        )

    @staticmethod
    def cat(batches: Sequence[Trajectories]) -> Trajectories:
        """Concatenates along the batch dim (trajectories padded to the longest ``T``)."""
        return Trajectories(
            DictTensor.cat([b.info for b in batches]),
            TemporalDictTensor.cat([b.trajectories for b in batches]),
        )
