"""Data: time steps, specs, nest helpers and the rlstructures containers."""

from cadence.data.dict_tensor import DictTensor
from cadence.data.experience import Experience
from cadence.data.nest import flatten, map_structure, pack_sequence_as
from cadence.data.specs import (
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    Spec,
    TensorSpec,
    spec_from_space,
)
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.time_step import StepType, TimeStep
from cadence.data.trajectories import Trajectories

__all__ = [
    "BoundedTensorSpec",
    "CompositeSpec",
    "DictTensor",
    "DiscreteTensorSpec",
    "Experience",
    "Spec",
    "StepType",
    "TemporalDictTensor",
    "TensorSpec",
    "TimeStep",
    "Trajectories",
    "flatten",
    "map_structure",
    "pack_sequence_as",
    "spec_from_space",
]
