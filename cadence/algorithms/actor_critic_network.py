"""`ActorCriticNetwork`: a policy and a value function over one observation spec."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.networks import MLP, make_action_head, make_encoder


class ActorCriticNetwork(nn.Module):
    """An actor (encoder, MLP body, action head) and a critic (encoder, MLP, scalar).

    With ``config.share_encoder`` both read one observation encoder (as for
    images, where the CNN dominates the cost); otherwise each has its own.

    Args:
        observation_spec: the env's observation spec (vector, image or Dict).
        action_spec: the env's action spec (discrete or bounded continuous).
        config: a `cadence.networks.NetworkConfig`.
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, config: Any):
        super().__init__()
        self.actor_encoder = make_encoder(observation_spec, config)
        self.critic_encoder = (
            self.actor_encoder if config.share_encoder else make_encoder(observation_spec, config)
        )
        hidden = tuple(config.hidden_sizes)
        mlp = {
            "activation": config.activation,
            "layer_norm": config.layer_norm,
            "orthogonal_init": config.orthogonal_init,
        }
        self.actor_body = MLP(self.actor_encoder.output_dim, hidden, **mlp)
        self.action_head = make_action_head(
            self.actor_body.output_dim, action_spec, config.action_head, config.init_log_std
        )
        self.critic = MLP(self.critic_encoder.output_dim, hidden, out_dim=1, **mlp)

    def distribution(self, observation: Nest) -> torch.distributions.Distribution:
        """The policy at ``observation`` (a nest of ``[B, ...]``)."""
        return self.action_head(self.actor_body(self.actor_encoder(observation)))

    def value(self, observation: Nest) -> torch.Tensor:
        """The state value ``[B]``."""
        return self.critic(self.critic_encoder(observation)).squeeze(-1)
