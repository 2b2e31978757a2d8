"""Policy learners on the world model's x latent: Dreamer's actor-critic in imagination, and SAC.

Both act from x features ``cat(x_belief, x_state)`` only (Denoised MDP: the policy sees
the controllable, reward-relevant part of the latent), in [-1, 1] action units. Each
``update`` takes the posterior latent the world model just filtered over a minibatch
(detached here) and returns its metrics and a non-finite flag.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cadence.algorithms.optimizers import make_adam
from cadence.algorithms.polyak import polyak_update
from cadence.algorithms.returns import td_lambda_return
from cadence.algorithms.sac import loss as sac_loss
from cadence.data.time_step import StepType
from cadence.mbrl.config import ActorCriticConfig, LatentSACConfig
from cadence.mbrl.world_model import WorldModel
from cadence.networks.distributions import TanhNormal
from cadence.networks.mlp import MLP
from cadence.networks.rssm import RSSM, Latent

Minimize = Callable[[torch.Tensor, Sequence[torch.optim.Optimizer]], torch.Tensor | None]
"""`Algorithm.minimize`: zero_grad, backward, sync, clip, step; returns the gradient norm."""

_RAW_INIT_STD = math.log(math.e**5 - 1)  # softplus(raw + this) = 5 at raw = 0 (Dreamer's init_std)


class Actor(nn.Module):
    """Dreamer's actor: a tanh-squashed Gaussian over [-1, 1] actions from x features, its
    mean ``5 * tanh(mu / 5)`` and std ``softplus(raw + c) + 1e-4`` (std 5 at init)."""

    def __init__(self, feature_size: int, action_size: int, hidden_size: int, num_layers: int):
        super().__init__()
        self.net = MLP(
            feature_size, [hidden_size] * num_layers, 2 * action_size, "elu", orthogonal_init=False
        )
        self.register_buffer("low", -torch.ones(action_size), persistent=False)
        self.register_buffer("high", torch.ones(action_size), persistent=False)

    def forward(self, features: torch.Tensor) -> TanhNormal:
        mean, raw_std = self.net(features).chunk(2, -1)
        mean = 5 * torch.tanh(mean / 5)
        std = F.softplus(raw_std + _RAW_INIT_STD) + 1e-4
        return TanhNormal(mean, std, self.low, self.high)


def _frozen(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """Turns off ``requires_grad`` of the modules' parameters that had it; returns them.

    Not in a compiled update, whose `Algorithm.minimize` takes the gradients of its own
    optimizer's parameters only (``torch.autograd.grad``): nothing else would receive one.
    """
    if torch.compiler.is_compiling():
        return []
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    return params


def _thaw(params: list[torch.Tensor]) -> None:
    for p in params:
        p.requires_grad_(True)


def flat_x(latent: Latent, num_start_states: int | None) -> Latent:
    """The x part of a ``[B, L, ...]`` latent as ``[N, ...]`` start states (detached), all of
    them or ``num_start_states`` drawn at random without replacement."""
    x = {k: v.detach().flatten(0, 1) for k, v in latent.items() if k.startswith("x_")}
    total = next(iter(x.values())).shape[0]
    if num_start_states is not None and num_start_states < total:
        index = torch.randperm(total, device=x["x_belief"].device)[:num_start_states]
        x = {k: v.index_select(0, index) for k, v in x.items()}
    return x


class ImaginedActorCritic(nn.Module):
    """Dreamer's policy learning (Hafner et al. 2020, §3-4).

    From posterior x states of a replayed minibatch, imagine ``horizon`` steps with x's
    prior and the actor's reparameterised actions; rewards are f_x of each imagined state;
    λ-returns (``td_lambda_return``) bootstrap with V at the horizon. The actor maximises
    the cumulatively discounted λ-returns, backpropagated through the imagined dynamics
    (the world model is frozen, not updated); the value regresses the detached returns.
    """

    def __init__(
        self, feature_size: int, action_size: int, config: ActorCriticConfig, adam_eps: float
    ):
        super().__init__()
        self.config = config
        self.actor = Actor(feature_size, action_size, config.hidden_size, config.num_layers)
        self.value = MLP(feature_size, [config.hidden_size] * 3, 1, "elu", orthogonal_init=False)
        self.actor_optimizer = make_adam(
            self.actor.parameters(), config.actor_learning_rate, eps=adam_eps, fused=False
        )
        self.value_optimizer = make_adam(
            self.value.parameters(), config.value_learning_rate, eps=adam_eps, fused=False
        )

    @property
    def imagined_steps(self) -> int:
        """``horizon``, with or without ``paper_horizon`` (which changes the returns)."""
        return self.config.horizon

    def act(self, features: torch.Tensor, deterministic: bool) -> torch.Tensor:
        policy = self.actor(features)
        return policy.mode if deterministic else policy.sample()

    def most_likely_action(self, features: torch.Tensor) -> torch.Tensor:
        """The Denoised MDP original's deterministic action: of `MODE_SAMPLES` samples of
        the policy, the one of the highest log-density."""
        return most_likely_sample(self.actor(features))

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "value": self.value_optimizer}

    def imagine(
        self, world_model: WorldModel, start: Latent
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Imagined x features ``[H + 1, N, F]`` (the start first), rewards ``[H + 1, N]``
        (f_x of each state; index 0 unused) and the log-densities ``[H, N]`` of the actions
        taken at steps 0 .. H-1."""
        latent, features = start, [RSSM.features(start)]
        rewards, log_probs = [torch.zeros_like(features[0][:, 0])], []
        for _ in range(self.imagined_steps):
            # The actor sees its input detached, as in Dreamer's and Denoised MDP's code: the
            # returns reach it through the actions it takes, not through the state path of
            # later actions, whose chained Jacobians otherwise drive it into saturation.
            action, log_prob = self.actor(features[-1].detach()).rsample_with_log_prob()
            latent = world_model.rssm.imagine_step(latent, action)
            features.append(RSSM.features(latent))
            rewards.append(world_model.reward(latent, ("x",)))
            log_probs.append(log_prob)
        return torch.stack(features), torch.stack(rewards), torch.stack(log_probs)

    def update(
        self, world_model: WorldModel, latent: Latent, batch: dict, minimize: Minimize
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        config = self.config
        start = flat_x(latent, config.num_start_states)
        frozen = _frozen([world_model, self.value])
        try:
            features, rewards, log_probs = self.imagine(world_model, start)
            values = self.value(features).squeeze(-1)
            if config.paper_horizon:  # returns of states 1 .. H-1, each counting its reward
                returns = self.paper_lambda_returns(rewards, values)
                first, log_probs = 1, log_probs[1:]
            else:  # returns of states 0 .. H-1
                returns, first = self.lambda_returns(rewards, values), 0
            weights = config.gamma ** torch.arange(
                returns.shape[0], device=returns.device, dtype=returns.dtype
            )
            objective = returns - config.actor_entropy * log_probs
            actor_loss = -(weights[:, None] * objective).mean()
        finally:
            _thaw(frozen)
        actor_norm = minimize(actor_loss, [self.actor_optimizer])
        predicted = self.value(features[first : first + len(returns)].detach()).squeeze(-1)
        value_loss = 0.5 * (weights[:, None] * (predicted - returns.detach()).square()).mean()
        value_norm = minimize(value_loss, [self.value_optimizer])
        metrics = {
            "loss/actor": actor_loss.detach(),
            "loss/value": value_loss.detach(),
            "train/imagined_return": returns.detach().mean(),
            "train/imagined_reward": rewards[1:].detach().mean(),
            "train/policy_entropy": -log_probs.detach().mean(),
            "train/policy_entropy_proxy": self.actor(features[0].detach())
            .normal.scale.log()
            .mean()
            .detach(),
        }
        return metrics, _nonfinite(metrics, actor_norm, value_norm)

    def lambda_returns(self, rewards: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``[H, N]`` λ-returns of imagined steps 0 .. H-1, bootstrapped with V at the horizon
        (imagination never ends an episode: every step is MID with discount 1)."""
        ones = torch.ones_like(rewards)
        mid = torch.full_like(rewards, int(StepType.MID), dtype=torch.int64)
        return td_lambda_return(rewards, ones, mid, values, self.config.gamma, self.config.lambda_)

    def paper_lambda_returns(self, rewards: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The Denoised MDP original's (and Dreamer v1's) ``[H - 1, N]`` λ-returns of imagined
        states 1 .. H-1 from rewards and values ``[H + 1, N]`` of states 0 .. H: the return
        of state k counts its own reward, ``G_k = r_k + gamma * ((1 - λ) V_k+1 + λ G_k+1)``,
        and ``G_H-1 = r_H-1 + gamma * V_H`` (the reward of state H is never used)."""
        return self.lambda_returns(rewards[:-1], values[1:])


class LatentSAC(nn.Module):
    """SAC (Haarnoja et al. 2018) on transitions of x features ``(f_t, a_t, f_x(x_t+1), f_t+1)``
    from the filtered minibatch: the reward is the denoised one, f_x of the next posterior
    state, not the env's. Twin critics with Polyak targets and automatic entropy tuning
    (target entropy ``-action_dim``). The soft target evaluates the next state's log-density
    at the very action sampled there."""

    def __init__(
        self, feature_size: int, action_size: int, config: LatentSACConfig, adam_eps: float
    ):
        super().__init__()
        self.config = config
        hidden = [config.hidden_size] * config.num_layers
        actor_layers = config.num_layers if config.actor_layers is None else config.actor_layers
        self.actor = Actor(feature_size, action_size, config.hidden_size, actor_layers)
        self.critics = nn.ModuleList(
            MLP(feature_size + action_size, hidden, 1, "elu", orthogonal_init=False)
            for _ in range(2)
        )
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.initial_alpha)))
        self.target_entropy = -float(action_size)
        self.actor_optimizer = make_adam(
            self.actor.parameters(), config.actor_learning_rate, eps=adam_eps, fused=False
        )
        self.critic_optimizer = make_adam(
            self.critics.parameters(), config.critic_learning_rate, eps=adam_eps, fused=False
        )
        self.alpha_optimizer = make_adam(
            [self.log_alpha], config.alpha_learning_rate, eps=adam_eps, fused=False
        )

    def act(self, features: torch.Tensor, deterministic: bool) -> torch.Tensor:
        policy = self.actor(features)
        return policy.mode if deterministic else policy.sample()

    def most_likely_action(self, features: torch.Tensor) -> torch.Tensor:
        """The Denoised MDP original's deterministic action (see `most_likely_sample`)."""
        return most_likely_sample(self.actor(features))

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "actor": self.actor_optimizer,
            "critic": self.critic_optimizer,
            "alpha": self.alpha_optimizer,
        }

    @staticmethod
    def _q(critics: nn.ModuleList, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([features, action], -1)
        return torch.stack([critic(inputs).squeeze(-1) for critic in critics])

    def update(
        self, world_model: WorldModel, latent: Latent, batch: dict, minimize: Minimize
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        config = self.config
        x = {k: v.detach() for k, v in latent.items() if k.startswith("x_")}
        features = RSSM.features(x)
        state, next_state = features[:, :-1].flatten(0, 1), features[:, 1:].flatten(0, 1)
        action = world_model.normalize_action(batch["action"][:, :-1]).flatten(2).flatten(0, 1)
        next_x = {k: v[:, 1:] for k, v in x.items()}
        with torch.no_grad():
            reward = world_model.reward(next_x, ("x",)).flatten()
        discount = batch["discount"][:, 1:].float().flatten()
        weight = (batch["step_type"][:, :-1] != int(StepType.LAST)).float().flatten()
        count = weight.sum().clamp(min=1)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = self.actor(next_state).rsample_with_log_prob()
            next_q = self._q(self.target_critics, next_state, next_action).min(0).values
            next_value = sac_loss.soft_value(next_q, next_log_prob, alpha)
            target = sac_loss.soft_td_target(reward, discount, next_value, config.gamma)
        q = self._q(self.critics, state, action)
        critic_loss = ((0.5 * (q - target).square()).sum(0) * weight).sum() / count
        critic_norm = minimize(critic_loss, [self.critic_optimizer])
        new_action, log_prob = self.actor(state).rsample_with_log_prob()
        frozen = _frozen([self.critics])
        try:
            q_new = self._q(self.critics, state, new_action).min(0).values
        finally:
            _thaw(frozen)
        actor_loss = sac_loss.actor_loss(log_prob, q_new, alpha, weight, count)
        actor_norm = minimize(actor_loss, [self.actor_optimizer])
        alpha_loss = (
            -(self.log_alpha * ((log_prob.detach() + self.target_entropy) * weight)).sum() / count
        )
        alpha_norm = minimize(alpha_loss, [self.alpha_optimizer])
        polyak_update(self.target_critics.parameters(), self.critics.parameters(), config.tau)
        metrics = {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "loss/alpha": alpha_loss.detach(),
            "train/alpha": alpha,
            "train/denoised_reward": reward.mean(),
        }
        return metrics, _nonfinite(metrics, critic_norm, actor_norm, alpha_norm)


MODE_SAMPLES = 100
"""Samples of the policy the original's deterministic action is chosen among."""


def most_likely_sample(policy: TanhNormal, samples: int = MODE_SAMPLES) -> torch.Tensor:
    """``[B, A]``: the one of ``samples`` samples of ``policy`` with the highest log-density."""
    actions, log_probs = policy.rsample_with_log_prob((samples,))
    best = log_probs.argmax(0)
    return actions.gather(0, best[None, :, None].expand(1, *actions.shape[1:])).squeeze(0)


def _nonfinite(metrics: dict[str, torch.Tensor], *norms: torch.Tensor | None) -> torch.Tensor:
    values = [v for v in metrics.values()] + [n for n in norms if n is not None]
    return ~torch.isfinite(torch.stack([v.float() for v in values])).all()
