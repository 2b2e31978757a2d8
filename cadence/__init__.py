"""cadence: a reinforcement-learning framework for PyTorch.

The names a user needs day to day; everything else lives in the subpackages
(`cadence.envs`, `cadence.algorithms`, `cadence.replay`, `cadence.transforms`, ...).

>>> import cadence
>>> with cadence.make_env("CartPole-v1", num_envs=2, backend="serial", seed=0) as env:
...     first = env.reset()
>>> first.step_type.tolist()
[0, 0]
"""

from cadence._lazy import lazy_exports

# Each name imports its subpackage on first use: `import cadence` (and so the `cadence`
# command's list, --version and train --help) must not import torch.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AlgStep": "algorithms",
        "Algorithm": "algorithms",
        "LossInfo": "algorithms",
        "OffPolicyConfig": "algorithms",
        "OffPolicyScheme": "algorithms",
        "OnPolicyScheme": "algorithms",
        "build_algorithm": "algorithms",
        "ExperimentConfig": "config",
        "list_configs": "config",
        "load_config": "config",
        "DictTensor": "data",
        "StepType": "data",
        "TemporalDictTensor": "data",
        "TimeStep": "data",
        "Trajectories": "data",
        "Environment": "envs",
        "ParallelEnvironment": "envs",
        "SerialEnvironment": "envs",
        "ThreadEnvironment": "envs",
        "make_env": "envs",
        "ReplayBuffer": "replay",
        "Trainer": "trainer",
        "read_metrics": "trainer",
        "train": "trainer.run",
        "DataTransformer": "transforms",
        "DataTransformerSequence": "transforms",
    },
)

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
