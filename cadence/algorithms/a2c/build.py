"""`make_a2c`: A2C from its config and the environment's specs."""

from __future__ import annotations

from typing import Any

import torch

from cadence.algorithms.a2c.config import A2CConfig
from cadence.algorithms.a2c.loss import A2CLoss
from cadence.algorithms.actor_critic import ActorCriticAlgorithm
from cadence.algorithms.actor_critic_network import make_actor_critic_network
from cadence.algorithms.optimizers import make_adam
from cadence.data.specs import Spec


def make_a2c(
    config: A2CConfig, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> ActorCriticAlgorithm:
    """A2C as an `ActorCriticAlgorithm`: one gradient step on each whole unroll (its
    config has no schedule fields, so the run's `OnPolicySchedule` is the default)."""
    a2c = ActorCriticAlgorithm(
        make_actor_critic_network(observation_spec, action_spec, network_config),
        A2CLoss(config),
        lambda params: _optimizer(config, params),
        action_spec,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        learning_rate=config.learning_rate,
        lr_schedule=config.lr_schedule,
        max_grad_norm=config.max_grad_norm,
    )
    return a2c


def _optimizer(config: A2CConfig, params: Any) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return make_adam(params, config.learning_rate, eps=config.optimizer_eps)
    # RMSprop with alpha 0.99 as in the paper and Stable-Baselines3.
    # foreach: all parameters at once; per-tensor updates dominate small networks' steps.
    return torch.optim.RMSprop(
        params, lr=config.learning_rate, alpha=0.99, eps=config.optimizer_eps, foreach=True
    )
