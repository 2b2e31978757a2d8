"""Config fields that DDPG and TD3 declare alike, written once.

`DDPGConfig` and `TD3Config` are two variants of one deterministic actor-critic
(`cadence.algorithms.deterministic_actor_critic`); their shared hyperparameters take
their defaults, validators and docs from here, so the two cannot drift apart. Each
config keeps its own class (its own name, fields and order), as `compile_field` does
for every algorithm's ``compile`` key.
"""

from __future__ import annotations

from typing import Any

from attrs import field
from attrs.validators import ge, gt, le, optional


def learning_rate_field(of: str) -> Any:
    """An Adam step size, 1e-3 by default; ``of``: what it trains (``"the actor"``)."""
    return field(default=1e-3, validator=gt(0), metadata={"doc": f"Adam step size of {of}."})


def gamma_field() -> Any:
    """``gamma``: the discount factor, 0.99 by default."""
    return field(default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount factor."})


def tau_field() -> Any:
    """``tau``: the Polyak coefficient of the target networks, 0.005 by default."""
    return field(
        default=0.005,
        validator=[gt(0), le(1)],
        metadata={"doc": "Polyak coefficient of the target networks (1: hard copy)."},
    )


def exploration_noise_field() -> Any:
    """``exploration_noise``: the std of the Gaussian noise on rollout actions, 0.1 by default."""
    return field(
        default=0.1,
        validator=ge(0),
        metadata={"doc": "Std of the Gaussian noise added to rollout actions."},
    )


def max_grad_norm_field() -> Any:
    """``max_grad_norm``: the global gradient norm each optimizer clips to (None: no clipping)."""
    return field(
        default=None,
        validator=optional(gt(0)),
        metadata={
            "doc": "Clip each optimizer's gradients to this global norm (null: no clipping)."
        },
    )
