"""Builders of the registered model-based algorithms (``dreamer``, ``denoised_mdp``, ``sac_latent``).

The ``network`` section of the experiment config does not apply: the world model and
the policy learners take their shapes from the algorithm's own config.
"""

from __future__ import annotations

from typing import Any

import torch

from cadence.data.specs import Spec
from cadence.mbrl.algorithm import ModelBasedAlgorithm
from cadence.mbrl.config import DenoisedMDPConfig, DreamerConfig, SACLatentConfig
from cadence.mbrl.policies import ImaginedActorCritic, LatentSAC
from cadence.mbrl.world_model import WorldModel


def make_model_based(
    config: DreamerConfig | DenoisedMDPConfig | SACLatentConfig,
    observation_spec: Spec,
    action_spec: Spec,
    network_config: Any = None,
) -> ModelBasedAlgorithm:
    """The world model of ``config.world_model`` and its policy learner.

    Raises:
        ValueError: an observation that is neither a vector nor a 64x64 image, or
            actions that are not a bounded Box.
    """
    world_model = WorldModel(observation_spec, action_spec, config.world_model)
    feature_size = world_model.rssm.feature_size(("x",))
    action_size = int(torch.Size(action_spec.shape).numel())
    eps = config.world_model.adam_eps
    if isinstance(config, SACLatentConfig):
        policy: ImaginedActorCritic | LatentSAC = LatentSAC(
            feature_size, action_size, config.sac, eps
        )
    else:
        policy = ImaginedActorCritic(feature_size, action_size, config.actor_critic, eps)
    algorithm = ModelBasedAlgorithm(world_model, policy, config.exploration_noise, config.eval_mode)
    return algorithm
