"""Data: time steps, specs, nest helpers and the rlstructures containers."""

from cadence.data.nest import flatten, map_structure, pack_sequence_as
from cadence.data.specs import (
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    Spec,
    TensorSpec,
    spec_from_space,
)
from cadence.data.time_step import StepType, TimeStep

__all__ = [
    "BoundedTensorSpec",
    "CompositeSpec",
    "DiscreteTensorSpec",
    "Spec",
    "StepType",
    "TensorSpec",
    "TimeStep",
    "flatten",
    "map_structure",
    "pack_sequence_as",
    "spec_from_space",
]
