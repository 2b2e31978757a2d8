"""`OffPolicyConfig`: the replay and training-iteration knobs every off-policy algorithm shares.

Each off-policy algorithm config holds one under ``off_policy`` (composition, not a
base class), so ``algorithm.off_policy.mini_batch_size=128`` means the same thing for
DQN, SAC, TD3 and DDPG.
"""

from __future__ import annotations

import attrs
from attrs import field
from attrs.validators import ge, gt, le


@attrs.define(kw_only=True)
class OffPolicyConfig:
    """How experience flows through the replay buffer into minibatches (DESIGN §5, §7)."""

    replay_buffer_length: int = field(
        default=100_000,
        validator=ge(1),
        metadata={"doc": "Steps kept per environment (each env has its own ring)."},
    )
    initial_collect_steps: int = field(
        default=1_000,
        validator=ge(0),
        metadata={"doc": "Env steps (all envs together) taken with uniform random actions first."},
    )
    mini_batch_size: int = field(
        default=256, validator=ge(1), metadata={"doc": "Windows per minibatch."}
    )
    mini_batch_length: int = field(
        default=2,
        validator=ge(1),
        metadata={"doc": "Consecutive steps per window (2 for one-step TD: s_t and s_t+1)."},
    )
    num_updates_per_train_iter: int = field(
        default=1,
        validator=ge(1),
        metadata={
            "doc": "Optimizer steps per training iteration (passes over the buffer when "
            "whole_replay_buffer_training)."
        },
    )
    whole_replay_buffer_training: bool = field(
        default=False,
        metadata={
            "doc": "Train on the whole buffer, shuffled along the batch dim, time order kept, "
            "instead of on sampled windows."
        },
    )
    prioritized_replay: bool = field(
        default=False,
        metadata={
            "doc": "Sample windows by priority (Schaul et al. 2016) with importance weights."
        },
    )
    priority_alpha: float = field(
        default=0.6, validator=ge(0), metadata={"doc": "Priority exponent alpha (0: uniform)."}
    )
    priority_beta: float = field(
        default=0.4,
        validator=[ge(0), le(1)],
        metadata={"doc": "Initial importance-weight exponent beta, annealed to 1 over the budget."},
    )
    priority_epsilon: float = field(
        default=1e-6, validator=gt(0), metadata={"doc": "Added to |TD error| to form a priority."}
    )
