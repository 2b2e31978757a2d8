"""`SACAlgorithm`: soft actor-critic (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290,
https://arxiv.org/abs/1812.05905), continuous or discrete by the action spec.

One `update` is one fused step: the critic, actor and temperature losses come out of a
single forward pass and are minimised with a single backward pass, which is possible
because their gradients never mix:

- the TD target is computed without gradient (target critics, next actions);
- the actor loss evaluates the critics with *detached* parameters, so its gradient
  reaches the actions (and through them the policy) but never the critics;
- the critic loss takes the stored actions, so its gradient never reaches the policy;
- the temperature loss takes the detached log-probabilities, so only log(alpha) moves.

The critics are one batched ensemble (`CriticEnsemble`) whose replayed-action and
policy-action passes share their observation work (`CriticEnsemble.with_policy_actions`),
the three fused Adams step as one (`Algorithm.optimizer_steps`), the target update is an
in-place lerp per tensor, nothing syncs with ``.item()``, and only the replay fields SAC reads
are gathered (`replay_fields`); the whole update can additionally run as one compiled
graph (`cadence.accel.compile_update`).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from cadence.algorithms.agent_view import AlgorithmAgent
from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo, UpdateResult
from cadence.algorithms.optimizers import make_adam
from cadence.algorithms.polyak import polyak_update
from cadence.algorithms.sac import loss as sac_loss
from cadence.data.nest import Nest, map_structure
from cadence.data.specs import DiscreteTensorSpec, Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.replay.buffer import ReplaySample

Batch = dict[str, Any]
"""A minibatch of ``[N]`` transitions: ``observation``, ``action``, ``reward``, ``discount``,
``next_observation`` and ``weight`` (0 for masked samples, else the importance weight)."""


REPLAY_FIELDS = (
    "time_step/step_type",
    "time_step/reward",
    "time_step/discount",
    "time_step/observation",
    "action",
)
"""The replay row keys `SACAlgorithm.preprocess_experience` reads (the rest is never gathered)."""


class SACAlgorithm(Algorithm):
    """SAC with an ensemble of critics, Polyak-averaged target critics and a learned temperature.

    Args:
        actor: observations to a `TanhNormal` (continuous) or `Categorical` (discrete) policy.
        critic: a `CriticEnsemble` ``(obs, action) -> [E, N]`` or a `DiscreteCriticEnsemble`
            ``obs -> [E, N, A]``; its deep copy becomes the target critic.
        action_spec: the env's action spec; a `DiscreteTensorSpec` selects discrete SAC.
        gamma: discount factor.
        tau: Polyak rate of the target critics.
        actor_learning_rate: the actor's Adam step size.
        critic_learning_rate: the critics' Adam step size.
        alpha_learning_rate: the temperature's Adam step size.
        initial_alpha: the entropy temperature at the start.
        autotune_alpha: learn alpha towards ``target_entropy`` (else it stays fixed).
        target_entropy: the entropy alpha aims at.
        max_grad_norm: clip each optimizer's gradients to this norm (None: no clipping).

    >>> from cadence.algorithms.sac import SACConfig, make_sac
    >>> from cadence.data.specs import BoundedTensorSpec, TensorSpec
    >>> from cadence.networks import NetworkConfig
    >>> sac = make_sac(SACConfig(), TensorSpec((3,)), BoundedTensorSpec((1,), minimum=-2.0,
    ...                maximum=2.0), NetworkConfig(hidden_sizes=(32, 32), activation="relu"))
    >>> sorted(sac.optimizers())
    ['actor', 'alpha', 'critic']
    """

    own_update = True  # several losses and optimizers
    replay_fields = REPLAY_FIELDS

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        action_spec: Spec,
        *,
        gamma: float,
        tau: float,
        actor_learning_rate: float,
        critic_learning_rate: float,
        alpha_learning_rate: float,
        initial_alpha: float,
        autotune_alpha: bool,
        target_entropy: float,
        max_grad_norm: float | None = None,
    ):
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.target_critic = copy.deepcopy(critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(
            torch.tensor(math.log(initial_alpha)), requires_grad=autotune_alpha
        )
        self.discrete = isinstance(action_spec, DiscreteTensorSpec)
        self.gamma = gamma
        self.tau = tau
        self.target_entropy = float(target_entropy)
        self.autotune_alpha = autotune_alpha
        self.max_grad_norm = max_grad_norm
        # Attributes of their own rather than a dict: a saved unroll graph's guards pickle
        # the module's attributes, and an optimizer inside a plain dict would be pickled
        # without its state tensors, which it cannot load (`cadence.accel.precompiled`).
        self._actor_optimizer = make_adam(self.actor.parameters(), actor_learning_rate)
        self._critic_optimizer = make_adam(self.critic.parameters(), critic_learning_rate)
        self._alpha_optimizer = (
            make_adam([self.log_alpha], alpha_learning_rate) if autotune_alpha else None
        )
        self._online = list(self.critic.parameters())
        self._target = list(self.target_critic.parameters())

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        optimizers = {"actor": self._actor_optimizer, "critic": self._critic_optimizer}
        if self._alpha_optimizer is not None:
            optimizers["alpha"] = self._alpha_optimizer
        return optimizers

    # ------------------------------------------------------------------ acting
    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """The policy's mode: the squashed mean, or the most probable discrete action."""
        return AlgStep(output=self.actor(time_step.observation).mode, state=state)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """A sampled action; ``agent_info["deterministic"]`` (``[B]`` bool), where given,
        makes those slots act with the policy's mode instead."""
        distribution = self.actor(time_step.observation)
        action = distribution.sample()
        if "deterministic" in agent_info:
            deterministic = agent_info["deterministic"]
            where = deterministic.reshape(deterministic.shape + (1,) * (action.dim() - 1))
            action = torch.where(where, distribution.mode, action)
        return AlgStep(output=action, state=state, info={})

    def as_agent(self) -> AlgorithmAgent:
        """This policy as an rlstructures `Agent`, for the `cadence.collect.Batcher`."""
        return AlgorithmAgent(self)

    # ---------------------------------------------------------------- training
    @torch.no_grad()
    def preprocess_experience(self, sample: ReplaySample) -> Batch:
        """One-step transitions from ``[N, 2]`` windows (only `replay_fields` are read).

        ``reward``/``discount`` at index 1 belong to the action at index 0 (DESIGN §2);
        a window whose first step is LAST crosses an episode boundary (its action was
        ignored by the auto-reset): ``valid`` 0, weight 0 and priority 0.
        """
        time_step = sample.steps["time_step"]
        observation = time_step["observation"]
        valid = time_step["step_type"][:, 0] != StepType.LAST
        return {
            "observation": map_structure(lambda x: x[:, 0], observation),
            "action": map_structure(lambda x: x[:, 0], sample.steps["action"]),
            "reward": time_step["reward"][:, 1].float(),
            "discount": time_step["discount"][:, 1].float(),
            "next_observation": map_structure(lambda x: x[:, 1], observation),
            "weight": valid.float() * sample.weights.float(),
            "valid": valid.float(),
        }

    def train_step(self, inputs: Batch, state: Nest = ()) -> AlgStep:
        """The critics' values, the TD target and the policy terms of one minibatch."""
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            target = sac_loss.soft_td_target(
                inputs["reward"],
                inputs["discount"],
                self._next_value(inputs["next_observation"], alpha),
                self.gamma,
            )
        info = self._discrete_terms(inputs) if self.discrete else self._continuous_terms(inputs)
        # Means are over the valid transitions, importance-weighted, as DQN's and TD3's are.
        count = inputs["valid"].sum().clamp_min(1.0)
        info.update(target=target, alpha=alpha, weight=inputs["weight"], count=count)
        info["valid"] = inputs["valid"]
        return AlgStep(output=(), state=state, info=info)

    def calc_loss(self, info: dict[str, torch.Tensor]) -> LossInfo:
        return self._loss_terms(info)[0]

    def update(self, batch: Batch) -> UpdateResult:
        """train_step -> calc_loss -> one backward -> sync and clip -> every optimizer steps
        (as one, `Algorithm.optimizer_steps`) -> target update; one graph when compiled.

        Priorities are the mean |TD error| over the critics of each transition.
        """
        return self.in_graph(self.update_step, batch)

    def update_step(self, batch: Batch) -> UpdateResult:
        """`update`'s work."""
        loss, extra, priorities = self._losses(batch)
        if torch.compiler.is_compiling():
            grad_norm = self.minimize(loss)
            self.after_update()
            return self.update_result(LossInfo(loss, extra), grad_norm, priorities)
        optimizer_steps = self.optimizer_steps()
        optimizer_steps.zero_grad()
        loss.backward()
        grad_norm = self.sync_and_clip(self.optimizers().values())
        finite = True
        if self.skip_nonfinite_updates:
            finite, grad_norm = self.finite_or_dropped(loss, self.optimizers().values(), grad_norm)
        if finite:
            optimizer_steps.step()
            self.after_update()
        return self.update_result(LossInfo(loss, extra), grad_norm, priorities)

    @torch.no_grad()
    def after_update(self) -> None:
        """Moves the target critics ``tau`` of the way to the online ones (`polyak_update`)."""
        polyak_update(self._target, self._online, self.tau)

    # --------------------------------------------------------------- internals
    def _next_value(self, next_observation: Nest, alpha: torch.Tensor) -> torch.Tensor:
        """The soft value ``[N]`` of the next observations under the target critics."""
        distribution = self.actor(next_observation)
        if self.discrete:
            q = self.target_critic(next_observation).min(0).values
            return sac_loss.expected_soft_value(q, distribution.logits, alpha)
        action, log_prob = distribution.rsample_with_log_prob()
        q = self.target_critic(next_observation, action).min(0).values
        return sac_loss.soft_value(q, log_prob, alpha)

    def _continuous_terms(self, inputs: Batch) -> dict[str, torch.Tensor]:
        observation = inputs["observation"]
        action, log_prob = self.actor(observation).rsample_with_log_prob()
        q, q_pi = self.critic.with_policy_actions(observation, inputs["action"], action)
        return {"q": q, "log_prob": log_prob, "q_pi": q_pi.min(0).values}

    def _discrete_terms(self, inputs: Batch) -> dict[str, torch.Tensor]:
        q_all = self.critic(inputs["observation"])
        q = q_all.gather(-1, inputs["action"].long()[None, :, None].expand(q_all.shape[0], -1, 1))
        log_probs = self.actor(inputs["observation"]).logits
        # The actor's expectation over actions needs no extra critic pass: the values of
        # every action are already here, and detaching them keeps the critics out of it.
        return {"q": q.squeeze(-1), "log_probs": log_probs, "q_pi": q_all.detach().min(0).values}

    def _loss_terms(self, info: dict[str, torch.Tensor]) -> tuple[LossInfo, torch.Tensor]:
        weight, count, alpha = info["weight"], info["count"], info["alpha"]
        critic, td_error = sac_loss.critic_loss(info["q"], info["target"], weight, count)
        priorities = td_error * info["valid"]  # a masked window's |TD| means nothing
        if self.discrete:
            actor = sac_loss.discrete_actor_loss(
                info["log_probs"], info["q_pi"], alpha, weight, count
            )
            log_prob = (info["log_probs"].exp() * info["log_probs"]).sum(-1)
        else:
            actor = sac_loss.actor_loss(info["log_prob"], info["q_pi"], alpha, weight, count)
            log_prob = info["log_prob"]
        terms = {"loss/critic": critic, "loss/actor": actor}
        if self.autotune_alpha:
            terms["loss/alpha"] = sac_loss.alpha_loss(
                self.log_alpha, log_prob.detach(), self.target_entropy, weight, count
            )
        with torch.no_grad():
            extra = {
                "train/alpha": alpha,
                "train/entropy": -sac_loss.weighted_mean(log_prob, weight, count),
                "train/q": sac_loss.weighted_mean(info["q"].mean(0), weight, count),
                "train/td_error": sac_loss.weighted_mean(priorities, weight, count),
            }
        return LossInfo(sum(terms.values()), {**terms, **extra}), priorities

    def _losses(self, inputs: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        loss_info, priorities = self._loss_terms(self.train_step(inputs).info)
        return loss_info.loss, loss_info.extra, priorities.detach()
