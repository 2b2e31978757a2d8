"""`RunPlan`: what a run takes from its experiment config, read once.

`cadence.trainer.run.build_trainer` builds the plan first and hands it to each step that
needs one of its values, so that none of them reads the config again: whether the run is
off-policy (and its ``off_policy`` section) or on-policy (and its `OnPolicySchedule`),
how its update and unroll compile, and the rows of one update.
"""

from __future__ import annotations

from typing import Any

import attrs

from cadence.algorithms.off_policy_config import OffPolicyConfig, off_policy_config
from cadence.algorithms.on_policy import OnPolicySchedule


@attrs.frozen
class RunPlan:
    """What a run takes from its experiment config, read once and handed to the steps
    of `build_trainer` that need it.

    Attributes:
        off_policy: the algorithm config's ``off_policy`` section, which makes the run
            off-policy (a replay buffer, `OffPolicyScheme`); None trains on-policy.
        on_policy: an on-policy run's passes over each unroll and their minibatch size,
            from the algorithm config's ``num_updates_per_train_iter`` and
            ``mini_batch_size`` where it declares them (else 1 pass over the whole
            unroll, as A2C); None for an off-policy run.
        compile: ``algorithm.compile``: ``"off"`` runs eagerly and never imports
            `cadence.accel`.
        update_rows: the rows of one update's minibatch: an off-policy algorithm's
            sequences times their length, the schedule's ``mini_batch_size`` (PPO's), else
            (A2C) the whole unroll (what ``trainer.num_threads`` 0 sizes the update's threads by).
        unroll_graph_steps: ``trainer.unroll_graph_steps`` as set (0: chosen by
            `unroll_graph_steps`).
    """

    off_policy: OffPolicyConfig | None
    on_policy: OnPolicySchedule | None
    compile: str
    update_rows: int
    unroll_graph_steps: int

    @classmethod
    def from_config(cls, config: Any) -> RunPlan:
        """The plan of the experiment config ``config``."""
        algorithm = config.algorithm
        off_policy = off_policy_config(algorithm)
        unroll_rows = config.trainer.unroll_length * config.env.num_envs
        on_policy = None
        if off_policy is not None:
            update_rows = off_policy.mini_batch_size * off_policy.mini_batch_length
        else:
            on_policy = OnPolicySchedule(  # A2C declares neither field
                declared_value(algorithm, "num_updates_per_train_iter", 1),
                declared_value(algorithm, "mini_batch_size", None),
            )
            update_rows = min(unroll_rows, on_policy.mini_batch_size or unroll_rows)
        return cls(
            off_policy=off_policy,
            on_policy=on_policy,
            compile=declared_value(algorithm, "compile", "off"),
            update_rows=update_rows,
            unroll_graph_steps=config.trainer.unroll_graph_steps,
        )


def declared_value(algorithm_config: Any, name: str, default: Any) -> Any:
    """The value of field ``name`` of ``algorithm_config`` where its attrs class declares
    that field, else ``default``: a registered algorithm's config declares only the fields
    it uses (``compile`` and the on-policy schedule's fields among them,
    docs/adding-an-algorithm.md)."""
    if name not in attrs.fields_dict(type(algorithm_config)):
        return default
    return getattr(algorithm_config, name)


def unroll_graph_steps(plan: RunPlan) -> int:
    """``trainer.unroll_graph_steps``, or for 0 the compiled unroll's `MAX_STEPS_PER_GRAPH` for an
    on-policy algorithm and 1 for an off-policy one: its updates, one per env step or so,
    dwarf a faster unroll, while every start traces each step of the graph (SAC on
    Pendulum: 0.3 s for one step, 0.9 s for five)."""
    from cadence.accel import MAX_STEPS_PER_GRAPH

    if plan.unroll_graph_steps:
        return plan.unroll_graph_steps
    return MAX_STEPS_PER_GRAPH if plan.off_policy is None else 1
