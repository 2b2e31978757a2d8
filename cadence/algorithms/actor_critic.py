"""`ActorCriticAlgorithm`: the on-policy actor-critic shared by PPO and A2C.

PPO and A2C differ only in their loss and their update schedule, so both are
this one algorithm composed with a different loss (`PPOLoss`, `A2CLoss`), run under a
different update schedule (`OnPolicySchedule`: ``num_updates_per_train_iter`` passes over
each unroll in minibatches of ``mini_batch_size``, DESIGN §5, which the run reads from
the config and hands to `OnPolicyScheme`): no subclass switches anything off.

With a recurrent network (`RecurrentActorCriticNetwork`, ``network.recurrent``) the
state is explicit: the collector carries it and resets it at FIRST steps, and training
runs on the unroll's whole env sequences ``[B, T]`` (truncated BPTT over the unroll),
each from the state stored at its first step and reset at every FIRST inside it, so the
schedule's ``mini_batch_size`` counts sequences rather than steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch

from cadence.algorithms.actor_critic_network import (
    ActorCriticNetwork,
    RecurrentActorCriticNetwork,
)
from cadence.algorithms.agent_view import AlgorithmAgent
from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo
from cadence.algorithms.returns import generalized_advantage_estimation
from cadence.data.experience import Experience
from cadence.data.nest import Nest, flatten, map_structure, pack_sequence_as
from cadence.data.specs import Spec
from cadence.data.time_step import StepType, TimeStep


class ActorCriticAlgorithm(Algorithm):
    """A policy and a value function trained on-policy from GAE advantages.

    Args:
        network: the policy and value networks, feed-forward or recurrent.
        loss: maps the `train_step` info of a minibatch to a `LossInfo`.
        optimizer: builds the optimizer from the parameters.
        action_spec: the env's action spec (continuous actions are clipped to it).
        gamma: discount factor.
        gae_lambda: GAE lambda (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).
        learning_rate: the initial learning rate.
        lr_schedule: ``"linear"`` anneals it to 0 as training progresses.
        max_grad_norm: global gradient-norm clipping threshold.
        target_kl: stop the epochs early when the approximate KL exceeds it.
    """

    def __init__(
        self,
        network: ActorCriticNetwork | RecurrentActorCriticNetwork,
        loss: Callable[[dict[str, torch.Tensor]], LossInfo],
        optimizer: Callable[[Any], torch.optim.Optimizer],
        action_spec: Spec,
        *,
        gamma: float,
        gae_lambda: float,
        learning_rate: float,
        lr_schedule: Literal["constant", "linear"] = "constant",
        max_grad_norm: float = 0.5,
        target_kl: float | None = None,
    ):
        super().__init__()
        self.network = network
        self.recurrent = isinstance(network, RecurrentActorCriticNetwork)
        # Dropping the steps of episode ends leaves unrolls of varying size (whole
        # sequences, with a recurrent network, keep theirs).
        self.variable_batch_size = not self.recurrent
        self.loss = loss
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.learning_rate = learning_rate
        self.lr_schedule = lr_schedule
        self.max_grad_norm: float | None = max_grad_norm
        self.target_kl = target_kl
        self._optimizer = optimizer(self.network.parameters())
        # Continuous actions (each continuous entry of a Dict or Tuple) are clipped to
        # their bounds: the buffers of leaf i of the action nest, in `flatten`'s order.
        # Per clipped leaf: its index and its bound buffers' names (named once, not per step).
        leaves = flatten(action_spec)  # a CompositeSpec is a dict: a nest of leaf specs
        self._clipped = [
            (i, _bound_name("low", i), _bound_name("high", i))
            for i, leaf in enumerate(leaves)
            if _bounded(leaf)
        ]
        for i, low, high in self._clipped:
            self.register_buffer(low, torch.as_tensor(leaves[i].minimum), persistent=False)
            self.register_buffer(high, torch.as_tensor(leaves[i].maximum), persistent=False)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_critic": self._optimizer}

    def set_progress(self, fraction: float) -> None:
        """Sets the learning rate for ``fraction`` of the training budget spent."""
        scale = max(1.0 - fraction, 0.0) if self.lr_schedule == "linear" else 1.0
        for group in self._optimizer.param_groups:
            group["lr"] = self.learning_rate * scale

    def initial_state(self, batch_size: int) -> Nest:
        """The recurrent network's zero state; ``()`` for a feed-forward one."""
        return self.network.initial_state(batch_size) if self.recurrent else ()

    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        distribution, state = self._policy(time_step.observation, state)
        return AlgStep(output=self._to_env(distribution.mode), state=state)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """A sampled action; ``agent_info["deterministic"]`` (``[B]`` bool), where given,
        makes those slots act with the policy's mode instead."""
        distribution, state = self._policy(time_step.observation, state)
        action = distribution.sample()
        if "deterministic" in agent_info:
            action = _where_rows(agent_info["deterministic"], distribution.mode, action)
        info = {"action": action, "log_prob": distribution.log_prob(action)}
        return AlgStep(output=self._to_env(action), state=state, info=info)

    def as_agent(self) -> AlgorithmAgent:
        """This policy as an rlstructures `Agent`, for the `cadence.collect.Batcher`: each
        step is a `rollout_step`, a recurrent state travels as ``agent_state``."""
        return AlgorithmAgent(self)

    def _policy(
        self, observation: Nest, state: Nest
    ) -> tuple[torch.distributions.Distribution, Nest]:
        if self.recurrent:
            return self.network.step(observation, state)
        return self.network.distribution(observation), state

    @torch.no_grad()
    def preprocess_experience(self, experience: Experience) -> dict[str, Nest]:
        """GAE advantages and returns, flattened to ``[N]`` samples.

        Steps whose time step is LAST are dropped: their action was ignored by
        the auto-reset (DESIGN §2). A recurrent network gets whole env sequences instead
        (`_sequences`). With a compiled update the values and advantages are one graph
        (`_samples`): on CartPole's 33 x 8 unroll, preprocessing takes 0.27 ms instead of
        eager's 0.52.
        """
        if self.recurrent:
            return self._sequences(experience)
        samples, valid = self.in_graph(self._samples, experience.time_step, experience.info)
        return map_structure(lambda x: x[valid], samples)

    def _samples(self, time_step: TimeStep, info: Nest) -> tuple[dict[str, Nest], torch.Tensor]:
        """Every step of the unroll as a ``[T * B]`` sample (observation, action, old log
        probability and value, advantage, return), and which of them to keep (``[T * B]``
        bool: those whose time step is not LAST)."""
        num_steps, batch_size = time_step.step_type.shape
        observation = map_structure(lambda x: x.flatten(0, 1), time_step.observation)
        value = self.network.value(observation).reshape(num_steps, batch_size)
        advantage = generalized_advantage_estimation(
            time_step.reward,
            time_step.discount,
            time_step.step_type,
            value,
            self.gamma,
            self.gae_lambda,
        )
        valid = (time_step.step_type[:-1] != StepType.LAST).flatten()
        samples = {
            "observation": map_structure(lambda x: x[:-1], time_step.observation),
            "action": info["action"],
            "old_log_prob": info["log_prob"],
            "advantage": advantage,
            "return": advantage + value[:-1],
            "old_value": value[:-1],
        }
        return map_structure(lambda x: x.flatten(0, 1), samples), valid

    @torch.no_grad()
    def _sequences(self, experience: Experience) -> dict[str, Nest]:
        """For a recurrent network: the unroll as ``[B, T]`` env sequences with GAE.

        The values are recomputed along each env's sequence from its stored initial state
        (``experience.initial_state``, which the batch carries as ``"initial_state"``),
        the state reset at every FIRST step. LAST steps stay in the sequences, to keep
        them whole, with ``step_type`` telling `train_step` to leave them out of the loss.
        """
        time_step = experience.time_step
        observation = map_structure(_batch_major, time_step.observation)  # [B, T + 1, ...]
        first = _batch_major(time_step.step_type == StepType.FIRST)
        value = self.network.unroll_value(observation, first, experience.initial_state).T
        advantage = generalized_advantage_estimation(
            time_step.reward,
            time_step.discount,
            time_step.step_type,
            value,
            self.gamma,
            self.gae_lambda,
        )
        samples = {
            "observation": map_structure(lambda x: x[:-1], time_step.observation),
            "step_type": time_step.step_type[:-1],
            "action": experience.info["action"],
            "old_log_prob": experience.info["log_prob"],
            "advantage": advantage,
            "return": advantage + value[:-1],
            "old_value": value[:-1],
        }
        batch = map_structure(_batch_major, samples)
        batch["initial_state"] = experience.initial_state
        return batch

    def train_step(self, inputs: dict[str, Nest], state: Nest) -> AlgStep:
        """The loss terms of ``[N]`` samples, or of the non-LAST steps of ``[B, T]``
        sequences from their initial ``state`` (a recurrent network)."""
        if self.recurrent:
            return self._train_sequences(inputs, state)
        distribution, value = self.network.distribution_and_value(inputs["observation"])
        info = {
            "log_prob": distribution.log_prob(inputs["action"]),
            "entropy": distribution.entropy(),
            "value": value,
            "old_log_prob": inputs["old_log_prob"],
            "advantage": inputs["advantage"],
            "return": inputs["return"],
            "old_value": inputs["old_value"],
        }
        return AlgStep(output=(), state=state, info=info)

    def _train_sequences(self, inputs: dict[str, Nest], state: Nest) -> AlgStep:
        step_type = inputs["step_type"]
        distribution, value = self.network.unroll(
            inputs["observation"], step_type == StepType.FIRST, state
        )
        valid = step_type != StepType.LAST
        info = {
            "log_prob": distribution.log_prob(inputs["action"])[valid],
            "entropy": distribution.entropy()[valid],
            "value": value[valid],
            "old_log_prob": inputs["old_log_prob"][valid],
            "advantage": inputs["advantage"][valid],
            "return": inputs["return"][valid],
            "old_value": inputs["old_value"][valid],
        }
        return AlgStep(output=(), state=state, info=info)

    def calc_loss(self, info: dict[str, torch.Tensor]) -> LossInfo:
        return self.loss(info)

    def stop_epochs(self, metrics: Mapping[str, float]) -> bool:
        """Stops the passes after one whose mean approximate KL exceeds ``target_kl``.

        Checked per pass (epoch), on that pass's minibatches only: a running mean over
        all passes would let early, small-KL passes hide a later large step.
        """
        if self.target_kl is None or "train/approx_kl" not in metrics:
            return False
        return metrics["train/approx_kl"] > self.target_kl

    @property
    def may_stop_epochs(self) -> bool:
        return self.target_kl is not None

    def _to_env(self, action: Nest) -> Nest:
        """``action`` clipped to the action spec's bounds (its continuous leaves)."""
        if not self._clipped:
            return action
        if isinstance(action, torch.Tensor):
            return self._clip(action, *self._clipped[0][1:])
        leaves = flatten(action)
        for i, low, high in self._clipped:
            leaves[i] = self._clip(leaves[i], low, high)
        return pack_sequence_as(action, leaves)

    def _clip(self, action: torch.Tensor, low: str, high: str) -> torch.Tensor:
        """``action`` between the buffers named ``low`` and ``high``."""
        return torch.maximum(torch.minimum(action, getattr(self, high)), getattr(self, low))


def _batch_major(x: torch.Tensor) -> torch.Tensor:
    """``[T, B, ...]`` to ``[B, T, ...]``."""
    return x.transpose(0, 1)


def _where_rows(condition: torch.Tensor, yes: Nest, no: Nest) -> Nest:
    """``yes`` in the rows ``[B]`` where ``condition`` holds, else ``no`` (leaf by leaf)."""

    def where(yes: torch.Tensor, no: torch.Tensor) -> torch.Tensor:
        return torch.where(condition.reshape(condition.shape + (1,) * (yes.dim() - 1)), yes, no)

    return map_structure(where, yes, no)


def _bounded(spec: Spec) -> bool:
    return not spec.is_discrete and hasattr(spec, "minimum")


def _bound_name(side: str, leaf: int) -> str:
    """The buffer of one side of a clipped action leaf's bounds: ``_action_low`` and
    ``_action_high`` for a plain action (leaf 0), as they always were."""
    return f"_action_{side}" if leaf == 0 else f"_action_{side}_{leaf}"
