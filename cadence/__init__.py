"""cadence: a reinforcement-learning framework for PyTorch.

The names a user needs day to day; everything else lives in the subpackages
(`cadence.envs`, `cadence.algorithms`, `cadence.replay`, `cadence.transforms`, ...).

>>> import cadence
>>> with cadence.make_env("CartPole-v1", num_envs=2, backend="serial", seed=0) as env:
...     first = env.reset()
>>> first.step_type.tolist()
[0, 0]
"""

from cadence.algorithms import (
    Algorithm,
    AlgStep,
    LossInfo,
    OffPolicyConfig,
    OffPolicyScheme,
    OnPolicyScheme,
    build_algorithm,
)
from cadence.cli import train_experiment as train
from cadence.config import ExperimentConfig, list_configs, load_config
from cadence.data import DictTensor, StepType, TemporalDictTensor, TimeStep, Trajectories
from cadence.envs import (
    Environment,
    ParallelEnvironment,
    SerialEnvironment,
    ThreadEnvironment,
    make_env,
)
from cadence.replay import ReplayBuffer
from cadence.trainer import Trainer, read_metrics
from cadence.transforms import DataTransformer, DataTransformerSequence

__version__ = "0.1.0"

__all__ = [
    "AlgStep",
    "Algorithm",
    "DataTransformer",
    "DataTransformerSequence",
    "DictTensor",
    "Environment",
    "ExperimentConfig",
    "LossInfo",
    "OffPolicyConfig",
    "OffPolicyScheme",
    "OnPolicyScheme",
    "ParallelEnvironment",
    "ReplayBuffer",
    "SerialEnvironment",
    "StepType",
    "TemporalDictTensor",
    "ThreadEnvironment",
    "TimeStep",
    "Trainer",
    "Trajectories",
    "__version__",
    "build_algorithm",
    "list_configs",
    "load_config",
    "make_env",
    "read_metrics",
    "train",
]
