"""Hyperparameters of TD3 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477)."""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import ge, in_

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
class TD3Config:
    """Twin Delayed DDPG: clipped double Q, target policy smoothing, delayed actor updates.

    Noise scales are in normalized action units: a std of 0.1 is 5% of the action range.
    """

    name: str = field(default="td3", validator=in_(["td3"]), metadata={"doc": "Algorithm name."})
    off_policy: OffPolicyConfig = field(
        factory=OffPolicyConfig,
        validator=check_off_policy_config,
        metadata={"doc": "Replay buffer and minibatches (windows of L steps: L-1-step targets)."},
    )
    actor_learning_rate: float = learning_rate_field("the actor")
    critic_learning_rate: float = learning_rate_field("the critics")
    gamma: float = gamma_field()
    tau: float = tau_field()
    num_critics: int = field(
        default=2,
        validator=ge(2),
        metadata={"doc": "Critics in the ensemble; targets bootstrap from their minimum."},
    )
    exploration_noise: float = exploration_noise_field()
    target_policy_noise: float = field(
        default=0.2,
        validator=ge(0),
        metadata={"doc": "Std of the smoothing noise added to the target actor's actions."},
    )
    target_noise_clip: float = field(
        default=0.5,
        validator=ge(0),
        metadata={
            "doc": "The smoothing noise is clipped to [-target_noise_clip, target_noise_clip]."
        },
    )
    policy_delay: int = field(
        default=2,
        validator=ge(1),
        metadata={"doc": "Critic updates per actor and target-network update."},
    )
    compile: CompileMode = compile_field()
    max_grad_norm: float | None = max_grad_norm_field()
