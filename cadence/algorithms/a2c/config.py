"""Hyperparameters of A2C (Mnih et al. 2016, https://arxiv.org/abs/1602.01783)."""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, le

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class A2CConfig:
    """Synchronous advantage actor-critic: one gradient step per unroll."""

    name: str = field(default="a2c", validator=in_(["a2c"]), metadata={"doc": "Algorithm name."})
    learning_rate: float = field(
        default=7e-4, validator=gt(0), metadata={"doc": "Optimizer step size."}
    )
    lr_schedule: Literal["constant", "linear"] = field(
        default="constant",
        validator=in_(["constant", "linear"]),
        metadata={"doc": "'linear' anneals the learning rate to 0 over the env-step budget."},
    )
    optimizer: Literal["rmsprop", "adam"] = field(
        default="rmsprop", validator=in_(["rmsprop", "adam"]), metadata={"doc": "Optimizer."}
    )
    optimizer_eps: float = field(
        default=1e-5, validator=gt(0), metadata={"doc": "Optimizer epsilon."}
    )
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    gae_lambda: float = field(
        default=1.0, validator=[ge(0), le(1)], metadata={"doc": "GAE lambda (1 = n-step returns)."}
    )
    ent_coef: float = field(default=0.0, validator=ge(0), metadata={"doc": "Entropy bonus weight."})
    vf_coef: float = field(default=0.5, validator=ge(0), metadata={"doc": "Value loss weight."})
    compile: CompileMode = compile_field()
    max_grad_norm: float = field(
        default=0.5, validator=gt(0), metadata={"doc": "Global gradient-norm clipping threshold."}
    )
    normalize_advantages: bool = field(
        default=False, metadata={"doc": "Normalize advantages to zero mean, unit std."}
    )
