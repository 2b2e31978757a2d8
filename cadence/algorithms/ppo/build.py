"""`make_ppo`: PPO from its config and the environment's specs."""

from __future__ import annotations

from typing import Any

from cadence.algorithms.actor_critic import ActorCriticAlgorithm
from cadence.algorithms.actor_critic_network import make_actor_critic_network
from cadence.algorithms.optimizers import make_adam
from cadence.algorithms.ppo.config import PPOConfig
from cadence.algorithms.ppo.loss import PPOLoss
from cadence.data.specs import Spec


def make_ppo(
    config: PPOConfig, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> ActorCriticAlgorithm:
    """PPO as an `ActorCriticAlgorithm` with the clipped loss (the run reads its minibatch
    epochs, ``config.num_updates_per_train_iter`` and ``config.mini_batch_size``, into an
    `OnPolicySchedule`)."""
    ppo = ActorCriticAlgorithm(
        make_actor_critic_network(observation_spec, action_spec, network_config),
        PPOLoss(config),
        lambda params: make_adam(params, config.learning_rate, eps=config.adam_eps),
        action_spec,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        learning_rate=config.learning_rate,
        lr_schedule=config.lr_schedule,
        max_grad_norm=config.max_grad_norm,
        target_kl=config.target_kl,
    )
    return ppo
