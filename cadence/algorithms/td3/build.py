"""`make_td3`: TD3 from its config and the environment's specs."""

from __future__ import annotations

from cadence.algorithms.deterministic_actor_critic import (
    DeterministicActorCritic,
    make_deterministic_actor_critic,
)
from cadence.algorithms.td3.config import TD3Config
from cadence.algorithms.td3.smoothing import TargetPolicySmoothing
from cadence.data.specs import Spec
from cadence.networks.config import NetworkConfig


def make_td3(
    config: TD3Config, observation_spec: Spec, action_spec: Spec, network_config: NetworkConfig
) -> DeterministicActorCritic:
    """TD3 as a `DeterministicActorCritic` composed of its three parts: an ensemble of
    ``num_critics`` critics (bootstrapping from their minimum), `TargetPolicySmoothing`,
    and actor and target updates every ``policy_delay`` critic updates."""
    return make_deterministic_actor_critic(
        config,
        observation_spec,
        action_spec,
        network_config,
        num_critics=config.num_critics,
        policy_delay=config.policy_delay,
        target_action_noise=TargetPolicySmoothing(
            config.target_policy_noise, config.target_noise_clip
        ),
    )
