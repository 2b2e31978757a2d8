"""The trial runner: trains one trial's seeds in lockstep and reports their mean to Optuna."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from cadence.config import ConfigError
from cadence.sweep.storage import HEARTBEAT_ATTR, OVERRIDES_ATTR, RUN_ATTR, StudyLock
from cadence.trainer.checkpoint import latest_iteration
from cadence.trainer.errors import NonFiniteUpdateError
from cadence.trainer.metrics import read_metrics

if TYPE_CHECKING:
    import optuna

    from cadence.sweep.study import Sweep

logger = logging.getLogger(__name__)


@attrs.define
class SeedRun:
    """One seed's run of a trial: its config and what its run directory says."""

    config: Any

    @property
    def directory(self) -> Path:
        return Path(self.config.root_dir)

    @property
    def complete(self) -> bool:
        return (self.directory / "COMPLETE").exists()

    def curve(self, objective: str) -> list[tuple[int, float]]:
        """(env steps, objective) of each ``metrics.jsonl`` row the run's checkpoint covers
        (rows an interrupted run wrote past it are dropped when it resumes)."""
        covered = latest_iteration(self.directory / "checkpoints")
        return [
            (int(row["env_steps"]), float(row[objective]))
            for row in read_metrics(self.directory)
            if (self.complete or row["iteration"] <= covered) and row.get(objective) is not None
        ]


class TrialRun:
    """Trains one trial's seeds in lockstep, reporting the mean objective after each round."""

    def __init__(self, sweep: Sweep, trial: optuna.Trial):
        self.sweep, self.trial, self.spec = sweep, trial, sweep.spec
        self.lock = sweep.lock

    def run(self) -> Literal["complete", "pruned", "failed", "preempted"]:
        """Runs the trial to its end; "preempted" leaves it queued again."""
        heartbeat = _Heartbeat(self.trial, self.sweep.heartbeat_interval, self.lock)
        try:
            with heartbeat:
                return self._train(self._prepare())
        except NonFiniteUpdateError as error:  # a diverging configuration: the sweep goes on
            self._fail(error)
            return "failed"
        except KeyboardInterrupt:
            self.lock.call(self.sweep.requeue, self.trial.number)
            raise
        except BaseException as error:
            self._fail(error)
            raise

    def _prepare(self) -> list[SeedRun]:
        values = {param.key: param.suggest(self.trial) for param in self.spec.params}
        attrs_ = self.trial.user_attrs
        number = attrs_.get(RUN_ATTR, self.trial.number)
        overrides = [param.override(values[param.key]) for param in self.spec.params]
        if RUN_ATTR not in attrs_:
            self.lock.call(self.trial.set_user_attr, RUN_ATTR, number)
            self.lock.call(self.trial.set_user_attr, OVERRIDES_ATTR, overrides)
        trial_dir = self.sweep.directory / f"trial_{number:04d}"
        base = self.spec.load(*overrides).seed
        logger.info(
            "trial %d (%s): %s%s",
            self.trial.number,
            trial_dir.name,
            " ".join(overrides),
            f", resuming trial {attrs_['retry_of']}" if "retry_of" in attrs_ else "",
        )
        return [
            SeedRun(
                self.spec.load(
                    *overrides,
                    f"seed={seed}",
                    "trainer.progress_bar=off",
                    root_dir=trial_dir / f"seed_{seed}",
                )
            )
            for seed in range(base, base + self.spec.num_seeds)
        ]

    def _train(self, runs: list[SeedRun]) -> Literal["complete", "pruned", "preempted"]:
        import optuna

        from cadence.trainer.run import train

        reported = -1  # a retried trial reports its runs' earlier evaluations again
        while True:
            for run in runs:
                curve = run.curve(self.spec.objective)
                if run.complete or (curve and curve[-1][0] > reported):
                    continue  # finished, or already at this round's evaluation
                if train(run.config, on_evaluation=_pause_after(reported)) == "preempted":
                    self.lock.call(self.sweep.requeue, self.trial.number)
                    return "preempted"
            reported = self._report(runs, reported)
            if self.lock.call(self.trial.should_prune):
                logger.info("trial %d pruned at %d env steps", self.trial.number, reported)
                prune = optuna.trial.TrialState.PRUNED
                self.lock.call(self.sweep.study.tell, self.trial, state=prune)
                return "pruned"
            if all(run.complete for run in runs):
                return self._complete(runs)

    def _report(self, runs: list[SeedRun], reported: int) -> int:
        """Reports the mean over seeds at each new env step all runs have; returns the last."""
        curves = [run.curve(self.spec.objective) for run in runs]
        for run, curve in zip(runs, curves, strict=True):
            if not curve:
                raise ConfigError(
                    f"objective {self.spec.objective!r} is not in {run.directory}/metrics.jsonl "
                    f"(it has {', '.join(_metric_keys(run.directory))}); choose one of those"
                )
        new_steps = sorted({step for curve in curves for step, _ in curve if step > reported})
        for step in new_steps:
            values = [
                _value_at(curve, step, run.complete)
                for run, curve in zip(runs, curves, strict=True)
            ]
            if any(value is None for value in values):
                break  # a run has not reached this step yet
            self.lock.call(self.trial.report, sum(values) / len(values), step)
            reported = step
        return reported

    def _complete(self, runs: list[SeedRun]) -> Literal["complete"]:
        finals = [run.curve(self.spec.objective)[-1] for run in runs]
        value = sum(v for _, v in finals) / len(finals)
        self.lock.call(self.trial.set_user_attr, "seed_values", [v for _, v in finals])
        self.lock.call(self.trial.set_user_attr, "env_steps", max(s for s, _ in finals))
        self.lock.call(self.sweep.study.tell, self.trial, value)
        logger.info("trial %d complete: %s = %.4g", self.trial.number, self.spec.objective, value)
        return "complete"

    def _fail(self, error: BaseException) -> None:
        import optuna

        logger.error("trial %d failed: %s", self.trial.number, error)
        with contextlib.suppress(Exception):  # the error under way is the one to report
            self.lock.call(self.trial.set_user_attr, "error", str(error)[:500])
            self.lock.call(self.sweep.study.tell, self.trial, state=optuna.trial.TrialState.FAIL)


def _pause_after(env_steps: int) -> Callable[[int, dict[str, float]], bool]:
    """The evaluation hook that pauses a run at its first evaluation after ``env_steps``."""
    return lambda steps, _metrics: steps > env_steps


def _value_at(curve: list[tuple[int, float]], step: int, complete: bool) -> float | None:
    """The run's objective at ``step``; a run that finished earlier (e.g. it reached
    ``stop_at_eval_return``) keeps its last value."""
    for point_step, value in curve:
        if point_step == step:
            return value
    return curve[-1][1] if complete and curve[-1][0] < step else None


def _metric_keys(run_dir: Path) -> list[str]:
    keys = {key for row in read_metrics(run_dir) for key in row}
    return sorted(keys - {"iteration", "env_steps", "wall_time", "train_time"}) or ["no metrics"]


class _Heartbeat:
    """Records the time in the trial every ``interval`` seconds while the trial runs."""

    def __init__(self, trial: optuna.Trial, interval: float, lock: StudyLock):
        self.trial, self.interval, self.lock = trial, interval, lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="sweep-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.lock.call(self.trial.set_user_attr, HEARTBEAT_ATTR, time.time())
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        while not self._stop.wait(self.interval):
            try:
                self.lock.call(self.trial.set_user_attr, HEARTBEAT_ATTR, time.time())
            except UpdateFinishedTrialError:  # told meanwhile
                return
            except Exception as error:  # noqa: BLE001 - e.g. a lost database connection
                logger.warning("trial %d: heartbeat failed: %s", self.trial.number, error)
