"""REINFORCE with a value baseline, written outside cadence: a worked example of adding
an algorithm (see docs/adding-an-algorithm.md).

Williams 1992, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning", https://doi.org/10.1007/BF00992696.

Three pieces make an algorithm: an attrs config class, an `Algorithm` subclass, and a
builder. One registration makes ``cadence train`` know it: from Python,

    from cadence.algorithms.registry import register_algorithm
    register_algorithm("reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce")

or, for the ``cadence`` command, the ``cadence.algorithms`` entry point of an installed
package naming `REGISTRATION`. Then ``cadence train ppo_cartpole algorithm=reinforce``.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from attrs import field
from attrs.validators import ge, gt, in_, le
from torch import nn

from cadence.algorithms import Algorithm, AlgorithmRegistration, AlgStep, LossInfo
from cadence.algorithms.returns import discounted_return
from cadence.data.experience import Experience
from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.networks import MLP, make_action_head, make_encoder


@attrs.define(kw_only=True)
class ReinforceConfig:
    """REINFORCE's hyperparameters; each ``doc`` shows in ``cadence train NAME --help``."""

    name: str = field(
        default="reinforce", validator=in_(["reinforce"]), metadata={"doc": "Algorithm name."}
    )
    learning_rate: float = field(default=1e-2, validator=gt(0), metadata={"doc": "Adam step size."})
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    max_grad_norm: float = field(
        default=1.0, validator=gt(0), metadata={"doc": "Global gradient-norm clipping threshold."}
    )


class Reinforce(Algorithm):
    """A policy and a value baseline, one gradient step on each whole unroll.

    Args:
        observation_spec: the env's observation spec.
        action_spec: the env's action spec.
        network_config: the experiment's ``network`` section.
        config: the hyperparameters.
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, network_config: Any, config: Any):
        super().__init__()
        self.gamma = config.gamma
        self.max_grad_norm = config.max_grad_norm  # clipping comes with `minimize`
        self.encoder = make_encoder(observation_spec, network_config)
        self.body = MLP(self.encoder.output_dim, tuple(network_config.hidden_sizes))
        self.head = make_action_head(
            self.body.output_dim,
            action_spec,
            network_config.action_head,
            network_config.init_log_std,
        )
        self.value = nn.Linear(self.body.output_dim, 1)
        self._optimizer = torch.optim.Adam(self.parameters(), lr=config.learning_rate)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self._optimizer}

    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        return AlgStep(output=self._policy(time_step.observation).mode, state=state)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        action = self._policy(time_step.observation).sample()
        return AlgStep(output=action, state=state, info={"action": action})

    @torch.no_grad()
    def preprocess_experience(self, experience: Experience) -> dict[str, Any]:
        """Discounted returns of the unroll, as ``[N]`` samples (LAST steps dropped:
        their actions were ignored by the auto-reset)."""
        time_step = experience.time_step
        num_steps, batch_size = time_step.step_type.shape
        features = self.body(self.encoder(time_step.observation.flatten(0, 1)))
        value = self.value(features).reshape(num_steps, batch_size)
        returns = discounted_return(
            time_step.reward, time_step.discount, time_step.step_type, value, self.gamma
        )
        valid = (time_step.step_type[:-1] != StepType.LAST).flatten()
        return {
            "observation": time_step.observation[:-1].flatten(0, 1)[valid],
            "action": experience.info["action"].flatten(0, 1)[valid],
            "return": returns.flatten()[valid],
        }

    def train_step(self, inputs: dict[str, Any], state: Nest) -> AlgStep:
        features = self.body(self.encoder(inputs["observation"]))
        log_prob = self.head(features).log_prob(inputs["action"])
        value = self.value(features).squeeze(-1)
        return AlgStep(
            output=(), state=state, info={**inputs, "log_prob": log_prob, "value": value}
        )

    def calc_loss(self, info: dict[str, torch.Tensor]) -> LossInfo:
        advantage = (info["return"] - info["value"]).detach()
        terms = {
            "loss/policy": -(advantage * info["log_prob"]).mean(),
            "loss/value": 0.5 * (info["return"] - info["value"]).square().mean(),
        }
        return LossInfo(sum(terms.values()), terms)

    def _policy(self, observation: torch.Tensor) -> torch.distributions.Distribution:
        return self.head(self.body(self.encoder(observation)))


def make_reinforce(
    config: ReinforceConfig, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> Reinforce:
    """The builder ``cadence train`` calls."""
    return Reinforce(observation_spec, action_spec, network_config, config)


REGISTRATION = AlgorithmRegistration(config=ReinforceConfig, builder=make_reinforce)
"""What an installed package's ``cadence.algorithms`` entry point names."""
