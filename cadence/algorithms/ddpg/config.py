"""Hyperparameters of DDPG (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971)."""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, le, optional

from cadence.algorithms.compile_config import CompileMode, compile_field
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
    actor_learning_rate: float = field(
        default=1e-3, validator=gt(0), metadata={"doc": "Adam step size of the actor."}
    )
    critic_learning_rate: float = field(
        default=1e-3, validator=gt(0), metadata={"doc": "Adam step size of the critic."}
    )
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    tau: float = field(
        default=0.005,
        validator=[gt(0), le(1)],
        metadata={"doc": "Polyak coefficient of the target networks (1: hard copy)."},
    )
    exploration_noise: float = field(
        default=0.1,
        validator=ge(0),
        metadata={"doc": "Std of the Gaussian noise added to rollout actions."},
    )
    compile: CompileMode = compile_field()
    max_grad_norm: float | None = field(
        default=None,
        validator=optional(gt(0)),
        metadata={
            "doc": "Clip each optimizer's gradients to this global norm (null: no clipping)."
        },
    )
