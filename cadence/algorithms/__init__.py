"""Algorithms: the `Algorithm` contract, training schemes, PPO/A2C/DQN/SAC/TD3/DDPG, and pure
return functions (`returns`)."""

from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo
from cadence.algorithms.build import ALGORITHM_BUILDERS, build_algorithm
from cadence.algorithms.off_policy import OffPolicyScheme, make_replay_buffer
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.on_policy import OnPolicyScheme, TrainingScheme

__all__ = [
    "ALGORITHM_BUILDERS",
    "AlgStep",
    "Algorithm",
    "LossInfo",
    "OffPolicyConfig",
    "OffPolicyScheme",
    "OnPolicyScheme",
    "TrainingScheme",
    "build_algorithm",
    "make_replay_buffer",
]
