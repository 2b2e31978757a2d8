"""Replay: ``[num_envs, capacity]`` rings of raw experience, samplers, episode index, persistence."""

from cadence.replay.buffer import ReplayBuffer, ReplaySample, StorageObserver
from cadence.replay.episode_index import EpisodeIndex
from cadence.replay.prioritized import PrioritizedSampler, Schedule, linear_schedule
from cadence.replay.rows import STEP_TYPE_KEY, experience_rows, time_step_from_rows
from cadence.replay.samplers import (
    SampleIndices,
    Sampler,
    UniformSampler,
    whole_buffer_minibatches,
)
from cadence.replay.storage import RingStorage
from cadence.replay.sum_tree import SumTree

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
