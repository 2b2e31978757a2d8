"""`RSSM`: a recurrent state-space model whose latent is split into groups (Hafner et al. 2019,
"Learning Latent Dynamics for Planning from Pixels"; Wang et al. 2022, "Denoised MDPs").

Each group g has a deterministic GRU "belief" h_g and a diagonal-Gaussian stochastic
"state" s_g (std = softplus + ``min_std``). One step from the previous latent and action:

    h_g,t = GRU_g(h_g,t-1, embed(prior inputs of g))        prior  p(s_g,t | h_g,t)
                                                            posterior q(s_g,t | h_g,t, e(o_t))

The groups differ only in what they read. With ``z_inputs="original"`` (the Denoised MDP
code's structure, `WorldModelConfig`'s default):

| group | prior input | posterior input (beside the embedding) |
|---|---|---|
| x | previous x state, action | x belief (and y's when joint), previous z belief and state |
| y | previous y state | y belief (and x's when joint), previous z belief and state |
| z | current x belief and state, previous z state, action (optionally current y belief and state) | x, y, z beliefs, x and y states |

With ``z_inputs="cadence"`` (cadence's earlier structure) z's prior reads the previous x
state, the previous z state and the action (optionally the previous y state), and each
posterior reads only its own groups' beliefs. x is controllable and reward-relevant (the
policy's only input), y uncontrollable and reward-relevant (the action cannot move it),
z the rest.

With ``joint_posterior`` x and y share one posterior network, q(s_x,t, s_y,t | h_x,t, h_y,t,
e(o_t), ...), as in the Denoised MDP original. With ``layer_widths="belief"`` each group's
layers are as wide as its belief (a joint posterior's: the sum of the two beliefs), else all
``hidden_size`` wide. With y and z absent it is Dreamer's RSSM. A latent is a flat dict
``{"x_belief", "x_state", "y_belief", ...}`` of ``[B, size]`` tensors (the recurrent state
the collector carries); all zeros is the state before an episode's first observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from cadence.networks.linear import Linear

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
        input_layers: int = 1,
    ):
        super().__init__()
        self.min_std = min_std
        layers: list[nn.Module] = [Linear(input_size, hidden_size), activation()]
        for _ in range(input_layers - 1):
            layers += [Linear(hidden_size, hidden_size), activation()]
        self.input = nn.Sequential(*layers)
        self.cell = nn.GRUCell(hidden_size, sizes.belief)
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
    """The posterior of one or more groups from their new beliefs, any other latent inputs
    (`RSSM.posterior_inputs`) and the observation embedding: one hidden layer over all of
    them, one Gaussian per group out. Over x and y together it is the Denoised MDP
    original's joint posterior, which can explain an observed signal by either group.

    The first layer is split into one part per input and one for the embedding, so a
    sequence's embeddings are projected in one matrix multiply before the time loop.
    ``beliefs`` holds the parts of the groups' own new beliefs (by group), ``others`` those
    of the other inputs (by `RSSM.posterior_inputs` name, ``.`` written ``:``).
    """

    def __init__(
        self,
        groups: dict[str, GroupSizes],
        others: dict[str, int],
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
        self.others = nn.ModuleDict(
            {
                _module_key(name): Linear(size, hidden_size, bias=False)
                for name, size in others.items()
            }
        )
        self.other_names = list(others)
        self.embedding = Linear(embedding_size, hidden_size)
        self.head = nn.Sequential(
            activation(), Linear(hidden_size, 2 * sum(s.state for s in groups.values()))
        )
        self.splits = [2 * sizes.state for sizes in groups.values()]

    def forward(
        self,
        beliefs: dict[str, torch.Tensor],
        projected_embedding: torch.Tensor,
        others: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, Gaussian]:
        """Each group's posterior from ``beliefs``, ``self.embedding(embedding)`` and the
        ``others`` inputs (by name)."""
        hidden = projected_embedding
        for g, layer in self.beliefs.items():
            hidden = hidden + layer(beliefs[g])
        for name, layer in zip(self.other_names, self.others.values(), strict=True):
            hidden = hidden + layer(others[name])
        raw = self.head(hidden).split(self.splits, -1)
        return {g: _gaussian(part, self.min_std) for g, part in zip(self.beliefs, raw, strict=True)}


def _module_key(name: str) -> str:
    return name.replace(".", ":")


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
        hidden_size: width of each group's input, prior and posterior layers when
            ``layer_widths`` is ``"hidden_size"``.
        min_std: added to the softplus of every std (0.1 in the papers).
        activation: ``"elu"`` or ``"relu"``.
        z_prior_uses_y: z's prior also sees y.
        joint_posterior: x and y share one posterior network (the Denoised MDP original's),
            which sees both beliefs; otherwise each group's posterior sees its own belief.
        z_inputs: ``"original"``: z reads what the Denoised MDP code's z reads (the current
            x and y, two input layers) and the x/y posteriors read the previous z;
            ``"cadence"``: z's prior reads previous states only, each posterior its own
            groups' beliefs (see `prior_inputs`, `posterior_inputs`).
        layer_widths: ``"belief"``: each group's layers are as wide as its belief (a
            posterior: the sum of its groups' beliefs), the original's; ``"hidden_size"``.
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
        z_inputs: str = "cadence",
        layer_widths: str = "hidden_size",
    ):
        super().__init__()
        if "x" not in groups or set(groups) - set(GROUPS):
            raise ValueError(f"groups must hold 'x' and optionally 'y', 'z'; got {sorted(groups)}")
        if z_inputs not in ("original", "cadence") or layer_widths not in ("belief", "hidden_size"):
            raise ValueError(
                f"z_inputs must be 'original' or 'cadence' and layer_widths 'belief' or "
                f"'hidden_size', got {z_inputs!r} and {layer_widths!r}"
            )
        self.action_size = action_size
        self.sizes = {g: groups[g] for g in GROUPS if g in groups}
        self.z_prior_uses_y = z_prior_uses_y and "y" in groups
        self.z_inputs = z_inputs
        act = {"elu": nn.ELU, "relu": nn.ReLU}[activation]

        def width(part: Sequence[str]) -> int:
            if layer_widths == "hidden_size":
                return hidden_size
            return sum(self.sizes[g].belief for g in part)

        self.groups = nn.ModuleDict(
            {
                g: _Group(
                    self._input_size(g),
                    sizes,
                    width(g),
                    act,
                    min_std,
                    input_layers=2 if g == "z" and z_inputs == "original" else 1,
                )
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
                    {g: self.sizes[g] for g in part},
                    {name: self._size(name) for name in self.posterior_inputs(part)},
                    width(part),
                    embedding_size,
                    act,
                    min_std,
                )
                for part in parts
            }
        )

    # ---------------------------------------------------------------- structure
    def prior_inputs(self, group: str) -> tuple[str, ...]:
        """What group ``group``'s prior is conditioned on: keys of the previous latent, the
        current step's (``new.`` and the key) or ``"action"``."""
        if group == "x":
            return ("x_state", "action")
        if group == "y":
            return ("y_state",)
        if self.z_inputs == "original":
            with_y = ("new.y_belief", "new.y_state") if self.z_prior_uses_y else ()
            return ("new.x_belief", "new.x_state", "z_state", "action", *with_y)
        return ("x_state", "z_state", "action") + (("y_state",) if self.z_prior_uses_y else ())

    def posterior_inputs(self, part: Sequence[str]) -> tuple[str, ...]:
        """What the posterior of the groups ``part`` reads beside their own new beliefs and
        the embedding (named as in `prior_inputs`)."""
        if self.z_inputs != "original" or "z" not in self.sizes:
            return ()
        if "z" not in part:
            return ("z_belief", "z_state")
        others = [g for g in ("x", "y") if g in self.sizes]
        return tuple(f"new.{g}_{kind}" for g in others for kind in ("belief", "state"))

    def _size(self, name: str) -> int:
        if name == "action":
            return self.action_size
        group, kind = name.removeprefix("new.").split("_")
        return getattr(self.sizes[group], kind)

    def _input_size(self, group: str) -> int:
        return sum(self._size(name) for name in self.prior_inputs(group))

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
    @staticmethod
    def _source(
        name: str, latent: Latent, new: Latent, action: torch.Tensor | None
    ) -> torch.Tensor:
        """Input ``name`` (`prior_inputs`) from the previous ``latent``, the current step's
        ``new`` latent so far, or the action."""
        if name == "action":
            return action
        if name.startswith("new."):
            return new[name[4:]]
        return latent[name]

    def _inputs(
        self, group: str, latent: Latent, action: torch.Tensor, new: Latent | None = None
    ) -> torch.Tensor:
        return torch.cat(
            [self._source(n, latent, new or {}, action) for n in self.prior_inputs(group)], -1
        )

    def _input_weights(
        self, group: str
    ) -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor | None]:
        """``group``'s input-layer weight split by prior input: the columns of each latent
        input, ``[(prior input name, [hidden, size])]``, and the action's (None if it has
        none)."""
        weight = self.groups[group].input[0].weight
        states, action_weight, start = [], None, 0
        for name in self.prior_inputs(group):
            width = self._size(name)
            columns = weight[:, start : start + width]
            if name == "action":
                action_weight = columns
            else:
                states.append((name, columns))
            start += width
        return states, action_weight

    def _ordered(self, latent: Latent) -> Latent:
        return {
            f"{g}_{part}": latent[f"{g}_{part}"] for g in self.sizes for part in ("belief", "state")
        }

    def _posteriors_after(self, group: str) -> list[str]:
        """The posterior networks whose groups all have their new belief once ``group``'s
        is computed (groups step in order x, y, z): each runs right after its last group."""
        order = list(self.groups)
        return [
            name
            for name, net in self.posteriors.items()
            if max(order.index(g) for g in net.beliefs) == order.index(group)
        ]

    def _run_posterior(
        self, name: str, latent: Latent, new: Latent, projected: torch.Tensor
    ) -> dict[str, Gaussian]:
        net = self.posteriors[name]
        beliefs = {g: new[f"{g}_belief"] for g in net.beliefs}
        others = {o: self._source(o, latent, new, None) for o in net.other_names}
        return net(beliefs, projected, others)

    def transition(
        self, latent: Latent, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], dict[str, Gaussian]]:
        """Every group's new belief and prior from the previous ``latent`` and ``action``
        (a group reading the current step's states reads prior samples)."""
        new, priors = {}, {}
        for g, group in self.groups.items():
            belief = group.step_belief(latent[f"{g}_belief"], self._inputs(g, latent, action, new))
            priors[g] = group.prior_of(belief)
            new[f"{g}_belief"], new[f"{g}_state"] = belief, priors[g].rsample()
        return {g: new[f"{g}_belief"] for g in self.groups}, priors

    def project_embedding(self, embedding: torch.Tensor) -> dict[str, torch.Tensor]:
        """The embedding's share of each posterior network's first layer."""
        return {name: net.embedding(embedding) for name, net in self.posteriors.items()}

    def posterior(
        self,
        beliefs: dict[str, torch.Tensor],
        projected: dict[str, torch.Tensor],
        inputs: Latent | None = None,
    ) -> dict[str, Gaussian]:
        """Every group's posterior from its new belief, ``project_embedding(embedding)`` and
        ``inputs``, the `posterior_inputs` by name."""
        gaussians = {}
        for name, net in self.posteriors.items():
            gaussians.update(net(beliefs, projected[name], inputs))
        return gaussians

    def observe_step(
        self, latent: Latent, action: torch.Tensor, embedding: torch.Tensor, sample: bool = True
    ) -> Latent:
        """One filtering step (acting): the posterior latent, sampled or its mean."""
        projected = self.project_embedding(embedding)
        new: Latent = {}
        for g, group in self.groups.items():
            inputs = self._inputs(g, latent, action, new)
            new[f"{g}_belief"] = group.step_belief(latent[f"{g}_belief"], inputs)
            for name in self._posteriors_after(g):
                for p, gaussian in self._run_posterior(name, latent, new, projected[name]).items():
                    new[f"{p}_state"] = gaussian.rsample() if sample else gaussian.mean
        return self._ordered(new)

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
        rests = {g: group.input[1:] for g, group in self.groups.items()}
        after = {g: self._posteriors_after(g) for g in self.groups}
        steps: list[Latent] = []
        means: dict[str, list[torch.Tensor]] = {g: [] for g in self.groups}
        stds: dict[str, list[torch.Tensor]] = {g: [] for g in self.groups}
        for t in range(length):
            if t in resets:
                latent = {key: value * keep[:, t] for key, value in latent.items()}
            new: Latent = {}
            for g, group in self.groups.items():
                pre = base[g][t]
                for name, weight in plans[g]:
                    pre = torch.addmm(pre, self._source(name, latent, new, None), weight.t())
                new[f"{g}_belief"] = group.cell(rests[g](pre), latent[f"{g}_belief"])
                for name in after[g]:
                    posteriors = self._run_posterior(name, latent, new, projected[name][t])
                    for p, (mean, std) in posteriors.items():
                        new[f"{p}_state"] = torch.addcmul(mean, std, noise[p][t])
                        means[p].append(mean)
                        stds[p].append(std)
            latent = self._ordered(new)
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
        new: Latent = {}
        for g in groups:
            group = self.groups[g]
            inputs = self._inputs(g, latent, action, new)
            belief = group.step_belief(latent[f"{g}_belief"], inputs)
            new[f"{g}_belief"], new[f"{g}_state"] = belief, group.prior_of(belief).rsample()
        return new
