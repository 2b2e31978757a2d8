"""Configuration of the training environments: which env, how many, how batched and wrapped."""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import field
from attrs.validators import deep_mapping, ge, gt, in_, instance_of, min_len, optional

from cadence.data.typed_fields import CHECKED_SETATTR
from cadence.envs.wrapper_config import check_wrappers


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class EnvConfig:
    """The arguments of `make_env` for an experiment's training environments.

    Example:
        >>> EnvConfig(name="Pendulum-v1", num_envs=4).backend
        'auto'
    """

    name: str = field(
        default="CartPole-v1",
        validator=min_len(1),
        metadata={
            "doc": "Gymnasium id of the environment (e.g. 'CartPole-v1', "
            "'cadence/PixelCartPole-v1'), or 'module:Id' to import the module that registers "
            "Id first (a module in the working directory works)."
        },
    )
    num_envs: int = field(
        default=8, validator=ge(1), metadata={"doc": "Environments stepped together as one batch."}
    )
    backend: Literal[
        "serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto"
    ] = field(
        default="auto",
        validator=in_(
            ["serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto"]
        ),
        metadata={
            "doc": "Batching back end ('vector': the id's Gymnasium vector env, the whole "
            "batch in one call; 'auto': on a CPU the vector env where the id registers one "
            "and there are no env.wrappers, else tensor-native if available and the batch is "
            "large or not on a CPU, else serial or parallel by the step cost measured once per "
            "machine; 'prefer_tensor': "
            "cadence's tensor-native env when it has one for env.name and there are no "
            "env.wrappers, else what 'auto' picks for a Gymnasium env)."
        },
    )
    max_episode_steps: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "doc": "Cut episodes (LAST, discount 1) after this many steps (None: the env's own limit)."
        },
    )
    num_workers: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={"doc": "Worker processes of the 'parallel' back end (None: one per spare core)."},
    )
    spin_us: float = field(
        default=1000.0,
        validator=ge(0.0),
        metadata={
            "doc": "How long the 'parallel' back end's parent and workers poll shared memory "
            "for each other before sleeping (0: always sleep, e.g. on a machine shared by "
            "many jobs)."
        },
    )
    step_timeout_s: float | None = field(
        default=60.0,
        validator=optional(gt(0.0)),
        metadata={
            "doc": "The longest a 'parallel' worker may take to answer a step or reset; one "
            "silent for longer has hung: it is killed and restarted like a worker that died "
            "(its episodes end with LAST). None: wait for ever."
        },
    )
    build_timeout_s: float | None = field(
        default=300.0,
        validator=optional(gt(0.0)),
        metadata={
            "doc": "The longest 'parallel' workers may take to build their environments; a "
            "longer build is an error naming the env. None: wait for ever."
        },
    )
    pin_workers: bool | None = field(
        default=None,
        validator=optional(instance_of(bool)),
        metadata={
            "doc": "Pin each 'parallel' worker to a core of its own (None: when there is one "
            "worker per core)."
        },
    )
    async_batch_size: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "doc": "Step the 'parallel' back end asynchronously: each step returns the "
            "async_batch_size envs ready first (a multiple of the envs per worker, below "
            "num_envs) while the others still step. Per-env data is lockstep's but a run's "
            "numbers depend on timing: with backend 'auto' it needs "
            "trainer.deterministic=false. None (or num_envs): lockstep."
        },
    )
    env_kwargs: dict[str, Any] = field(
        factory=dict,
        validator=deep_mapping(key_validator=instance_of(str), mapping_validator=instance_of(dict)),
        metadata={"doc": "Keyword arguments passed to gymnasium.make."},
    )
    wrappers: list[dict[str, Any]] = field(
        factory=list,
        validator=check_wrappers,
        metadata={
            "doc": "Gymnasium wrappers applied to each env, innermost first: [{name: "
            "FrameSkip, skip: 4}, ...]; a name is a wrapper of cadence.envs.wrappers, a class "
            "of gymnasium.wrappers, or 'module:Class'."
        },
    )

    action_repeat: int = field(
        default=1,
        validator=ge(1),
        metadata={
            "doc": "Repeat each action this many simulator steps, summing the rewards (the "
            "FrameSkip wrapper, innermost). Env steps (the budget, every interval, "
            "initial_collect_steps) count simulator steps: unroll_length x num_envs x "
            "action_repeat per unroll."
        },
    )

    @property
    def all_wrappers(self) -> list[dict[str, Any]]:
        """``wrappers`` with the action repeat (``FrameSkip``) first when it is above 1."""
        repeat = (
            [{"name": "FrameSkip", "skip": self.action_repeat}] if self.action_repeat > 1 else []
        )
        return repeat + list(self.wrappers)

    def __attrs_post_init__(self) -> None:
        if self.all_wrappers and self.backend == "tensor":
            raise ValueError(
                "env.backend='tensor' steps cadence's torch implementation of the env, not a "
                "Gymnasium env, so it cannot apply env.wrappers; use backend 'prefer_tensor', "
                "'auto', 'serial' or 'parallel', or no wrappers (and action_repeat 1)"
            )
        if self.all_wrappers and self.backend == "vector":
            raise ValueError(
                "env.backend='vector' steps a Gymnasium vector env, which cannot apply "
                "env.wrappers to its envs; use backend 'auto', 'serial' or 'parallel', or no "
                "wrappers (and action_repeat 1)"
            )
