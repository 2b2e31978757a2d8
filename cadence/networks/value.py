"""Value networks: state values V(s), discrete Q(s, ·), and continuous Q(s, a) ensembles.

Each takes an observation encoder (from `make_encoder`) so that images, vectors
and Dicts all work, and an MLP body of ``hidden_sizes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.networks.config import ActivationName
from cadence.networks.ensemble import EnsembleMLP, ensemble_matmul
from cadence.networks.mlp import MLP


class ValueNetwork(nn.Module):
    """A state value ``V(s)``: observations ``[*B, ...] -> [*B]``.

    Args:
        encoder: an observation encoder with ``output_dim``.
        hidden_sizes: widths of the MLP body.
        activation: as for `MLP`.
        layer_norm: as for `MLP`.
        orthogonal_init: as for `MLP`.

    >>> from cadence.data.specs import TensorSpec
    >>> from cadence.networks.encoders import make_encoder
    >>> ValueNetwork(make_encoder(TensorSpec((4,))), (64, 64))(torch.zeros(8, 4)).shape
    torch.Size([8])
    """

    def __init__(
        self,
        encoder: nn.Module,
        hidden_sizes: Sequence[int],
        activation: ActivationName | type[nn.Module] = "tanh",
        layer_norm: bool = False,
        orthogonal_init: bool = True,
    ):
        super().__init__()
        self.encoder = encoder
        self.mlp = MLP(encoder.output_dim, hidden_sizes, 1, activation, layer_norm, orthogonal_init)

    def forward(self, observation: Nest) -> torch.Tensor:
        return self.mlp(self.encoder(observation)).squeeze(-1)


class QNetwork(nn.Module):
    """Action values of a discrete action set: observations ``[*B, ...] -> [*B, num_actions]``.

    Args:
        encoder: an observation encoder with ``output_dim``.
        num_actions: the number of discrete actions.
        hidden_sizes: widths of the MLP body.
        activation: as for `MLP`.
        layer_norm: as for `MLP`.
        orthogonal_init: as for `MLP`.
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        hidden_sizes: Sequence[int],
        activation: ActivationName | type[nn.Module] = "relu",
        layer_norm: bool = False,
        orthogonal_init: bool = True,
    ):
        super().__init__()
        self.encoder = encoder
        self.mlp = MLP(
            encoder.output_dim, hidden_sizes, num_actions, activation, layer_norm, orthogonal_init
        )

    def forward(self, observation: Nest) -> torch.Tensor:
        return self.mlp(self.encoder(observation))


class CriticEnsemble(nn.Module):
    """E critics ``Q_e(s, a)`` of continuous actions, computed in one batched pass.

    The observation encoder is shared by all members (for images this is
    DrQ's choice, Kostrikov et al. 2020, https://arxiv.org/abs/2004.13649);
    each member has its own MLP over ``[features, action]``, stacked in an
    `EnsembleMLP`. SAC and TD3 take ``num_critics=2`` and the minimum over
    dim 0 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477).

    Args:
        encoder: an observation encoder with ``output_dim``.
        action_dim: the width of the (flat) action.
        hidden_sizes: widths of each member's MLP.
        num_critics: the number of members E.
        activation: as for `EnsembleMLP`.
        layer_norm: as for `EnsembleMLP`.
        orthogonal_init: as for `EnsembleMLP`.

    >>> from cadence.data.specs import TensorSpec
    >>> from cadence.networks.encoders import make_encoder
    >>> critic = CriticEnsemble(make_encoder(TensorSpec((3,))), 2, (256, 256))
    >>> critic(torch.zeros(8, 3), torch.zeros(8, 2)).shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        encoder: nn.Module,
        action_dim: int,
        hidden_sizes: Sequence[int],
        num_critics: int = 2,
        activation: ActivationName | type[nn.Module] = "relu",
        layer_norm: bool = False,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        self.encoder = encoder
        self.num_critics = num_critics
        self.mlp = EnsembleMLP(
            encoder.output_dim + action_dim,
            hidden_sizes,
            1,
            num_critics,
            activation,
            layer_norm,
            orthogonal_init,
        )

    def forward(
        self, observation: Nest, action: torch.Tensor, detach_parameters: bool = False
    ) -> torch.Tensor:
        """Q-values ``[E, *B]`` of observations ``[*B, ...]`` and actions ``[*B, action_dim]``.

        ``detach_parameters``: no gradient reaches the critics' parameters (encoder
        included), only ``action``: what an actor loss through the critics needs.
        """
        features = self.encoder(observation)
        if detach_parameters:
            features = features.detach()
        inputs = torch.cat([features, action.float()], dim=-1)
        inputs = inputs.expand(self.num_critics, *inputs.shape)
        return self.mlp(inputs, detach_parameters).squeeze(-1)

    def with_policy_actions(
        self, observation: Nest, action: torch.Tensor, policy_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``self(observation, action)`` and ``self(observation, policy_action,
        detach_parameters=True)``, both ``[E, N]``, sharing their observation work.

        The first layer's observation part ``features @ W_obs`` is the same for both, so
        it is computed once (its detached copy serves the policy's pass, whose gradient
        then reaches ``policy_action`` only, as with ``detach_parameters``), and the first
        layer takes each action through ``W_act`` alone; the policy's backward pass thus
        skips the gradient of the (detached) features.

        Args:
            observation: ``[N, ...]``.
            action: ``[N, action_dim]``, e.g. the replayed actions.
            policy_action: ``[N, action_dim]``, e.g. the policy's reparameterised actions.
        """
        first = self.mlp[0]
        features = self.encoder(observation)
        num_features = features.shape[-1]
        expand = (self.num_critics, *features.shape[:-1], -1)
        weight_obs, weight_act = first.weight[:, :num_features], first.weight[:, num_features:]
        shared = ensemble_matmul(features.expand(expand), weight_obs) + first.bias
        hidden = shared + ensemble_matmul(action.float().expand(expand), weight_act)
        policy_hidden = shared.detach() + ensemble_matmul(
            policy_action.float().expand(expand), weight_act.detach()
        )
        q = self.mlp(hidden, start=1).squeeze(-1)
        q_policy = self.mlp(policy_hidden, detach_parameters=True, start=1).squeeze(-1)
        return q, q_policy
