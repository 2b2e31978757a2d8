"""`OffPolicyConfig`: the replay and training-iteration knobs every off-policy algorithm shares.

Each off-policy algorithm config holds one under ``off_policy`` (composition, not a
base class), so ``algorithm.off_policy.mini_batch_size=128`` means the same thing for
DQN, SAC, TD3 and DDPG.
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field
from attrs.validators import ge, gt, le, optional

from cadence.algorithms.registry import algorithm_capabilities
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
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
            "doc": "Train on the whole buffer instead of on sampled windows: each pass holds "
            "a window starting at every stored step (every transition once), shuffled along "
            "the batch dim, time order kept."
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
    replay_chunk_length: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "doc": "Steps per replay chunk file: each completed chunk is written to the run "
            "directory while training runs, so a checkpoint writes only the chunks in "
            "progress (None: the largest divisor of replay_buffer_length under 4 MiB per "
            "chunk; must divide replay_buffer_length)."
        },
    )

    def __attrs_post_init__(self) -> None:
        chunk = self.replay_chunk_length
        if chunk is not None and self.replay_buffer_length % chunk:
            raise ValueError(
                f"replay_chunk_length {chunk} must divide replay_buffer_length "
                f"{self.replay_buffer_length} (chunks tile each env's ring)"
            )


def check_off_policy_config(instance: Any, attribute: Any, value: Any) -> None:
    """attrs validator of an ``off_policy`` field: an `OffPolicyConfig` with windows of >= 2 steps.

    Raises:
        TypeError: not an `OffPolicyConfig`.
        ValueError: ``mini_batch_length < 2`` (a TD target needs s_t and s_t+1).
    """
    if not isinstance(value, OffPolicyConfig):
        raise TypeError(f"'{attribute.name}' must be an OffPolicyConfig, got {value!r}")
    if value.mini_batch_length < 2:
        raise ValueError(
            f"'{attribute.name}.mini_batch_length' must be >= 2 (a TD target needs s_t and "
            f"s_t+1), got {value.mini_batch_length}"
        )


def off_policy_config(algorithm_config: Any) -> OffPolicyConfig | None:
    """The ``off_policy`` section of an algorithm config, None for an on-policy algorithm.

    The scheme is the one the algorithm's registration declares
    (`cadence.algorithms.registry.AlgorithmCapabilities`); one that declares none trains
    with the off-policy scheme exactly when its config has an ``off_policy`` field holding
    an `OffPolicyConfig`.

    Raises:
        TypeError: the registration declares the off-policy scheme and the config has no
            ``off_policy`` field holding an `OffPolicyConfig`.
    """
    scheme = algorithm_capabilities(algorithm_config.name).scheme
    section = getattr(algorithm_config, "off_policy", None)  # the config's own value
    if scheme == "on_policy":
        return None
    if isinstance(section, OffPolicyConfig):
        return section
    if scheme == "off_policy":
        raise TypeError(
            f"algorithm {algorithm_config.name!r} is registered with scheme='off_policy', "
            f"but its config {type(algorithm_config).__name__} has no 'off_policy' field "
            "holding an OffPolicyConfig: add one (off_policy: OffPolicyConfig = "
            "attrs.field(factory=OffPolicyConfig)) or register it with scheme='on_policy'"
        )
    return None
