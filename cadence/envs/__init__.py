"""Environments: the contracts, the Gymnasium adapter, wrappers and batching back ends."""

from cadence.envs.environment import Environment, PyEnvironment, PyEnvironmentWrapper
from cadence.envs.gym_adapter import GymAdapter
from cadence.envs.make import GymEnvFactory, UnknownEnvironmentError, make_env
from cadence.envs.mujoco_setup import MujocoWarning
from cadence.envs.parallel import EnvironmentWorkerError, ParallelEnvironment
from cadence.envs.serial import SerialEnvironment
from cadence.envs.thread import ThreadEnvironment
from cadence.envs.time_limit import TimeLimit
from cadence.envs.wrappers import (
    ContinuousActionClip,
    FrameSkip,
    FrameStack,
    ImageChannelFirst,
    NormalizedAction,
)

__all__ = [
    "ContinuousActionClip",
    "Environment",
    "EnvironmentWorkerError",
    "FrameSkip",
    "FrameStack",
    "GymAdapter",
    "GymEnvFactory",
    "ImageChannelFirst",
    "MujocoWarning",
    "NormalizedAction",
    "ParallelEnvironment",
    "PyEnvironment",
    "PyEnvironmentWrapper",
    "SerialEnvironment",
    "ThreadEnvironment",
    "TimeLimit",
    "UnknownEnvironmentError",
    "make_env",
]
