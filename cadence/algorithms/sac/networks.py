"""SAC's networks: the policy and the critic ensemble, continuous or discrete by action spec.

- Continuous (a 1-D bounded spec): a `TanhNormalHead` policy over the action bounds and a
  `CriticEnsemble` ``Q_e(s, a)``, all members in one batched pass.
- Discrete (a scalar `DiscreteTensorSpec`): a categorical policy and `DiscreteCriticEnsemble`
  ``Q_e(s, ·)`` giving every action's value at once (Christodoulou 2019,
  https://arxiv.org/abs/1910.07207).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.distributions import Distribution

from cadence.data.errors import UnsupportedSpaceError
from cadence.data.nest import Nest
from cadence.data.specs import DiscreteTensorSpec, Spec
from cadence.networks.config import NetworkConfig
from cadence.networks.encoders import make_encoder
from cadence.networks.ensemble import EnsembleMLP
from cadence.networks.heads import make_action_head
from cadence.networks.mlp import ACTIVATIONS, MLP
from cadence.networks.value import CriticEnsemble


class SACActor(nn.Module):
    """The policy: observations ``[*B, ...]`` to a `TanhNormal` or `Categorical` over ``[*B]``.

    Args:
        observation_spec: the env's observation spec (any nest `make_encoder` takes).
        action_spec: a 1-D bounded spec or a scalar `DiscreteTensorSpec`.
        config: hidden sizes, activation, layer norm and init of the body.
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, config: NetworkConfig):
        super().__init__()
        self.encoder = make_encoder(observation_spec, config)
        self.body = MLP(
            self.encoder.output_dim,
            config.hidden_sizes,
            activation=config.activation,
            layer_norm=config.layer_norm,
            orthogonal_init=config.orthogonal_init,
        )
        self.head = make_action_head(self.body.output_dim, action_spec, "tanh_normal")

    def forward(self, observation: Nest) -> Distribution:
        return self.head(self.body(self.encoder(observation)))


class DiscreteCriticEnsemble(nn.Module):
    """E critics ``Q_e(s, ·)`` over ``num_actions`` discrete actions, in one batched pass.

    The observation encoder is shared; each member has its own MLP, stacked in an
    `EnsembleMLP` (one ``baddbmm`` per layer for all members).

    Args:
        encoder: an observation encoder with ``output_dim``.
        num_actions: the number of discrete actions.
        hidden_sizes: widths of each member's MLP.
        num_critics: the number of members E.
        activation, layer_norm, orthogonal_init: as for `EnsembleMLP`.

    >>> from cadence.data.specs import TensorSpec
    >>> critic = DiscreteCriticEnsemble(make_encoder(TensorSpec((4,))), 3, (32,))
    >>> critic(torch.zeros(8, 4)).shape
    torch.Size([2, 8, 3])
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        hidden_sizes: Sequence[int],
        num_critics: int = 2,
        activation: str | type[nn.Module] = "relu",
        layer_norm: bool = False,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        self.encoder = encoder
        self.num_critics = num_critics
        self.mlp = EnsembleMLP(
            encoder.output_dim,
            hidden_sizes,
            num_actions,
            num_critics,
            activation,
            layer_norm,
            orthogonal_init,
        )

    def forward(self, observation: Nest) -> torch.Tensor:
        """Q-values ``[E, *B, num_actions]`` of observations ``[*B, ...]``."""
        features = self.encoder(observation)
        return self.mlp(features.expand(self.num_critics, *features.shape))


class AbsReLU(nn.Module):
    """``max(x, 0)`` computed as ``(x + |x|) / 2`` (the same values; gradient 1/2 at exactly 0).

    Why: for a ReLU whose output is not otherwise kept for the backward pass (the critic
    evaluated with detached parameters in the actor loss), torch.compile's CPU code saves
    the ReLU mask as a bool tensor, and that store runs ~20x slower than the whole eager
    ReLU (torch 2.13). This form saves a float tensor instead. Used only when compiling.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + x.abs()) * 0.5


def make_critic(
    observation_spec: Spec,
    action_spec: Spec,
    config: NetworkConfig,
    num_critics: int,
    activation: type[nn.Module] | None = None,
) -> nn.Module:
    """The critic ensemble for ``action_spec``: `DiscreteCriticEnsemble` or `CriticEnsemble`.

    Args:
        observation_spec, action_spec: the env's specs.
        config: hidden sizes, activation, layer norm and init of each member.
        num_critics: ensemble members E.
        activation: overrides ``config.activation`` with a module class (e.g. `AbsReLU`).

    Raises:
        UnsupportedSpaceError: for action specs SAC does not handle (see
            `make_action_head`).
    """
    encoder = make_encoder(observation_spec, config)
    act = activation or ACTIVATIONS[config.activation]
    if isinstance(action_spec, DiscreteTensorSpec):
        if action_spec.shape != ():
            raise UnsupportedSpaceError(
                f"SAC takes a single discrete action (gymnasium Discrete), not shape "
                f"{action_spec.shape}; use PPO or A2C for MultiDiscrete or MultiBinary actions"
            )
        return DiscreteCriticEnsemble(
            encoder,
            action_spec.num_values,
            config.hidden_sizes,
            num_critics,
            act,
            config.layer_norm,
            config.orthogonal_init,
        )
    if len(action_spec.shape) != 1:
        raise UnsupportedSpaceError(f"SAC takes flat Box actions, not shape {action_spec.shape}")
    return CriticEnsemble(
        encoder,
        action_spec.shape[0],
        config.hidden_sizes,
        num_critics,
        act,
        config.layer_norm,
        config.orthogonal_init,
    )
