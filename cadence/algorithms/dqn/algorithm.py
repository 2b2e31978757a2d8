"""`DQNAlgorithm`: epsilon-greedy Q-learning from replayed windows.

Mnih et al. 2015, "Human-level control through deep reinforcement learning",
https://www.nature.com/articles/nature14236, with double Q (van Hasselt et al.
2016, https://arxiv.org/abs/1509.06461), n-step targets and optional
prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

Per minibatch (the contract's default `update`): ``train_step`` (Q of the action
taken, n-step target from the target network) -> ``calc_loss`` -> Adam step with
gradient clipping -> ``after_update`` (every ``target_update_period`` steps the
target moves ``tau`` of the way to the online network) -> ``[N]`` |TD error| as
new priorities (`priorities`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo, UpdateResult
from cadence.algorithms.dqn.config import DQNConfig
from cadence.algorithms.dqn.loss import (
    DQNLoss,
    bootstrap_value,
    first_step_is_transition,
    n_step_targets,
)
from cadence.algorithms.optimizers import make_adam
from cadence.data.nest import Nest, map_structure
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplaySample


def linear_epsilon(fraction: float, start: float, end: float, exploration_fraction: float) -> float:
    """Epsilon after ``fraction`` of the budget: ``start`` to ``end`` over ``exploration_fraction``.

    >>> linear_epsilon(0.05, 1.0, 0.1, exploration_fraction=0.1)
    0.55
    """
    if exploration_fraction <= 0:
        return end
    progress = min(max(fraction, 0.0) / exploration_fraction, 1.0)
    return start + progress * (end - start)


class DQNAlgorithm(Algorithm):
    """A Q network, its target network and an epsilon-greedy behaviour policy.

    Args:
        q_network: observations ``[*B, ...]`` to action values ``[*B, A]``.
        config: the hyperparameters (`DQNConfig`).

    >>> from cadence.data.specs import TensorSpec
    >>> from cadence.networks import QNetwork, make_encoder
    >>> dqn = DQNAlgorithm(QNetwork(make_encoder(TensorSpec((4,))), 2, (32,)), DQNConfig())
    >>> dqn.set_progress(0.05)
    >>> round(dqn.epsilon, 3)
    0.525
    """

    own_update = True  # Python bookkeeping (targets, epsilon) around its in-graph step

    def __init__(self, q_network: nn.Module, config: DQNConfig):
        super().__init__()
        self.config = config
        self.q_network = q_network
        self.target_network = copy.deepcopy(q_network).requires_grad_(False)
        self.loss = DQNLoss(config)
        self._optimizer = make_adam(
            q_network.parameters(), config.learning_rate, eps=config.adam_eps
        )
        self._num_updates = 0
        # The rate the rollout reads, as a tensor: a compiled unroll would bake a Python
        # float into its graph (and, skipping its guards, never see it change).
        self.register_buffer("_epsilon", torch.tensor(0.0), persistent=False)
        self.epsilon = config.epsilon_start
        self.max_grad_norm = config.max_grad_norm

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self._optimizer}

    @property
    def num_updates(self) -> int:
        """Optimizer steps taken so far (checkpointed: it times the target updates)."""
        return self._num_updates

    @property
    def epsilon(self) -> float:
        """The exploration rate of the rollout (unless ``agent_info`` gives one)."""
        return self._epsilon_value

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._epsilon_value = float(value)
        self._epsilon.fill_(value)

    def set_progress(self, fraction: float) -> None:
        """Sets epsilon for ``fraction`` of the env-step budget spent (linear decay)."""
        config = self.config
        self.epsilon = linear_epsilon(
            fraction, config.epsilon_start, config.epsilon_end, config.exploration_fraction
        )

    # ------------------------------------------------------------------ acting

    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """The greedy action ``argmax_a Q(s, a)`` ``[B]``."""
        return AlgStep(output=self.q_network(time_step.observation).argmax(dim=-1), state=state)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """A uniform random action with probability epsilon, else the greedy one.

        ``agent_info["epsilon"]`` (``[B]``), where given, is each slot's own epsilon
        instead of the schedule's.
        """
        q_values = self.q_network(time_step.observation)
        greedy = q_values.argmax(dim=-1)
        random = torch.randint(q_values.shape[-1], greedy.shape, device=greedy.device)
        epsilon = agent_info["epsilon"] if "epsilon" in agent_info else self._epsilon
        explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
        return AlgStep(output=torch.where(explore, random, greedy), state=state)

    # ---------------------------------------------------------------- learning

    def preprocess_experience(self, sample: ReplaySample) -> dict[str, Nest]:
        """The ``[N, n_step + 1]`` windows as the tensors `train_step` reads."""
        time_step = sample.time_step
        return {
            "observation": time_step.observation,
            "action": sample.action[:, 0],
            "reward": time_step.reward,
            "discount": time_step.discount,
            "step_type": time_step.step_type,
            "weights": sample.weights,
        }

    def train_step(self, inputs: dict[str, Nest], state: Nest) -> AlgStep:
        """Q of the action taken at each window's first step and its fixed n-step target."""
        observation = inputs["observation"]
        first = map_structure(lambda x: x[:, 0], observation)
        q_all = self.q_network(first)
        q_value = q_all.gather(-1, inputs["action"].long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            later = map_structure(lambda x: x[:, 1:], observation)
            online = self.q_network(later) if self.config.double_q else None
            next_value = bootstrap_value(self.target_network(later), online)
            target = n_step_targets(
                inputs["reward"],
                inputs["discount"],
                inputs["step_type"],
                next_value,
                self.config.gamma,
                self.config.n_step,
            )
        info = {
            "q_value": q_value,
            "target": target,
            "weights": inputs["weights"],
            "valid": first_step_is_transition(inputs["step_type"]),
        }
        return AlgStep(output=(), state=state, info=info)

    def calc_loss(self, info: dict[str, torch.Tensor]) -> LossInfo:
        return self.loss(info)

    def update(self, batch: dict[str, Nest]) -> UpdateResult:
        """One gradient step (one graph when compiled), then the target update when due
        and the exploration rate's metric (Python state, kept out of the graph)."""
        result = self.in_graph(self.update_step, batch)
        self.after_update()
        result.metrics["train/epsilon"] = torch.tensor(self.epsilon)
        return result

    def update_step(self, batch: dict[str, Nest]) -> UpdateResult:
        """`update`'s gradient step: ``train_step -> calc_loss -> minimize``."""
        step = self.train_step(batch, ())
        loss_info = self.calc_loss(step.info)
        grad_norm = self.minimize(loss_info.loss)
        return self.update_result(loss_info, grad_norm, self.priorities(step.info))

    def priorities(self, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` |TD error| of each window (0 where the window is masked out)."""
        return ((info["q_value"].detach() - info["target"]).abs()) * info["valid"]

    @torch.no_grad()
    def after_update(self) -> None:
        """Every ``target_update_period`` steps: ``target <- (1 - tau) target + tau online``."""
        self._num_updates += 1
        if self._num_updates % self.config.target_update_period:
            return
        self.update_target(self.config.target_update_tau)

    @torch.no_grad()
    def update_target(self, tau: float) -> None:
        """Moves the target network ``tau`` of the way to the online one (1: a copy)."""
        online = self.q_network.state_dict()
        for key, target in self.target_network.state_dict().items():
            if tau >= 1.0 or not target.is_floating_point():
                target.copy_(online[key])  # exact, where a lerp by 1 could round
            else:
                target.lerp_(online[key], tau)

    # ------------------------------------------------------------------- state

    def get_extra_state(self) -> dict[str, Any]:
        return {"num_updates": self._num_updates}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._num_updates = int(state["num_updates"])
