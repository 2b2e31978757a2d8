"""Hyperparameters of DQN (Mnih et al. 2015, https://www.nature.com/articles/nature14236)."""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, instance_of, le

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.data.typed_fields import CHECKED_SETATTR


def _window_fits_n_step(instance: Any, attribute: attrs.Attribute, value: OffPolicyConfig) -> None:
    """An n-step target reads the window's first step and the n steps after it."""
    if value.mini_batch_length != instance.n_step + 1:
        raise ValueError(
            f"off_policy.mini_batch_length must be n_step + 1 = {instance.n_step + 1} (the step "
            f"trained and the {instance.n_step} after it), got {value.mini_batch_length}; set "
            f"algorithm.off_policy.mini_batch_length={instance.n_step + 1}"
        )


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class DQNConfig:
    """Deep Q-learning with double Q, n-step targets, a target network and epsilon-greedy."""

    name: str = field(default="dqn", validator=in_(["dqn"]), metadata={"doc": "Algorithm name."})
    learning_rate: float = field(default=1e-4, validator=gt(0), metadata={"doc": "Adam step size."})
    adam_eps: float = field(default=1e-8, validator=gt(0), metadata={"doc": "Adam epsilon."})
    gamma: float = field(
        default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."}
    )
    n_step: int = field(
        default=1,
        validator=ge(1),
        metadata={
            "doc": "Rewards summed before bootstrapping (off_policy.mini_batch_length "
            "must be n_step + 1)."
        },
    )
    double_q: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={
            "doc": "Double Q-learning: the online network picks the bootstrap action, the "
            "target network values it (van Hasselt et al. 2016)."
        },
    )
    td_loss: Literal["huber", "mse"] = field(
        default="huber",
        validator=in_(["huber", "mse"]),
        metadata={"doc": "Loss of the TD error: 'huber' (smooth L1) or 'mse' (squared / 2)."},
    )
    huber_delta: float = field(
        default=1.0, validator=gt(0), metadata={"doc": "Where the Huber loss turns linear."}
    )
    target_update_period: int = field(
        default=1_000,
        validator=ge(1),
        metadata={"doc": "Optimizer steps between target-network updates."},
    )
    target_update_tau: float = field(
        default=1.0,
        validator=[gt(0), le(1)],
        metadata={"doc": "Polyak factor of each target update (1: copy the online network)."},
    )
    compile: CompileMode = compile_field()
    max_grad_norm: float = field(
        default=10.0, validator=gt(0), metadata={"doc": "Global gradient-norm clipping threshold."}
    )
    epsilon_start: float = field(
        default=1.0, validator=[ge(0), le(1)], metadata={"doc": "Initial exploration epsilon."}
    )
    epsilon_end: float = field(
        default=0.05, validator=[ge(0), le(1)], metadata={"doc": "Final exploration epsilon."}
    )
    exploration_fraction: float = field(
        default=0.1,
        validator=[ge(0), le(1)],
        metadata={"doc": "Fraction of the env-step budget over which epsilon decays linearly."},
    )
    off_policy: OffPolicyConfig = field(
        factory=OffPolicyConfig,
        validator=[instance_of(OffPolicyConfig), _window_fits_n_step],
        metadata={"doc": "Replay buffer and minibatches."},
    )
