"""Hyperparameters of TD3 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477)."""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, le, optional

from cadence.algorithms.compile_config import CompileMode, compile_field
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
    actor_learning_rate: float = field(
        default=1e-3, validator=gt(0), metadata={"doc": "Adam step size of the actor."}
    )
    critic_learning_rate: float = field(
        default=1e-3, validator=gt(0), metadata={"doc": "Adam step size of the critics."}
    )
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    tau: float = field(
        default=0.005,
        validator=[gt(0), le(1)],
        metadata={"doc": "Polyak coefficient of the target networks (1: hard copy)."},
    )
    num_critics: int = field(
        default=2,
        validator=ge(2),
        metadata={"doc": "Critics in the ensemble; targets bootstrap from their minimum."},
    )
    exploration_noise: float = field(
        default=0.1,
        validator=ge(0),
        metadata={"doc": "Std of the Gaussian noise added to rollout actions."},
    )
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
    max_grad_norm: float | None = field(
        default=None,
        validator=optional(gt(0)),
        metadata={
            "doc": "Clip each optimizer's gradients to this global norm (null: no clipping)."
        },
    )
