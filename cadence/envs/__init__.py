"""Environments: the contracts, the Gymnasium adapter, wrappers and batching back ends."""

from cadence.envs.environment import Environment, PyEnvironment, PyEnvironmentWrapper
from cadence.envs.gym_adapter import GymAdapter
from cadence.envs.make import GymEnvFactory, UnknownEnvironmentError, make_env
from cadence.envs.serial import SerialEnvironment
from cadence.envs.time_limit import TimeLimit

__all__ = [
    "Environment",
    "GymAdapter",
    "GymEnvFactory",
    "PyEnvironment",
    "PyEnvironmentWrapper",
    "SerialEnvironment",
    "TimeLimit",
    "UnknownEnvironmentError",
    "make_env",
]
