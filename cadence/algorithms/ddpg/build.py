"""`make_ddpg`: DDPG from its config and the environment's specs."""

from __future__ import annotations

from cadence.algorithms.ddpg.config import DDPGConfig
from cadence.algorithms.deterministic_actor_critic import (
    DeterministicActorCritic,
    make_deterministic_actor_critic,
)
from cadence.data.specs import Spec
from cadence.networks.config import NetworkConfig


def make_ddpg(
    config: DDPGConfig, observation_spec: Spec, action_spec: Spec, network_config: NetworkConfig
) -> DeterministicActorCritic:
    """DDPG as a `DeterministicActorCritic` with one critic, bootstrapping from the target
    actor's action as it is, and the actor and targets updated with every critic update."""
    return make_deterministic_actor_critic(config, observation_spec, action_spec, network_config)
