"""The sweep's summary: its best trials, the counts by state, the best configs to train again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cadence.sweep.spec import SweepSpec
from cadence.sweep.storage import OVERRIDES_ATTR, RUN_ATTR

if TYPE_CHECKING:
    import optuna


def format_summary(
    spec: SweepSpec, trials: Sequence[optuna.trial.FrozenTrial], url: str, top: int = 10
) -> str:
    """The best trials (complete ones by value, then pruned ones by their last reported
    mean), the counts of trials by state, and the best configs as ``cadence train`` lines."""
    from optuna.trial import TrialState

    counts = {state: sum(t.state == state for t in trials) for state in TrialState}
    sign = -1.0 if spec.direction == "maximize" else 1.0
    complete = sorted(
        (t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: sign * t.value
    )
    pruned = sorted(
        (t for t in trials if t.state == TrialState.PRUNED),
        key=lambda t: (-(t.last_step or 0), sign * _last_value(t)),
    )
    shown = [*complete, *pruned][:top]
    header = ["trial", "run", "state", "value", "env steps", *(p.key for p in spec.params)]
    rows = [header] + [_summary_row(spec, trial) for trial in shown]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    table = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    retried = sum("retry_of" in t.user_attrs for t in trials)
    lines = [
        f"{spec.config_name}: {spec.direction} {spec.objective}, mean over {spec.num_seeds} "
        f"seed(s), study in {url}",
        f"trials: {counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} pruned, "
        f"{counts[TrialState.FAIL]} failed ({retried} of them rerun from their checkpoints), "
        f"{counts[TrialState.RUNNING]} running, {counts[TrialState.WAITING]} queued",
        "",
        *table,
    ]
    if complete:
        lines += ["", "best configs (train one again with):"]
        for trial in complete[:3]:
            words = [spec.config_name, *spec.overrides, *trial.user_attrs.get(OVERRIDES_ATTR, [])]
            lines.append(f"  cadence train {' '.join(words)}")
    lines += ["", f"dashboard: optuna-dashboard {url}"]
    return "\n".join(lines)


def _summary_row(spec: SweepSpec, trial: optuna.trial.FrozenTrial) -> list[str]:
    value = trial.value if trial.value is not None else _last_value(trial)
    steps = trial.user_attrs.get("env_steps", trial.last_step)
    return [
        str(trial.number),
        f"trial_{trial.user_attrs.get(RUN_ATTR, trial.number):04d}",
        trial.state.name.lower(),
        f"{value:.4g}",
        str(steps if steps is not None else "-"),
        *(_short(trial.params.get(param.key)) for param in spec.params),
    ]


def _last_value(trial: optuna.trial.FrozenTrial) -> float:
    step = trial.last_step
    return trial.intermediate_values[step] if step is not None else float("nan")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
