"""`DeterministicActorCritic`: the off-policy deterministic-policy actor-critic of TD3 and DDPG.

TD3 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477) and DDPG (Lillicrap
et al. 2016, https://arxiv.org/abs/1509.02971) share one core: a deterministic
tanh actor ``mu(s)``, an ensemble of E critics ``Q_e(s, a)`` evaluated as one
batched pass (`CriticEnsemble`), Polyak-averaged target copies of both, Gaussian
exploration noise, and the deterministic policy gradient ``-Q_1(s, mu(s))``.
They differ by the parts their builders compose in, not by switches:

- the critic ensemble: the bootstrap is the minimum over the target ensemble
  (TD3's clipped double Q with E = 2; with DDPG's single critic it is that critic);
- ``target_action_noise``: applied to the target actor's action before the target
  critics read it (TD3's target policy smoothing; DDPG has none);
- ``policy_delay``: critic updates per actor-and-target update (TD3 2, DDPG 1).

Actions are handled *normalized* to ``[-1, 1]``: the actor's tanh range, the
critics' input, and the unit of every noise scale; only the env sees them
scaled to its bounds.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import functional_call

from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo, UpdateResult
from cadence.algorithms.optimizers import make_adam
from cadence.algorithms.polyak import polyak_update
from cadence.algorithms.returns import n_step_return
from cadence.data.errors import UnsupportedSpaceError
from cadence.data.nest import Nest, map_structure
from cadence.data.specs import BoundedTensorSpec, Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.networks.config import NetworkConfig
from cadence.networks.deterministic_actor import DeterministicActor
from cadence.networks.encoders import make_encoder
from cadence.networks.value import CriticEnsemble
from cadence.replay.buffer import ReplaySample

TargetActionNoise = Callable[[torch.Tensor], torch.Tensor]
"""Maps the target actor's normalized actions ``[*B, A]`` to the ones the target critics read."""


class DeterministicActorCritic(Algorithm):
    """Deterministic actor and critic ensemble trained from replayed windows.

    Each `update` takes one critic step on the TD targets, then, every
    ``policy_delay``-th update, one actor step and a Polyak update of both targets.

    Args:
        actor: maps observations ``[*B, ...]`` to normalized actions ``[*B, A]``.
        critic: E critics, ``(observation, normalized action) -> [E, *B]``.
        action_spec: the env's bounded continuous action spec, shape ``(A,)``.
        gamma: discount factor.
        tau: Polyak coefficient: ``target <- (1 - tau) * target + tau * online``.
        exploration_noise: std of the Gaussian added to rollout actions (normalized units).
        actor_learning_rate, critic_learning_rate: Adam step sizes.
        policy_delay: critic updates per actor and target update.
        target_action_noise: applied to the target actor's actions (None: used as they are).
        max_grad_norm: clip the actor's and the critics' gradients to this norm (None: no clip).

    Raises:
        ValueError: the action spec is not bounded, continuous and 1-D.

    >>> action_spec = BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0)
    >>> actor, critic = make_deterministic_networks(
    ...     BoundedTensorSpec((3,), minimum=-8.0, maximum=8.0), action_spec, NetworkConfig(), 2)
    >>> algorithm = DeterministicActorCritic(
    ...     actor, critic, action_spec, gamma=0.99, tau=0.005, exploration_noise=0.1,
    ...     actor_learning_rate=1e-3, critic_learning_rate=1e-3, policy_delay=2)
    >>> algorithm.to_env_action(torch.tensor([[-1.0], [0.5]]))
    tensor([[-2.],
            [ 1.]])
    """

    own_update = True  # a critic step, and every policy_delay-th an actor step

    def __init__(
        self,
        actor: nn.Module,
        critic: CriticEnsemble,
        action_spec: Spec,
        *,
        gamma: float,
        tau: float,
        exploration_noise: float,
        actor_learning_rate: float,
        critic_learning_rate: float,
        policy_delay: int = 1,
        target_action_noise: TargetActionNoise | None = None,
        max_grad_norm: float | None = None,
    ):
        super().__init__()
        low, high = action_bounds(action_spec)
        self.actor = actor
        self.critic = critic
        # Targets start equal to the online networks and only ever move by Polyak averaging.
        self.target_actor = copy.deepcopy(actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(critic).requires_grad_(False)
        self.gamma = gamma
        self.tau = tau
        self.exploration_noise = exploration_noise
        self.policy_delay = policy_delay
        self.target_action_noise = target_action_noise
        self.max_grad_norm = max_grad_norm
        self.register_buffer("_action_center", (high + low) / 2, persistent=False)
        self.register_buffer("_action_half_range", (high - low) / 2, persistent=False)
        # A buffer (not a float) so logging it never syncs, and a checkpoint keeps it.
        self.register_buffer("_last_actor_loss", torch.zeros(()))
        self._actor_optimizer = make_adam(actor.parameters(), actor_learning_rate)
        self._critic_optimizer = make_adam(critic.parameters(), critic_learning_rate)
        self._num_updates = 0

    # ------------------------------------------------------------- acting
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self._actor_optimizer, "critic": self._critic_optimizer}

    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """The deterministic action ``mu(s)``, scaled to the env's bounds."""
        return AlgStep(output=self.to_env_action(self.actor(time_step.observation)), state=state)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """``mu(s)`` plus Gaussian noise, clipped to the bounds (no info is stored)."""
        action = self.actor(time_step.observation)
        action = action + self.exploration_noise * torch.randn_like(action)
        return AlgStep(output=self.to_env_action(action.clamp(-1.0, 1.0)), state=state, info={})

    def to_env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Normalized ``[*B, A]`` in ``[-1, 1]`` to the env's ``[minimum, maximum]``."""
        return self._action_center + self._action_half_range * action

    def to_normalized_action(self, action: torch.Tensor) -> torch.Tensor:
        """The inverse of `to_env_action`."""
        return (
            action.to(self._action_center.dtype) - self._action_center
        ) / self._action_half_range

    # ----------------------------------------------------------- training
    @torch.no_grad()
    def preprocess_experience(self, sample: ReplaySample) -> dict[str, Any]:
        """The ``[N, L]`` windows as named tensors; only step 0's action is trained on.

        Returns:
            ``observation`` (nest ``[N, L, ...]``), ``action`` ``[N, A]`` (normalized),
            ``reward``, ``discount``, ``step_type`` ``[N, L]`` and ``weights`` ``[N]``.
        """
        time_step = sample.time_step
        return {
            "observation": time_step.observation,
            "action": self.to_normalized_action(sample.action[:, 0]),
            "reward": time_step.reward,
            "discount": time_step.discount,
            "step_type": time_step.step_type,
            "weights": sample.weights,
        }

    @torch.no_grad()
    def critic_target(self, inputs: dict[str, Any]) -> torch.Tensor:
        """TD targets ``[N]`` of each window's first action.

        ``r_1 + gamma * d_1 * min_e Q'_e(s_1, a'_1)`` with ``a'_1`` the target actor's
        action (after ``target_action_noise``); a window of length L sums ``L - 1``
        rewards before bootstrapping (`n_step_return`), stopping at a LAST step
        (a terminal one, discount 0, adds no bootstrap; a time-limit one, discount 1, does).
        Windows whose first step is LAST get 0 (they are masked out of the loss).
        """
        next_observation = map_structure(lambda x: x[:, 1:], inputs["observation"])
        next_action = self.target_actor(next_observation)
        if self.target_action_noise is not None:
            next_action = self.target_action_noise(next_action)
        next_value = self.target_critic(next_observation, next_action).min(dim=0).values
        # n_step_return reads value[t + k] for k >= 1 only: step 0 needs no value.
        value = torch.cat([torch.zeros_like(next_value[:, :1]), next_value], dim=1)
        reward = inputs["reward"].to(value.dtype)
        window = reward.shape[1]
        targets = n_step_return(
            reward,
            inputs["discount"],
            inputs["step_type"],
            value,
            self.gamma,
            window - 1,
            time_dim=1,
        )
        return targets[:, 0]

    def train_step(self, inputs: dict[str, Any], state: Nest = ()) -> AlgStep:
        """The critics' values ``[E, N]`` of the replayed actions and their targets ``[N]``."""
        observation = map_structure(lambda x: x[:, 0], inputs["observation"])
        info = {
            "q": self.critic(observation, inputs["action"]),
            "target": self.critic_target(inputs),
            # The action stored at a LAST step was ignored by the auto-reset (DESIGN §2).
            "valid": inputs["step_type"][:, 0] != StepType.LAST,
            "weights": inputs["weights"],
        }
        return AlgStep(output=(), state=state, info=info)

    def calc_loss(self, info: dict[str, torch.Tensor]) -> LossInfo:
        """The critics' loss: each member's importance-weighted squared TD error, summed.

        Averaged over the valid windows (first step not LAST).
        """
        error = info["q"] - info["target"]
        valid = info["valid"].to(error.dtype)
        count = valid.sum().clamp_min(1.0)
        loss = ((info["weights"] * valid) * error.square()).sum() / count
        with torch.no_grad():
            extra = {
                "loss/critic": loss.detach(),
                "train/q": (info["q"] * valid).sum() / (count * error.shape[0]),
                "train/target": (info["target"] * valid).sum() / count,
                "train/td_error": (error.abs() * valid).sum() / (count * error.shape[0]),
            }
        return LossInfo(loss, extra)

    def actor_loss(self, inputs: dict[str, Any]) -> LossInfo:
        """``-Q_1(s, mu(s))`` averaged over valid windows; the critics get no gradient from it.

        Only the first member runs, on detached views of its parameters, so the
        backward pass reaches the actor's parameters only.
        """
        observation = map_structure(lambda x: x[:, 0], inputs["observation"])
        q = self._first_critic(observation, self.actor(observation))
        valid = (inputs["step_type"][:, 0] != StepType.LAST).to(q.dtype)
        loss = -(q * valid).sum() / valid.sum().clamp_min(1.0)
        return LossInfo(loss, {"loss/actor": loss.detach()})

    def _first_critic(self, observation: Nest, action: torch.Tensor) -> torch.Tensor:
        """``Q_1(s, a)`` ``[*B]`` through detached parameters of member 0 of the ensemble."""
        critic = self.critic
        member = {name: p[:1].detach() for name, p in critic.mlp.named_parameters()}
        encoder = {name: p.detach() for name, p in critic.encoder.named_parameters()}
        features = functional_call(critic.encoder, encoder, (observation,))
        inputs = torch.cat([features, action], dim=-1).unsqueeze(0)
        return functional_call(critic.mlp, member, (inputs,))[0].squeeze(-1)

    def update(self, batch: dict[str, Any]) -> UpdateResult:
        """One critic step; every ``policy_delay``-th call also an actor step and `after_update`
        (two graphs when compiled: with and without the actor step).

        Returns:
            The logged terms (``loss/actor`` is the latest actor loss, so that the
            scheme's average over minibatches is not diluted by the delayed steps)
            and ``[N]`` priorities: the mean |TD error| over critics, 0 for masked windows.
        """
        self._num_updates += 1
        return self.in_graph(self.update_step, batch, self._num_updates % self.policy_delay == 0)

    def update_step(self, batch: dict[str, Any], actor_step: bool = True) -> UpdateResult:
        """`update`'s work: a critic step, then with ``actor_step`` the actor's and targets'."""
        step = self.train_step(batch)
        critic = self.calc_loss(step.info)
        grad_norm = self.minimize(critic.loss, [self._critic_optimizer])
        nonfinite = ~torch.isfinite(critic.loss.detach())
        if actor_step:
            actor = self.actor_loss(batch)
            actor_norm = self.minimize(actor.loss, [self._actor_optimizer])
            self._last_actor_loss.copy_(actor.loss.detach())
            nonfinite = nonfinite | ~torch.isfinite(self._last_actor_loss)
            if actor_norm is not None:
                grad_norm = torch.maximum(grad_norm, actor_norm)
            self.after_update()
        with torch.no_grad():
            error = (step.info["q"] - step.info["target"]).abs().mean(dim=0)
            priorities = error * step.info["valid"]
        metrics = {**critic.extra, "loss/actor": self._last_actor_loss.clone()}
        if grad_norm is not None:
            metrics["train/grad_norm"] = grad_norm.detach()
            nonfinite = nonfinite | ~torch.isfinite(grad_norm)
        return UpdateResult(metrics, nonfinite, priorities)

    @torch.no_grad()
    def after_update(self) -> None:
        """Polyak-averages the online networks into the targets."""
        for online, target in ((self.actor, self.target_actor), (self.critic, self.target_critic)):
            polyak_update(target.parameters(), online.parameters(), self.tau)

    def get_extra_state(self) -> dict[str, int]:
        """The update count, which decides when the delayed actor step comes."""
        return {"num_updates": self._num_updates}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self._num_updates = int(state["num_updates"])


def make_deterministic_networks(
    observation_spec: Spec, action_spec: Spec, config: NetworkConfig, num_critics: int
) -> tuple[DeterministicActor, CriticEnsemble]:
    """An actor and an ensemble of ``num_critics`` critics, each with its own encoder.

    Raises:
        ValueError: ``config.share_encoder`` is set (not supported here), or the
            action spec is not bounded, continuous and 1-D.
    """
    if config.share_encoder:
        raise ValueError(
            "TD3 and DDPG give the actor and the critics their own encoders; "
            "set network.share_encoder=false"
        )
    action_bounds(action_spec)
    action_dim = action_spec.shape[0]
    layers = {
        "activation": config.activation,
        "layer_norm": config.layer_norm,
        "orthogonal_init": config.orthogonal_init,
    }
    actor = DeterministicActor(
        make_encoder(observation_spec, config), action_dim, config.hidden_sizes, **layers
    )
    critic = CriticEnsemble(
        make_encoder(observation_spec, config),
        action_dim,
        config.hidden_sizes,
        num_critics,
        **layers,
    )
    return actor, critic


class SharedHyperparameters(Protocol):
    """The knobs every deterministic actor-critic config has (`DDPGConfig`, `TD3Config`)."""

    gamma: float
    tau: float
    exploration_noise: float
    actor_learning_rate: float
    critic_learning_rate: float
    max_grad_norm: float | None


def make_deterministic_actor_critic(
    config: SharedHyperparameters,
    observation_spec: Spec,
    action_spec: Spec,
    network_config: NetworkConfig,
    num_critics: int = 1,
    **variant: Any,
) -> DeterministicActorCritic:
    """Networks and a `DeterministicActorCritic` from the hyperparameters DDPG and TD3 share.

    Args:
        config: the algorithm's config (gamma, tau, exploration noise, learning rates,
            gradient clipping).
        observation_spec: the (transformed) observation spec.
        action_spec: the env's bounded continuous action spec, shape ``(A,)``.
        network_config: the network section.
        num_critics: critics in the ensemble.
        **variant: what sets a variant apart (``policy_delay``, ``target_action_noise``).

    Returns:
        The algorithm, its networks freshly initialized.
    """
    actor, critic = make_deterministic_networks(
        observation_spec, action_spec, network_config, num_critics
    )
    algorithm = DeterministicActorCritic(
        actor,
        critic,
        action_spec,
        gamma=config.gamma,
        tau=config.tau,
        exploration_noise=config.exploration_noise,
        actor_learning_rate=config.actor_learning_rate,
        critic_learning_rate=config.critic_learning_rate,
        max_grad_norm=config.max_grad_norm,
        **variant,
    )
    return algorithm


def action_bounds(action_spec: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``[A]`` float32 minimum and maximum of a bounded, continuous, 1-D action spec.

    Raises:
        UnsupportedSpaceError: the spec is discrete, unbounded, not 1-D, or has an empty
            range.
    """
    if not isinstance(action_spec, BoundedTensorSpec) or action_spec.is_discrete:
        raise UnsupportedSpaceError(
            f"TD3 and DDPG need a bounded continuous (Box) action space, got {action_spec}; "
            "use DQN, PPO, A2C or SAC for discrete actions, PPO or A2C for a Dict or Tuple"
        )
    if len(action_spec.shape) != 1:
        raise UnsupportedSpaceError(
            f"TD3 and DDPG need 1-D actions, got shape {tuple(action_spec.shape)}"
        )
    shape = action_spec.shape
    low = torch.as_tensor(action_spec.minimum, dtype=torch.float32).expand(shape).clone()
    high = torch.as_tensor(action_spec.maximum, dtype=torch.float32).expand(shape).clone()
    finite = all(math.isfinite(x) for x in torch.cat([low, high]).tolist())
    if not finite or not bool((high > low).all()):
        raise UnsupportedSpaceError(
            f"TD3 and DDPG need finite action bounds with minimum < maximum, got "
            f"[{low.tolist()}, {high.tolist()}]; wrap the env to rescale unbounded actions"
        )
    return low, high
