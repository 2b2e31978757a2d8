"""The sweep's study: created or loaded with its spec, its trials claimed, dead ones rerun."""

from __future__ import annotations

import ast
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from cadence.config import ConfigError
from cadence.sweep.dependency import require_optuna
from cadence.sweep.spec import CALL, SweepSpec
from cadence.sweep.storage import (
    HEARTBEAT_ATTR,
    RETRIES_ATTR,
    SPEC_ATTR,
    StudyLock,
    open_storage,
    storage_url,
)
from cadence.sweep.summary import format_summary
from cadence.sweep.trial import TrialRun

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)

SweepOutcome = Literal["complete", "preempted"]
MAX_RETRIES = 3
STALE_HEARTBEATS = 4  # a trial whose heartbeat is this many intervals old is dead


@attrs.define
class Sweep:
    """A study of `SweepSpec` in an Optuna storage and its run directories.

    Args:
        spec: what the study sweeps.
        study: the Optuna study.
        directory: the sweep directory, holding ``trial_NNNN/seed_S`` run directories.
        storage_url: where the study is (shown by the summary).
        lock: serializes storage operations (see `StudyLock`).
        heartbeat_interval: seconds between heartbeats of a running trial; a trial silent
            for ``4`` intervals is taken as dead and queued again.
    """

    spec: SweepSpec
    study: optuna.Study
    directory: Path
    storage_url: str
    lock: StudyLock
    heartbeat_interval: float = 30.0

    def run(self, num_trials: int) -> SweepOutcome:
        """Runs trials until ``num_trials`` of the study are complete or pruned (counting
        those of earlier and concurrent processes); returns ``"preempted"`` when SIGTERM or
        SIGUSR1 stopped it (the trial under way is queued again and resumes)."""
        while True:
            claim = self.lock.call(self._claim_trial, num_trials)
            if claim == "done":
                return "complete"
            if claim == "wait":  # the last trials run elsewhere; one may die and come back
                time.sleep(min(self.heartbeat_interval, 10.0))
                continue
            if TrialRun(self, claim).run() == "preempted":
                return "preempted"

    def _claim_trial(self, num_trials: int) -> optuna.Trial | Literal["done", "wait"]:
        """The next trial to run (a queued one first: a rerun of a dead trial), after failing
        and requeueing dead ones; "done" when ``num_trials`` are finished, "wait" when the
        rest are running (under the lock, so the processes never start more than needed)."""
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        for trial in trials:
            if trial.state == TrialState.RUNNING and self._is_stale(trial):
                logger.warning("trial %d has no heartbeat: its process died", trial.number)
                self.requeue(trial.number)
        states = [trial.state for trial in self.study.get_trials(deepcopy=False)]
        finished = sum(state in (TrialState.COMPLETE, TrialState.PRUNED) for state in states)
        if finished >= num_trials:
            return "done"
        if finished + states.count(TrialState.RUNNING) >= num_trials:
            return "wait"
        return self.study.ask()

    def _is_stale(self, trial: optuna.trial.FrozenTrial) -> bool:
        beat = trial.user_attrs.get(HEARTBEAT_ATTR)
        if beat is None:
            beat = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        return time.time() - beat > STALE_HEARTBEATS * self.heartbeat_interval

    def requeue(self, number: int) -> None:
        """Fails trial ``number`` and queues a trial with its parameters and run directory,
        unless another process did first or it was retried `MAX_RETRIES` times."""
        import optuna

        try:
            self.study.tell(number, state=optuna.trial.TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            return  # finished meanwhile, or failed by another process
        trial = self.study.get_trials(deepcopy=False)[number]
        retries = trial.user_attrs.get(RETRIES_ATTR, 0) + 1
        if retries > MAX_RETRIES:
            logger.error("trial %d failed %d times; not retried", number, retries)
            return
        user_attrs = {k: v for k, v in trial.user_attrs.items() if k != HEARTBEAT_ATTR}
        self.study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.WAITING,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs={**user_attrs, RETRIES_ATTR: retries, "retry_of": number},
            )
        )

    def summary(self, top: int = 10) -> str:
        """The summary table (see `format_summary`)."""
        trials = self.lock.call(self.study.get_trials, deepcopy=True)
        return format_summary(self.spec, trials, self.storage_url, top)


def open_sweep(
    spec: SweepSpec | None,
    study_name: str,
    sweep_dir: Path,
    storage: str | None = None,
    pruner: str = "median",
    sampler: Literal["tpe", "random"] = "tpe",
    heartbeat_interval: float = 30.0,
) -> Sweep:
    """Creates the study of ``spec`` or loads it (``spec`` None: an existing study only).

    Raises:
        ConfigError: Optuna is missing, the spec names an unknown key or an invalid value,
            the study exists with another spec, or (``spec`` None) the study does not exist.
    """
    optuna = require_optuna()
    if spec is not None:
        spec.check()
    url = storage_url(sweep_dir, storage)
    if spec is None and url.startswith("sqlite:///"):
        if not Path(url.removeprefix("sqlite:///")).expanduser().is_file():
            raise ConfigError(f"no sweep at {url}: run `cadence sweep` first or give --storage")
    backend, lock = open_storage(url)
    if spec is None:
        try:
            study = lock.call(optuna.load_study, study_name=study_name, storage=backend)
        except KeyError:
            raise ConfigError(f"no study {study_name!r} in {url}") from None
        spec = SweepSpec.from_dict(study.user_attrs[SPEC_ATTR])
    else:
        study = lock.call(
            optuna.create_study,
            study_name=study_name,
            storage=backend,
            direction=spec.direction,
            sampler=make_sampler(sampler),
            pruner=make_pruner(pruner),
            load_if_exists=True,
        )
        lock.call(_pin_spec, study, spec)
    return Sweep(spec, study, Path(sweep_dir).resolve(), url, lock, heartbeat_interval)


def _pin_spec(study: optuna.Study, spec: SweepSpec) -> None:
    stored = study.user_attrs.get(SPEC_ATTR)
    if stored is None:
        study.set_user_attr(SPEC_ATTR, spec.to_dict())
        return
    wanted = spec.to_dict()
    changed = [key for key in wanted if stored.get(key) != wanted[key]]
    if changed:
        lines = [
            f"  {key}: study has {stored.get(key)!r}, given {wanted[key]!r}" for key in changed
        ]
        raise ConfigError(
            f"study {study.study_name!r} sweeps something else; rerun it with its own "
            "arguments or choose another --study-name:\n" + "\n".join(lines)
        )


def make_pruner(text: str) -> Any:
    """An Optuna pruner from ``median``, ``percentile(percentile=25)``, ``hyperband``,
    ``halving`` or ``none``, each with optional keyword arguments of its Optuna class
    (e.g. ``median(n_startup_trials=2,n_warmup_steps=1000)``)."""
    optuna = require_optuna()
    classes = {
        "median": optuna.pruners.MedianPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "halving": optuna.pruners.SuccessiveHalvingPruner,
        "none": optuna.pruners.NopPruner,
    }
    call = CALL.fullmatch(text.strip())
    name, args = (call["name"], call["args"]) if call else (text.strip(), "")
    if name not in classes:
        raise ConfigError(f"--pruner {text!r}: unknown pruner; use one of {', '.join(classes)}")
    try:
        kwargs = {k: ast.literal_eval(v) for k, v in _keyword_args(args)}
        return classes[name](**kwargs)
    except (TypeError, ValueError, SyntaxError) as error:
        raise ConfigError(f"--pruner {text!r}: {error}") from None


def _keyword_args(text: str) -> Iterator[tuple[str, str]]:
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key.isidentifier():
            raise ValueError(f"expected KEY=VALUE arguments, got {item!r}")
        yield key, value


def make_sampler(name: Literal["tpe", "random"]) -> Any:
    optuna = require_optuna()
    if name == "random":
        return optuna.samplers.RandomSampler()
    return optuna.samplers.TPESampler()
