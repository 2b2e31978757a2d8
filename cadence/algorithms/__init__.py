"""Algorithms: the `Algorithm` contract, the on- and off-policy training schemes, the
registry, PPO/A2C/DQN/SAC/TD3/DDPG, and pure return functions (`returns`).

Names load on first use (`cadence._lazy`), so reading the registry or an algorithm's
config imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "AlgStep",
    "Algorithm",
    "AlgorithmAgent",
    "AlgorithmCapabilities",
    "AlgorithmRegistration",
    "IterationResult",
    "LossInfo",
    "OffPolicyConfig",
    "OffPolicyScheme",
    "OnPolicySchedule",
    "OnPolicyScheme",
    "TrainingScheme",
    "UpdateResult",
    "algorithm_names",
    "build_algorithm",
    "make_replay_buffer",
    "register_algorithm",
    "reset_state",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AlgStep": "algorithm",
        "Algorithm": "algorithm",
        "AlgorithmAgent": "agent_view",
        "AlgorithmCapabilities": "registry",
        "AlgorithmRegistration": "registry",
        "IterationResult": "scheme",
        "LossInfo": "algorithm",
        "OffPolicyConfig": "off_policy_config",
        "OffPolicyScheme": "off_policy",
        "OnPolicySchedule": "on_policy",
        "OnPolicyScheme": "on_policy",
        "TrainingScheme": "scheme",
        "UpdateResult": "algorithm",
        "algorithm_names": "registry",
        "build_algorithm": "build",
        "make_replay_buffer": "off_policy",
        "register_algorithm": "registry",
        "reset_state": "algorithm",
    },
)
