"""Hyperparameters of SAC (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and
https://arxiv.org/abs/1812.05905; discrete actions: Christodoulou 2019,
https://arxiv.org/abs/1910.07207)."""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, instance_of, le, optional

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class SACConfig:
    """Soft actor-critic with twin critics, Polyak target critics and automatic entropy tuning.

    Continuous (Box) actions get a tanh-squashed Gaussian policy scaled to the action bounds;
    a Discrete action space gets a categorical policy with expected values over all actions.
    """

    name: str = field(default="sac", validator=in_(["sac"]), metadata={"doc": "Algorithm name."})
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    actor_learning_rate: float = field(
        default=3e-4, validator=gt(0), metadata={"doc": "Adam step size of the policy."}
    )
    critic_learning_rate: float = field(
        default=3e-4, validator=gt(0), metadata={"doc": "Adam step size of the critics."}
    )
    alpha_learning_rate: float = field(
        default=3e-4, validator=gt(0), metadata={"doc": "Adam step size of log(alpha)."}
    )
    tau: float = field(
        default=0.005,
        validator=[gt(0), le(1)],
        metadata={"doc": "Polyak rate of the target critics: target += tau * (online - target)."},
    )
    num_critics: int = field(
        default=2,
        validator=ge(1),
        metadata={"doc": "Critics in the ensemble; targets and the policy use their minimum."},
    )
    initial_alpha: float = field(
        default=1.0, validator=gt(0), metadata={"doc": "Entropy temperature alpha at the start."}
    )
    autotune_alpha: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={"doc": "Learn alpha so the policy entropy tracks target_entropy (else fixed)."},
    )
    target_entropy: float | None = field(
        default=None,
        validator=optional(instance_of((int, float))),
        metadata={
            "doc": "Entropy the tuned alpha aims at. None: -action_dim for continuous actions, "
            "target_entropy_fraction * log(num_actions) for discrete ones."
        },
    )
    target_entropy_fraction: float = field(
        default=0.98,
        validator=[gt(0), le(1)],
        metadata={"doc": "Discrete actions: the target entropy as a fraction of log(num_actions)."},
    )
    compile: CompileMode = compile_field()
    max_grad_norm: float | None = field(
        default=None,
        validator=optional(gt(0)),
        metadata={
            "doc": "Clip each optimizer's gradients to this global norm (null: no clipping)."
        },
    )
    off_policy: OffPolicyConfig = field(
        factory=OffPolicyConfig,
        validator=instance_of(OffPolicyConfig),
        metadata={"doc": "Replay buffer and minibatch knobs."},
    )
