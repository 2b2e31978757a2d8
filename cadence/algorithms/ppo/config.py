"""Hyperparameters of PPO (Schulman et al. 2017, https://arxiv.org/abs/1707.06347)."""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, le

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class PPOConfig:
    """Clipped-objective PPO with GAE, minibatch epochs and optional value clipping."""

    name: str = field(default="ppo", validator=in_(["ppo"]), metadata={"doc": "Algorithm name."})
    learning_rate: float = field(
        default=2.5e-4, validator=gt(0), metadata={"doc": "Adam step size."}
    )
    lr_schedule: Literal["constant", "linear"] = field(
        default="linear",
        validator=in_(["constant", "linear"]),
        metadata={"doc": "'linear' anneals the learning rate to 0 over the env-step budget."},
    )
    adam_eps: float = field(default=1e-5, validator=gt(0), metadata={"doc": "Adam epsilon."})
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    gae_lambda: float = field(
        default=0.95, validator=[ge(0), le(1)], metadata={"doc": "GAE lambda (1 = Monte Carlo)."}
    )
    clip_coef: float = field(
        default=0.2, validator=gt(0), metadata={"doc": "Policy ratio clipping range epsilon."}
    )
    clip_value_loss: bool = field(
        default=False, metadata={"doc": "Clip the value update to clip_coef around the old value."}
    )
    ent_coef: float = field(default=0.0, validator=ge(0), metadata={"doc": "Entropy bonus weight."})
    vf_coef: float = field(default=0.5, validator=ge(0), metadata={"doc": "Value loss weight."})
    compile: CompileMode = compile_field()
    max_grad_norm: float = field(
        default=0.5, validator=gt(0), metadata={"doc": "Global gradient-norm clipping threshold."}
    )
    num_updates_per_train_iter: int = field(
        default=4,
        validator=ge(1),
        metadata={"doc": "Passes (epochs) over each unroll per training iteration."},
    )
    mini_batch_size: int = field(
        default=128,
        validator=ge(1),
        metadata={
            "doc": "Steps per minibatch (of unroll_length * num_envs); with a recurrent "
            "network (network.recurrent), whole env sequences of unroll_length steps per "
            "minibatch (of num_envs)."
        },
    )
    normalize_advantages: bool = field(
        default=True, metadata={"doc": "Normalize advantages per minibatch to zero mean, unit std."}
    )
    target_kl: float | None = field(
        default=None,
        metadata={
            "doc": "Stop the passes (epochs) over an unroll after one whose mean approximate KL "
            "exceeds this (each pass is judged on its own minibatches, not a running mean)."
        },
    )
