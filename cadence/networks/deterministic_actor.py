"""`DeterministicActor`: a policy ``mu(s)`` with tanh-bounded actions, for TD3 and DDPG.

The actor outputs *normalized* actions in ``[-1, 1]``; mapping them to the
environment's bounds is the algorithm's job (`cadence.algorithms.deterministic_actor_critic`),
so exploration noise, target smoothing and the critic all work in one unit
whatever the action range.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.networks.config import ActivationName
from cadence.networks.mlp import MLP


class DeterministicActor(nn.Module):
    """``tanh(MLP(encoder(s)))``: observations ``[*B, ...] -> [*B, action_dim]`` in ``[-1, 1]``.

    Args:
        encoder: an observation encoder with ``output_dim``.
        action_dim: the width of the (flat) action.
        hidden_sizes: widths of the MLP body.
        activation: as for `MLP`.
        layer_norm: as for `MLP`.
        orthogonal_init: as for `MLP`.

    >>> from cadence.data.specs import TensorSpec
    >>> from cadence.networks.encoders import make_encoder
    >>> actor = DeterministicActor(make_encoder(TensorSpec((3,))), 2, (64, 64))
    >>> actor(torch.zeros(8, 3)).shape
    torch.Size([8, 2])
    """

    def __init__(
        self,
        encoder: nn.Module,
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: ActivationName | type[nn.Module] = "relu",
        layer_norm: bool = False,
        orthogonal_init: bool = False,
    ):
        super().__init__()
        self.encoder = encoder
        self.action_dim = action_dim
        self.mlp = MLP(
            encoder.output_dim, hidden_sizes, action_dim, activation, layer_norm, orthogonal_init
        )

    def forward(self, observation: Nest) -> torch.Tensor:
        return torch.tanh(self.mlp(self.encoder(observation)))
