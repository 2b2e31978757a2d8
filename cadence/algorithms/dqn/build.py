"""`make_dqn`: DQN from its config and the environment's specs."""

from __future__ import annotations

from typing import Any

from cadence.algorithms.dqn.algorithm import DQNAlgorithm
from cadence.algorithms.dqn.config import DQNConfig
from cadence.data.errors import UnsupportedSpaceError
from cadence.data.specs import DiscreteTensorSpec, Spec
from cadence.networks import QNetwork, make_encoder


def make_dqn(
    config: DQNConfig, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> DQNAlgorithm:
    """DQN with a `QNetwork` over any observation the encoders take (vector, image, Dict).

    Raises:
        UnsupportedSpaceError: the actions are not one discrete choice (DQN needs
            ``argmax_a``).
    """
    if not isinstance(action_spec, DiscreteTensorSpec) or action_spec.shape != ():
        raise UnsupportedSpaceError(
            f"DQN needs a single discrete action (gymnasium Discrete), got {action_spec}; "
            "use PPO or A2C for MultiDiscrete, MultiBinary, Dict or Tuple actions, SAC, TD3 or "
            "DDPG for continuous ones"
        )
    q_network = QNetwork(
        make_encoder(observation_spec, network_config),
        action_spec.num_values,
        tuple(network_config.hidden_sizes),
        activation=network_config.activation,
        layer_norm=network_config.layer_norm,
        orthogonal_init=network_config.orthogonal_init,
    )
    return DQNAlgorithm(q_network, config)
