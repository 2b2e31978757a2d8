"""Data: time steps, specs, nest helpers and the rlstructures containers."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DictTensor": "dict_tensor",
        "masked_dicttensor": "dict_tensor",
        "masked_tensor": "dict_tensor",
        "Experience": "experience",
        "flatten": "nest",
        "map_structure": "nest",
        "pack_sequence_as": "nest",
        "BoundedTensorSpec": "specs",
        "CompositeSpec": "specs",
        "DiscreteTensorSpec": "specs",
        "Spec": "specs",
        "TensorSpec": "specs",
        "UnsupportedSpaceError": "errors",
        "spec_from_space": "specs",
        "TemporalDictTensor": "temporal_dict_tensor",
        "StepType": "time_step",
        "TimeStep": "time_step",
        "Trajectories": "trajectories",
    },
)

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
    "UnsupportedSpaceError",
    "flatten",
    "map_structure",
    "masked_dicttensor",
    "masked_tensor",
    "pack_sequence_as",
    "spec_from_space",
]
