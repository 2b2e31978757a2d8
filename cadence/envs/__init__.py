"""Environments: the contracts, the Gymnasium adapter, wrappers and batching back ends."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Environment": "environment",
        "PyEnvironment": "environment",
        "PyEnvironmentWrapper": "environment",
        "GymAdapter": "gym_adapter",
        "GymEnvFactory": "make",
        "EnvBuildError": "errors",
        "EnvStateMismatchError": "errors",
        "UnknownEnvironmentError": "errors",
        "make_env": "make",
        "MujocoWarning": "mujoco_setup",
        "EnvironmentWorkerError": "parallel",
        "ParallelEnvironment": "parallel",
        "SerialEnvironment": "serial",
        "ThreadEnvironment": "thread",
        "TimeLimit": "time_limit",
        "ContinuousActionClip": "wrappers",
        "EnvFrameStack": "wrappers",
        "FrameSkip": "wrappers",
        "ImageChannelFirst": "wrappers",
        "NormalizedAction": "wrappers",
        "ObservationMask": "wrappers",
    },
)

__all__ = [
    "ContinuousActionClip",
    "EnvBuildError",
    "EnvFrameStack",
    "EnvStateMismatchError",
    "Environment",
    "EnvironmentWorkerError",
    "FrameSkip",
    "GymAdapter",
    "GymEnvFactory",
    "ImageChannelFirst",
    "MujocoWarning",
    "NormalizedAction",
    "ObservationMask",
    "ParallelEnvironment",
    "PyEnvironment",
    "PyEnvironmentWrapper",
    "SerialEnvironment",
    "ThreadEnvironment",
    "TimeLimit",
    "UnknownEnvironmentError",
    "make_env",
]
