"""The actor-critic networks of PPO and A2C: feed-forward, or with a recurrent core.

`make_actor_critic_network` picks one from ``network.recurrent``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.networks import MLP, RecurrentCore, make_action_head, make_encoder

RecurrentStates = dict[str, dict[str, torch.Tensor]]
"""A `RecurrentActorCriticNetwork`'s state: one `RecurrentCore` state per core, by name."""


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
        self.actor_body, self.action_head, self.critic = _heads(
            self.actor_encoder.output_dim, self.critic_encoder.output_dim, action_spec, config
        )

    def distribution(self, observation: Nest) -> torch.distributions.Distribution:
        """The policy at ``observation`` (a nest of ``[B, ...]``)."""
        return self.action_head(self.actor_body(self.actor_encoder(observation)))

    def value(self, observation: Nest) -> torch.Tensor:
        """The state value ``[B]``."""
        return self.critic(self.critic_encoder(observation)).squeeze(-1)

    def distribution_and_value(
        self, observation: Nest
    ) -> tuple[torch.distributions.Distribution, torch.Tensor]:
        """`distribution` and `value` at ``observation``, a shared encoder run once (the
        update's forward pass: on Atari frames the CNN is most of its cost)."""
        features = self.actor_encoder(observation)
        critic_features = (
            features
            if self.critic_encoder is self.actor_encoder
            else self.critic_encoder(observation)
        )
        distribution = self.action_head(self.actor_body(features))
        return distribution, self.critic(critic_features).squeeze(-1)


class RecurrentActorCriticNetwork(nn.Module):
    """An actor and a critic that see the observations through a GRU or LSTM core.

    Actor: encoder, core, MLP body, action head; critic: encoder, core, MLP, scalar. With
    ``config.share_encoder`` both read one encoder and one core (state ``{"core"}``);
    otherwise each has its own (state ``{"actor", "critic"}``), and acting steps both,
    so that the critic's memory is there when training recomputes the values.

    Args:
        observation_spec: the env's observation spec (vector, image or Dict).
        action_spec: the env's action spec (discrete or bounded continuous).
        config: a `cadence.networks.NetworkConfig` with ``recurrent`` ``"gru"`` or ``"lstm"``.

    >>> from cadence.data.specs import DiscreteTensorSpec, TensorSpec
    >>> from cadence.networks import NetworkConfig
    >>> network = RecurrentActorCriticNetwork(
    ...     TensorSpec((2,)), DiscreteTensorSpec((), torch.int64, 2), NetworkConfig(recurrent="gru"))
    >>> state = network.initial_state(3)
    >>> distribution, state = network.step(torch.zeros(3, 2), state)
    >>> distribution.sample().shape, sorted(state)
    (torch.Size([3]), ['actor', 'critic'])
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, config: Any):
        super().__init__()
        shared = config.share_encoder
        self.actor_encoder = make_encoder(observation_spec, config)
        self.actor_core = _core(self.actor_encoder.output_dim, config)
        self.critic_encoder = (
            self.actor_encoder if shared else make_encoder(observation_spec, config)
        )
        self.critic_core = (
            self.actor_core if shared else _core(self.critic_encoder.output_dim, config)
        )
        self._actor_key, self._critic_key = ("core", "core") if shared else ("actor", "critic")
        self.actor_body, self.action_head, self.critic = _heads(
            self.actor_core.output_dim, self.critic_core.output_dim, action_spec, config
        )

    def initial_state(self, batch_size: int) -> RecurrentStates:
        """Zeros: the state of ``batch_size`` new episodes."""
        state = {self._actor_key: self.actor_core.initial_state(batch_size)}
        state[self._critic_key] = self.critic_core.initial_state(batch_size)
        return state

    def step(
        self, observation: Nest, state: RecurrentStates
    ) -> tuple[torch.distributions.Distribution, RecurrentStates]:
        """The policy at ``observation`` (``[B, ...]``) after ``state``, and the next state."""
        features, actor_state = self.actor_core.step(
            self.actor_encoder(observation), state[self._actor_key]
        )
        next_state = {self._actor_key: actor_state}
        if self._critic_key not in next_state:
            _, next_state[self._critic_key] = self.critic_core.step(
                self.critic_encoder(observation), state[self._critic_key]
            )
        return self.action_head(self.actor_body(features)), next_state

    def unroll(
        self, observation: Nest, first: torch.Tensor, state: RecurrentStates
    ) -> tuple[torch.distributions.Distribution, torch.Tensor]:
        """The policy and the value ``[B, T]`` along sequences ``[B, T, ...]``.

        Args:
            observation: a nest of ``[B, T, ...]``.
            first: ``[B, T]`` bool, where the state resets to the initial state.
            state: the state before step 0.
        """
        actor, _ = self.actor_core.unroll(
            self.actor_encoder(observation), first, state[self._actor_key]
        )
        policy = self.action_head(self.actor_body(actor))
        if self._critic_key == self._actor_key:  # one core: its features feed the critic too
            return policy, self.critic(actor).squeeze(-1)
        return policy, self.unroll_value(observation, first, state)

    def unroll_value(
        self, observation: Nest, first: torch.Tensor, state: RecurrentStates
    ) -> torch.Tensor:
        """The value ``[B, T]`` along sequences (arguments as `unroll`)."""
        features, _ = self.critic_core.unroll(
            self.critic_encoder(observation), first, state[self._critic_key]
        )
        return self.critic(features).squeeze(-1)


def make_actor_critic_network(
    observation_spec: Spec, action_spec: Spec, config: Any
) -> ActorCriticNetwork | RecurrentActorCriticNetwork:
    """The feed-forward network, or the recurrent one when ``config.recurrent`` names a core."""
    if config.recurrent == "none":
        return ActorCriticNetwork(observation_spec, action_spec, config)
    return RecurrentActorCriticNetwork(observation_spec, action_spec, config)


def _core(in_dim: int, config: Any) -> RecurrentCore:
    return RecurrentCore(in_dim, config.recurrent_size, config.recurrent, config.orthogonal_init)


def _heads(
    actor_dim: int, critic_dim: int, action_spec: Spec, config: Any
) -> tuple[MLP, nn.Module, MLP]:
    """The actor's MLP body and action head, and the critic's MLP to a scalar."""
    hidden = tuple(config.hidden_sizes)
    mlp = {
        "activation": config.activation,
        "layer_norm": config.layer_norm,
        "orthogonal_init": config.orthogonal_init,
    }
    actor_body = MLP(actor_dim, hidden, **mlp)
    action_head = make_action_head(
        actor_body.output_dim, action_spec, config.action_head, config.init_log_std
    )
    return actor_body, action_head, MLP(critic_dim, hidden, out_dim=1, **mlp)
