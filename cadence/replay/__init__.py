"""Replay: ``[num_envs, capacity]`` rings of raw experience, samplers, episode index, persistence."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ReplayBuffer": "buffer",
        "ReplaySample": "buffer",
        "StorageObserver": "buffer",
        "EpisodeIndex": "episode_index",
        "PrioritizedSampler": "prioritized",
        "Schedule": "prioritized",
        "linear_schedule": "prioritized",
        "STEP_TYPE_KEY": "rows",
        "experience_rows": "rows",
        "time_step_from_rows": "rows",
        "SampleIndices": "samplers",
        "Sampler": "samplers",
        "UniformSampler": "samplers",
        "whole_buffer_minibatches": "samplers",
        "RingStorage": "storage",
        "SumTree": "sum_tree",
    },
)

__all__ = [
    "STEP_TYPE_KEY",
    "EpisodeIndex",
    "PrioritizedSampler",
    "ReplayBuffer",
    "ReplaySample",
    "RingStorage",
    "SampleIndices",
    "Sampler",
    "Schedule",
    "StorageObserver",
    "SumTree",
    "UniformSampler",
    "experience_rows",
    "linear_schedule",
    "time_step_from_rows",
    "whole_buffer_minibatches",
]
