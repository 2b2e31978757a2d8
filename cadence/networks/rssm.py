"""`RSSM`: a recurrent state-space model whose latent is split into groups (Hafner et al. 2019,
"Learning Latent Dynamics for Planning from Pixels"; Wang et al. 2022, "Denoised MDPs").

Each group g has a deterministic GRU "belief" h_g and a diagonal-Gaussian stochastic
"state" s_g (std = softplus + ``min_std``). One step from the previous latent and action:

    h_g,t = GRU_g(h_g,t-1, embed(prior inputs of g))        prior  p(s_g,t | h_g,t)
                                                            posterior q(s_g,t | h_g,t, e(o_t))

The groups differ only in what their prior sees (Denoised MDP's table):

| group | prior input | meaning |
|---|---|---|
| x | previous x state, action | controllable, reward-relevant; the policy's only input |
| y | previous y state | uncontrollable, reward-relevant (the action cannot move it) |
| z | previous x state, previous z state, action (optionally previous y state) | the rest |

With ``joint_posterior`` x and y share one posterior network, q(s_x,t, s_y,t | h_x,t, h_y,t,
e(o_t)), as in the Denoised MDP reference. With y and z absent it is Dreamer's RSSM. A latent is a flat dict
``{"x_belief", "x_state", "y_belief", ...}`` of ``[B, size]`` tensors (the recurrent state
the collector carries); all zeros is the state before an episode's first observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from cadence.networks.linear import GRUCell, Linear

Latent = dict[str, torch.Tensor]
"""``{"<g>_belief": [B, belief_size], "<g>_state": [B, state_size]}`` for every group g."""

GROUPS = ("x", "y", "z")


class Gaussian(NamedTuple):
    """A diagonal Gaussian ``[*B, size]``."""

    mean: torch.Tensor
    std: torch.Tensor

    def rsample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.std)


def gaussian_kl(posterior: Gaussian, prior: Gaussian) -> torch.Tensor:
    """``KL(posterior || prior)`` summed over the last dim: ``[*B, size] -> [*B]`` (analytic)."""
    variance_ratio = (posterior.std / prior.std).square()
    mean_term = ((posterior.mean - prior.mean) / prior.std).square()
    return 0.5 * (variance_ratio + mean_term - 1 - variance_ratio.log()).sum(-1)


class GroupSizes(NamedTuple):
    belief: int
    state: int


def _gaussian(raw: torch.Tensor, min_std: float) -> Gaussian:
    mean, std = raw.chunk(2, -1)
    return Gaussian(mean, F.softplus(std) + min_std)


class _Group(nn.Module):
    """One latent group's transition: input layer, GRU cell and prior head."""

    def __init__(
        self,
        input_size: int,
        sizes: GroupSizes,
        hidden_size: int,
        activation: type[nn.Module],
        min_std: float,
    ):
        super().__init__()
        self.min_std = min_std
        self.input = nn.Sequential(Linear(input_size, hidden_size), activation())
        self.cell = GRUCell(hidden_size, sizes.belief)
        self.prior = nn.Sequential(
            Linear(sizes.belief, hidden_size),
            activation(),
            Linear(hidden_size, 2 * sizes.state),
        )

    def step_belief(self, belief: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        return self.cell(self.input(inputs), belief)

    def prior_of(self, belief: torch.Tensor) -> Gaussian:
        return _gaussian(self.prior(belief), self.min_std)


class _Posterior(nn.Module):
    """The posterior of one or more groups from their beliefs and the observation embedding:
    one hidden layer over all of them, one Gaussian per group out. Over x and y together it
    is the Denoised MDP reference's joint posterior, which can explain an observed signal by
    either group.

    The first layer is split into one part per belief and one for the embedding, so a
    sequence's embeddings are projected in one matrix multiply before the time loop.
    """

    def __init__(
        self,
        groups: dict[str, GroupSizes],
        hidden_size: int,
        embedding_size: int,
        activation: type[nn.Module],
        min_std: float,
    ):
        super().__init__()
        self.min_std = min_std
        self.beliefs = nn.ModuleDict(
            {g: Linear(sizes.belief, hidden_size, bias=False) for g, sizes in groups.items()}
        )
        self.embedding = Linear(embedding_size, hidden_size)
        self.head = nn.Sequential(
            activation(), Linear(hidden_size, 2 * sum(s.state for s in groups.values()))
        )
        self.splits = [2 * sizes.state for sizes in groups.values()]

    def forward(
        self, beliefs: dict[str, torch.Tensor], projected_embedding: torch.Tensor
    ) -> dict[str, Gaussian]:
        """Each group's posterior from ``beliefs`` and ``self.embedding(embedding)``."""
        hidden = projected_embedding
        for g, layer in self.beliefs.items():
            hidden = hidden + layer(beliefs[g])
        raw = self.head(hidden).split(self.splits, -1)
        return {g: _gaussian(part, self.min_std) for g, part in zip(self.beliefs, raw, strict=True)}


_OLD_POSTERIOR_KEYS = {
    "posterior_belief.weight": "beliefs.{g}.weight",
    "posterior_embedding.weight": "embedding.weight",
    "posterior_embedding.bias": "embedding.bias",
    "posterior.1.weight": "head.1.weight",
    "posterior.1.bias": "head.1.bias",
}


def _rename_per_group_posteriors(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Loads a checkpoint written before the posteriors were modules of their own (each
    group's posterior layers were then its ``_Group``'s): renames their keys in place."""
    for key in [k for k in state_dict if k.startswith(f"{prefix}groups.")]:
        group, rest = key[len(f"{prefix}groups.") :].split(".", 1)
        if rest in _OLD_POSTERIOR_KEYS:
            new = _OLD_POSTERIOR_KEYS[rest].format(g=group)
            state_dict[f"{prefix}posteriors.{group}.{new}"] = state_dict.pop(key)


class Observed(NamedTuple):
    """An RSSM filtered over sequences ``[B, L]``.

    Attributes:
        latent: the posterior latent at every step, leaves ``[B, L, size]`` (samples).
        priors, posteriors: per group, the Gaussians ``[B, L, state_size]``.
        last: the posterior latent after the last step, leaves ``[B, size]``.
    """

    latent: Latent
    priors: dict[str, Gaussian]
    posteriors: dict[str, Gaussian]
    last: Latent


class RSSM(nn.Module):
    """The grouped RSSM (see the module docstring).

    Args:
        action_size: the flat action size.
        embedding_size: the observation embedding size.
        groups: ``{"x": GroupSizes, "y": ..., "z": ...}``; x is required, y and z optional.
        hidden_size: width of each group's input, prior and posterior layers.
        min_std: added to the softplus of every std (0.1 in the papers).
        activation: ``"elu"`` or ``"relu"``.
        z_prior_uses_y: z's prior also sees the previous y state.
        joint_posterior: x and y share one posterior network (the Denoised MDP reference's),
            which sees both beliefs; otherwise each group's posterior sees its own belief.
    """

    def __init__(
        self,
        action_size: int,
        embedding_size: int,
        groups: dict[str, GroupSizes],
        hidden_size: int = 200,
        min_std: float = 0.1,
        activation: str = "elu",
        z_prior_uses_y: bool = False,
        joint_posterior: bool = False,
    ):
        super().__init__()
        if "x" not in groups or set(groups) - set(GROUPS):
            raise ValueError(f"groups must hold 'x' and optionally 'y', 'z'; got {sorted(groups)}")
        self.action_size = action_size
        self.sizes = {g: groups[g] for g in GROUPS if g in groups}
        self.z_prior_uses_y = z_prior_uses_y and "y" in groups
        act = {"elu": nn.ELU, "relu": nn.ReLU}[activation]
        self.groups = nn.ModuleDict(
            {
                g: _Group(self._input_size(g), sizes, hidden_size, act, min_std)
                for g, sizes in self.sizes.items()
            }
        )
        joint = ("x", "y") if joint_posterior and "y" in groups else None
        parts = [joint] if joint else []
        parts += [(g,) for g in self.sizes if not joint or g not in joint]
        self.register_load_state_dict_pre_hook(_rename_per_group_posteriors)
        self.posteriors = nn.ModuleDict(
            {
                "".join(part): _Posterior(
                    {g: self.sizes[g] for g in part}, hidden_size, embedding_size, act, min_std
                )
                for part in parts
            }
        )

    # ---------------------------------------------------------------- structure
    def prior_inputs(self, group: str) -> tuple[str, ...]:
        """What group ``group``'s prior is conditioned on (its row of the table)."""
        if group == "x":
            return ("x_state", "action")
        if group == "y":
            return ("y_state",)
        return ("x_state", "z_state", "action") + (("y_state",) if self.z_prior_uses_y else ())

    def _input_size(self, group: str) -> int:
        return sum(
            self.action_size if name == "action" else self.sizes[name[0]].state
            for name in self.prior_inputs(group)
        )

    def feature_size(self, groups: Sequence[str] = ("x",)) -> int:
        return sum(self.sizes[g].belief + self.sizes[g].state for g in groups if g in self.sizes)

    @staticmethod
    def features(latent: Latent, groups: Sequence[str] = ("x",)) -> torch.Tensor:
        """``cat(belief, state)`` of ``groups`` (those present), ``[*B, feature_size]``."""
        parts = [
            latent[f"{g}_{part}"]
            for g in groups
            for part in ("belief", "state")
            if f"{g}_belief" in latent
        ]
        return torch.cat(parts, -1)

    def initial_latent(self, batch_size: int, device: torch.device | str | None = None) -> Latent:
        """The all-zero latent of ``batch_size`` sequences before their first observation."""
        return {
            f"{g}_{part}": torch.zeros(batch_size, getattr(sizes, part), device=device)
            for g, sizes in self.sizes.items()
            for part in ("belief", "state")
        }

    # --------------------------------------------------------------------- steps
    def _inputs(self, group: str, latent: Latent, action: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            [action if name == "action" else latent[name] for name in self.prior_inputs(group)], -1
        )

    def _input_weights(
        self, group: str
    ) -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor | None]:
        """``group``'s input-layer weight split by prior input: the columns of each previous
        state, ``[(latent key, [hidden, size])]``, and the action's (None if it has none)."""
        weight = self.groups[group].input[0].weight
        states, action_weight, start = [], None, 0
        for name in self.prior_inputs(group):
            width = self.action_size if name == "action" else self.sizes[name[0]].state
            columns = weight[:, start : start + width]
            if name == "action":
                action_weight = columns
            else:
                states.append((name, columns))
            start += width
        return states, action_weight

    def transition(
        self, latent: Latent, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], dict[str, Gaussian]]:
        """Every group's new belief and prior from the previous ``latent`` and ``action``."""
        beliefs = self._beliefs(latent, action)
        return beliefs, {g: self.groups[g].prior_of(b) for g, b in beliefs.items()}

    def _beliefs(self, latent: Latent, action: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            g: group.step_belief(latent[f"{g}_belief"], self._inputs(g, latent, action))
            for g, group in self.groups.items()
        }

    def project_embedding(self, embedding: torch.Tensor) -> dict[str, torch.Tensor]:
        """The embedding's share of each posterior network's first layer."""
        return {name: net.embedding(embedding) for name, net in self.posteriors.items()}

    def posterior(
        self, beliefs: dict[str, torch.Tensor], projected: dict[str, torch.Tensor]
    ) -> dict[str, Gaussian]:
        """Every group's posterior from its new belief and ``project_embedding(embedding)``."""
        gaussians = {}
        for name, net in self.posteriors.items():
            gaussians.update(net(beliefs, projected[name]))
        return gaussians

    def observe_step(
        self, latent: Latent, action: torch.Tensor, embedding: torch.Tensor, sample: bool = True
    ) -> Latent:
        """One filtering step (acting): the posterior latent, sampled or its mean."""
        beliefs = self._beliefs(latent, action)
        posteriors = self.posterior(beliefs, self.project_embedding(embedding))
        new = {}
        for g, belief in beliefs.items():
            new[f"{g}_belief"] = belief
            new[f"{g}_state"] = posteriors[g].rsample() if sample else posteriors[g].mean
        return new

    def observe(
        self,
        embedding: torch.Tensor,
        prev_action: torch.Tensor,
        first: torch.Tensor,
        latent: Latent | None = None,
    ) -> Observed:
        """Filters sequences: ``embedding`` ``[B, L, E]`` of o_t, ``prev_action`` ``[B, L, A]``
        (a_{t-1}), ``first`` ``[B, L]`` (True where step t starts an episode: the previous
        latent and action are zeroed there), ``latent`` the state before step 0 (None: zeros).

        Only what feeds the next step runs in the time loop: per group one matmul of the
        previous states into the input layer, the GRU cell, and the posterior. What does
        not depend on the loop is done once for all steps before it (the action's share of
        the input layers, the embeddings' share of the posteriors, the posterior noise) or
        after it (the priors); the latent is masked only at steps where some sequence
        starts an episode (at every step when compiled).
        """
        batch, length = embedding.shape[:2]
        latent = self.initial_latent(batch, embedding.device) if latent is None else latent
        keep = (~first).unsqueeze(-1).to(embedding.dtype)
        # Compiled, every step masks: reading which steps reset would break the graph and
        # recompile it for every pattern of episode starts.
        compiling = torch.compiler.is_compiling()
        resets = range(length) if compiling else set(first.any(0).nonzero().flatten().tolist())
        prev_action = prev_action * keep
        plans, base = {}, {}
        for g, group in self.groups.items():
            plans[g], action_weight = self._input_weights(g)
            layer = group.input[0]
            base[g] = (
                [layer.bias.expand(batch, -1)] * length
                if action_weight is None
                else F.linear(prev_action, action_weight, layer.bias).unbind(1)
            )
        projected = {
            name: part.unbind(1) for name, part in self.project_embedding(embedding).items()
        }
        noise = {
            g: torch.randn(batch, length, sizes.state, device=embedding.device).unbind(1)
            for g, sizes in self.sizes.items()
        }
        steps: list[Latent] = []
        means: dict[str, list[torch.Tensor]] = {g: [] for g in self.groups}
        stds: dict[str, list[torch.Tensor]] = {g: [] for g in self.groups}
        for t in range(length):
            if t in resets:
                latent = {key: value * keep[:, t] for key, value in latent.items()}
            beliefs = {}
            for g, group in self.groups.items():
                pre = base[g][t]
                for name, weight in plans[g]:
                    pre = torch.addmm(pre, latent[name], weight.t())
                beliefs[g] = group.cell(group.input[1](pre), latent[f"{g}_belief"])
            posteriors = self.posterior(beliefs, {n: p[t] for n, p in projected.items()})
            new = {}
            for g, (mean, std) in posteriors.items():
                new[f"{g}_belief"] = beliefs[g]
                new[f"{g}_state"] = torch.addcmul(mean, std, noise[g][t])
                means[g].append(mean)
                stds[g].append(std)
            latent = new
            steps.append(latent)
        stacked = {key: torch.stack([s[key] for s in steps], 1) for key in latent}
        priors = {g: group.prior_of(stacked[f"{g}_belief"]) for g, group in self.groups.items()}
        posteriors = {
            g: Gaussian(torch.stack(means[g], 1), torch.stack(stds[g], 1)) for g in self.groups
        }
        return Observed(stacked, priors, posteriors, latent)

    def imagine_step(
        self, latent: Latent, action: torch.Tensor, groups: Sequence[str] = ("x",)
    ) -> Latent:
        """One step of the prior dynamics of ``groups`` (a sample), e.g. x alone in imagination
        (x's prior needs only x). Groups not named are left out of the result."""
        new = {}
        for g in groups:
            group = self.groups[g]
            belief = group.step_belief(latent[f"{g}_belief"], self._inputs(g, latent, action))
            new[f"{g}_belief"], new[f"{g}_state"] = belief, group.prior_of(belief).rsample()
        return new
