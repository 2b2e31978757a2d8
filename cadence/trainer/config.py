"""Configuration of the training loop: budget, unroll, intervals, checkpoints."""

from __future__ import annotations

import re
from typing import Literal

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, le

from cadence.algorithms.compile_config import DEFAULT_UPDATES_PER_GRAPH, MAX_UPDATES_PER_GRAPH
from cadence.data.typed_fields import CHECKED_SETATTR

DEFAULT_EVAL_MAX_EPISODE_STEPS = 10_000
"""An evaluation episode's steps at most unless told (``trainer.eval_max_episode_steps``): an
env without a time limit whose policy never ends an episode (CliffWalking's agent walking
into a wall) would otherwise be evaluated forever."""

_DEVICE = re.compile(r"^(cpu(:0)?|cuda(:\d+)?|mps)$")


def check_device(name: str, *, collector: bool = False) -> None:
    """Raises ValueError when ``name`` is not a ``trainer.device`` (or, with ``collector``,
    a ``trainer.collector_device``) setting; whether the device exists is checked when a
    run starts (`cadence.trainer.placement`)."""
    special = ("auto", "learner") if collector else ("auto",)
    if name in special or _DEVICE.match(name):
        return
    key = "trainer.collector_device" if collector else "trainer.device"
    allowed = ", ".join(repr(s) for s in (*special, "cpu", "cuda", "cuda:N"))
    raise ValueError(f"{key} must be one of {allowed}; got {name!r}")


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class TrainerConfig:
    """When to stop, how much to unroll, and how often to log, evaluate and checkpoint.

    Intervals count training iterations (one unroll plus one update each).
    """

    num_env_steps: int = field(
        default=100_000, validator=ge(1), metadata={"doc": "Env-step budget of the run."}
    )
    schedule_horizon: int = field(
        default=0,
        validator=ge(0),
        metadata={
            "doc": "Env steps over which the schedules run (a linear learning rate, DQN's "
            "epsilon, prioritized replay's beta); past it they keep their final values. 0: "
            "the num_env_steps the run was first started with, so extending a run's budget "
            "(--resume-with-changes) does not rescale them."
        },
    )
    unroll_length: int = field(
        default=128, validator=ge(1), metadata={"doc": "Steps per env per training iteration."}
    )
    summary_interval: int = field(
        default=1, validator=ge(1), metadata={"doc": "Iterations between metric log points."}
    )
    eval_interval: int = field(
        default=10,
        validator=ge(0),
        metadata={
            "doc": "Iterations between evaluations; the last iteration is always evaluated "
            "(0: only the last)."
        },
    )
    num_eval_episodes: int = field(
        default=10, validator=ge(1), metadata={"doc": "Episodes per evaluation."}
    )
    eval_max_episode_steps: int = field(
        default=DEFAULT_EVAL_MAX_EPISODE_STEPS,
        validator=ge(1),
        metadata={
            "doc": "Steps after which an evaluation episode (and one of `cadence play` or "
            "`cadence eval`) is cut, with a warning: a bound for envs without a time limit."
        },
    )
    eval_seed_offset: int = field(
        default=1_000_000,
        validator=ge(1),
        metadata={
            "doc": "Evaluation envs are seeded seed + offset so they never repeat training episodes."
        },
    )
    checkpoint_interval: int = field(
        default=50,
        validator=ge(0),
        metadata={"doc": "Iterations between checkpoints (0: only at the end)."},
    )
    keep_checkpoints: int = field(
        default=3, validator=ge(1), metadata={"doc": "How many recent checkpoints to keep."}
    )
    stop_at_eval_return: float | None = field(
        default=None, metadata={"doc": "Stop early once the mean eval return reaches this."}
    )
    device: str = field(
        default="auto",
        validator=lambda _, __, value: check_device(value),
        metadata={
            "doc": "Torch device of the learner: 'auto' (a CUDA GPU when there is one, else "
            "the CPU), 'cpu', 'cuda' or 'cuda:N'."
        },
    )
    collector_device: str = field(
        default="auto",
        validator=lambda _, __, value: check_device(value, collector=True),
        metadata={
            "doc": "Where the policy acts while collecting: 'learner' (the learner's networks, "
            "on its device), a device ('cpu', 'cuda', 'cuda:N'; another than the learner's "
            "acts with a copy refreshed before every unroll), or 'auto': the learner's "
            "device on a CPU learner or with tensor-native envs (which then run there too), "
            "else whichever of the CPU and the learner's device measures faster for one "
            "rollout step (recorded in the run's placement.json; a resume reuses it)."
        },
    )
    unroll_graph_steps: int = field(
        default=0,
        validator=ge(0),
        metadata={
            "doc": "Env steps per compiled unroll call, with a compiled update on a "
            "tensor-native env (the largest divisor of unroll_length up to this). 0: 8 for "
            "on-policy algorithms, whose iterations the unroll is a large part of, 1 for "
            "off-policy ones, whose updates dominate (a warm start then traces one step)."
        },
    )
    updates_per_graph: int = field(
        default=DEFAULT_UPDATES_PER_GRAPH,
        validator=[ge(1), le(MAX_UPDATES_PER_GRAPH)],
        metadata={
            "doc": "On-policy updates per compiled call, with a compiled update (calls of "
            "nearly equal sizes; the passes' shuffles are drawn first, unless target_kl may "
            "stop them early). Each call's fixed cost in Python is spread over its updates, "
            "while a call of more updates takes longer to compile."
        },
    )
    num_threads: int = field(
        default=0,
        validator=ge(0),
        metadata={
            "doc": "torch.set_num_threads while the run trains. 0: per role, from the "
            "networks' work: acting and updating each on one thread unless one call's "
            "forward pass (a step over the envs, an update's minibatch) is a gigaflop or "
            "more, then on torch's count less the cores taken by other ranks (and, while "
            "acting, by 'parallel' env workers); recorded in placement.json, and a resume "
            "takes the recorded counts. The count changes how results round."
        },
    )
    progress_bar: Literal["auto", "on", "off"] = field(
        default="auto",
        validator=in_(["auto", "on", "off"]),
        metadata={
            "doc": "Show progress: 'auto' a bar when stdout is a terminal, else a plain line "
            "every progress_interval_s; 'on' a bar always; 'off' nothing.",
            "display_only": True,
        },
    )
    progress_interval_s: float = field(
        default=30.0,
        validator=ge(0),
        metadata={
            "doc": "Seconds between plain progress lines when stdout is not a terminal "
            "(0: only the final line).",
            "display_only": True,
        },
    )
    deterministic: bool = field(
        default=True, metadata={"doc": "Use deterministic torch algorithms (exact resume on CPU)."}
    )
    num_ranks: int = field(
        default=1,
        validator=ge(1),
        metadata={
            "doc": "Learner processes training together (torch.distributed, docs/ddp.md), "
            "each with env.num_envs envs; num_env_steps counts all of them. Above 1, "
            "`cadence train` starts them (as --nproc does); under torchrun it is the world "
            "size."
        },
    )
    collective_timeout_s: float = field(
        default=600.0,
        validator=gt(0),
        metadata={
            "doc": "With num_ranks > 1: seconds a rank waits in a collective (gradients, "
            "checkpoint, stop flag) for the others before it fails, e.g. when one died."
        },
    )
    skip_nonfinite_updates: bool = field(
        default=False,
        metadata={
            "doc": "Skip (do not apply) an update whose loss or gradients are NaN or infinite "
            "and count it in train/skipped_updates, instead of stopping the run (costs one "
            "host sync per update)."
        },
    )


DISPLAY_ONLY_FIELDS = tuple(
    attribute.name
    for attribute in attrs.fields(TrainerConfig)
    if attribute.metadata.get("display_only")
)
"""The `TrainerConfig` fields (marked ``display_only``) that change only what a run shows on
the terminal, never its numbers, checkpoints, logs or evaluation times. Like the budget,
they are no part of a run's identity: the default run directory's digest leaves them out and
a resume takes whatever values it is given (`cadence.trainer.run_config`), so continuing a
sweep trial (saved with ``progress_bar: 'off'``) needs no ``--resume-with-changes``."""
