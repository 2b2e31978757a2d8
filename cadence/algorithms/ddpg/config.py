"""Hyperparameters of DDPG (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971)."""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import in_

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.algorithms.deterministic_config import (
    exploration_noise_field,
    gamma_field,
    learning_rate_field,
    max_grad_norm_field,
    tau_field,
)
from cadence.algorithms.off_policy_config import OffPolicyConfig, check_off_policy_config
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class DDPGConfig:
    """Deep deterministic policy gradient: one critic, actor and targets updated every step.

    Exploration is Gaussian rather than the paper's Ornstein-Uhlenbeck noise, which
    Fujimoto et al. 2018 found to bring no benefit. ``exploration_noise`` is in
    normalized action units: a std of 0.1 is 5% of the action range.
    """

    name: str = field(default="ddpg", validator=in_(["ddpg"]), metadata={"doc": "Algorithm name."})
    off_policy: OffPolicyConfig = field(
        factory=OffPolicyConfig,
        validator=check_off_policy_config,
        metadata={"doc": "Replay buffer and minibatches (windows of L steps: L-1-step targets)."},
    )
    actor_learning_rate: float = learning_rate_field("the actor")
    critic_learning_rate: float = learning_rate_field("the critic")
    gamma: float = gamma_field()
    tau: float = tau_field()
    exploration_noise: float = exploration_noise_field()
    compile: CompileMode = compile_field()
    max_grad_norm: float | None = max_grad_norm_field()
