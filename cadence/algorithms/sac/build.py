"""`make_sac`: SAC from its config and the environment's specs."""

from __future__ import annotations

import math
from typing import Any

from cadence.algorithms.sac.algorithm import SACAlgorithm
from cadence.algorithms.sac.config import SACConfig
from cadence.algorithms.sac.networks import AbsReLU, SACActor, make_critic
from cadence.data.errors import UnsupportedSpaceError
from cadence.data.specs import CompositeSpec, DiscreteTensorSpec, Spec
from cadence.networks.config import NetworkConfig


def make_sac(
    config: SACConfig, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> SACAlgorithm:
    """SAC for ``action_spec``: tanh-Gaussian policy for a Box, categorical for a Discrete.

    Raises:
        ValueError: ``off_policy.mini_batch_length`` is not 2 (SAC learns from one-step
            transitions ``(s_t, a_t, r_t+1, s_t+1)``).
        UnsupportedSpaceError: an action spec SAC does not handle.
    """
    if config.off_policy.mini_batch_length != 2:
        raise ValueError(
            "SAC trains on one-step transitions: set algorithm.off_policy.mini_batch_length=2, "
            f"not {config.off_policy.mini_batch_length}"
        )
    if isinstance(action_spec, CompositeSpec):
        raise UnsupportedSpaceError(
            f"SAC takes a Box or a single Discrete action, not a Dict or Tuple of them "
            f"({action_spec!r}); use PPO or A2C, which take Dict and Tuple actions"
        )
    network_config = network_config or NetworkConfig()
    # See AbsReLU: a compiled ReLU in the detached-critic pass is slow on CPU.
    compiled_relu = config.compile != "off" and network_config.activation == "relu"
    sac = SACAlgorithm(
        SACActor(observation_spec, action_spec, network_config),
        make_critic(
            observation_spec,
            action_spec,
            network_config,
            config.num_critics,
            AbsReLU if compiled_relu else None,
        ),
        action_spec,
        gamma=config.gamma,
        tau=config.tau,
        actor_learning_rate=config.actor_learning_rate,
        critic_learning_rate=config.critic_learning_rate,
        alpha_learning_rate=config.alpha_learning_rate,
        initial_alpha=config.initial_alpha,
        autotune_alpha=config.autotune_alpha,
        target_entropy=default_target_entropy(config, action_spec),
        max_grad_norm=config.max_grad_norm,
    )
    return sac


def default_target_entropy(config: SACConfig, action_spec: Spec) -> float:
    """``config.target_entropy``, else ``-action_dim`` (continuous) or a fraction of
    ``log(num_actions)`` (discrete; Christodoulou 2019 uses 0.98)."""
    if config.target_entropy is not None:
        return float(config.target_entropy)
    if isinstance(action_spec, DiscreteTensorSpec):
        return config.target_entropy_fraction * math.log(action_spec.num_values)
    return -float(math.prod(action_spec.shape))
