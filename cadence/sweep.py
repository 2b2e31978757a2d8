"""`cadence sweep`: hyperparameter sweeps on Optuna, each trial one normal run per seed.

A trial samples the ``--param`` distributions and trains the named config with those
overrides, once per seed, in ``<sweep_dir>/trial_NNNN/seed_S`` through `train`, the code
path of ``cadence train``. The seeds of a trial advance in lockstep, one evaluation
interval at a time: each run pauses after its next evaluation (`Trainer`'s
``on_evaluation`` hook checkpoints it, as a pre-emption does) and resumes from that
checkpoint for the next interval. After each round the mean over seeds of the objective,
read from the runs' ``metrics.jsonl``, is reported to Optuna at that env step, and the
pruner may stop the trial there. The final value is the mean over seeds of the last
evaluation.

The study lives in an Optuna storage (by default ``sqlite:///<sweep_dir>/study.db``), so
several sweep processes share it. Each running trial records a heartbeat; a trial whose
heartbeat stopped (its process was killed) is failed by the next process that looks and
queued again with the same parameters, and its rerun resumes the trial's run directories
from their checkpoints. Processes on one machine serialize their storage operations with a
lock file beside a SQLite or journal file, so SQLite never sees two writers and a sweep
ends with exactly ``--trials`` complete or pruned trials. See docs/sweeps.md.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs

from cadence.config import ConfigError, load_config
from cadence.config.loading import check_overrides
from cadence.trainer.checkpoint import latest_iteration
from cadence.trainer.errors import NonFiniteUpdateError
from cadence.trainer.metrics import read_metrics

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)

Kind = Literal["loguniform", "uniform", "int", "choice"]
Direction = Literal["maximize", "minimize"]
SweepOutcome = Literal["complete", "preempted"]
_T = TypeVar("_T")

INSTALL_HINT = "pip install 'cadence[sweep]'"
SPEC_ATTR = "cadence_sweep"  # the study's user attribute holding its SweepSpec
RUN_ATTR = "run"  # a trial's run directory number (a retried trial keeps its original's)
OVERRIDES_ATTR = "overrides"
HEARTBEAT_ATTR = "heartbeat"
RETRIES_ATTR = "retries"
MAX_RETRIES = 3
STALE_HEARTBEATS = 4  # a trial whose heartbeat is this many intervals old is dead
_KEY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_CALL = re.compile(r"(?P<name>\w+)\((?P<args>.*)\)", re.DOTALL)
_WORD = re.compile(r"[\w.:/-]+")
_RESERVED = ("seed", "root_dir", "name", "trainer.progress_bar")


def require_optuna() -> Any:
    """The ``optuna`` module; a `ConfigError` saying how to install it when it is missing."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(f"cadence sweep needs Optuna: {INSTALL_HINT}") from None
    return optuna


# ------------------------------------------------------------------ parameters
@attrs.frozen
class SweepParam:
    """One swept key and its distribution, as ``--param KEY=KIND(ARGS)`` writes it.

    Example:
        >>> parse_param("algorithm.learning_rate=loguniform(1e-4, 1e-2)")
        SweepParam(key='algorithm.learning_rate', kind='loguniform', args=(0.0001, 0.01))
    """

    key: str
    kind: Kind
    args: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.key}={self.kind}({','.join(map(str, self.args))})"

    def suggest(self, trial: optuna.Trial) -> Any:
        """Samples this parameter in ``trial`` (a retried trial gets its original's value)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.key, list(self.args))
        if self.kind == "int":
            return trial.suggest_int(self.key, *self.args)
        return trial.suggest_float(self.key, *self.args, log=self.kind == "loguniform")

    def override(self, value: Any) -> str:
        """``KEY=VALUE`` in Hydra's grammar, exact (floats as ``repr``)."""
        return f"{self.key}={_hydra_value(value)}"


def parse_param(text: str) -> SweepParam:
    """Parses ``KEY=loguniform(a,b)``, ``uniform(a,b)``, ``int(a,b)`` or ``choice(v1,v2,...)``.

    Raises:
        ConfigError: the text is not one of these forms, or its bounds are invalid.
    """
    key, sep, spec = (part.strip() for part in text.partition("="))
    call = _CALL.fullmatch(spec)
    if not sep or not _KEY.fullmatch(key) or call is None:
        raise _param_error(text, "expected KEY=KIND(ARGS), e.g. algorithm.ent_coef=uniform(0,0.02)")
    if key in _RESERVED:
        raise _param_error(text, f"{key} is set by the sweep itself and cannot be swept")
    kind, raw = call["name"], [arg.strip() for arg in call["args"].split(",")]
    if kind == "choice":
        return SweepParam(key, kind, _choices(text, raw))
    if kind not in ("loguniform", "uniform", "int"):
        raise _param_error(text, f"unknown kind {kind!r}: use loguniform, uniform, int or choice")
    if len(raw) != 2:
        raise _param_error(text, f"{kind} takes two bounds (low,high), got {len(raw)}")
    low, high = (_number(text, arg, integer=kind == "int") for arg in raw)
    if not low < high:
        raise _param_error(text, f"the low bound {low} must be below the high bound {high}")
    if kind == "loguniform" and low <= 0:
        raise _param_error(text, f"loguniform needs a positive low bound, got {low}")
    return SweepParam(key, kind, (low, high))


def _number(text: str, arg: str, integer: bool) -> float | int:
    try:
        value = int(arg) if integer else float(arg)
    except ValueError:
        expected = "an integer" if integer else "a number"
        raise _param_error(text, f"{arg!r} is not {expected}") from None
    if not math.isfinite(value):
        raise _param_error(text, f"{arg!r} is not finite")
    return value


def _choices(text: str, raw: list[str]) -> tuple[Any, ...]:
    if len(raw) < 2 or "" in raw:
        raise _param_error(text, "choice takes two or more comma-separated values")
    values = tuple(_literal(text, arg) for arg in raw)
    if len(set(map(repr, values))) != len(values):
        raise _param_error(text, "choice lists a value twice")
    return values


def _literal(text: str, arg: str) -> Any:
    if arg.lower() in ("true", "false"):
        return arg.lower() == "true"
    for convert in (int, float):
        with contextlib.suppress(ValueError):
            return convert(arg)
    if not _WORD.fullmatch(arg):
        raise _param_error(text, f"choice value {arg!r}: use numbers, true/false or plain words")
    return arg


def _param_error(text: str, message: str) -> ConfigError:
    return ConfigError(f"--param {text!r}: {message}")


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


# ------------------------------------------------------------------ the spec
@attrs.frozen
class SweepSpec:
    """What a study sweeps; stored in the study, so every process of a sweep agrees on it.

    Args:
        config_name: the named config every trial trains.
        overrides: fixed ``KEY=VALUE`` overrides of every trial.
        params: the swept parameters.
        objective: the metric of ``metrics.jsonl`` to optimize (e.g. ``eval/episode_return``).
        direction: ``maximize`` or ``minimize``.
        num_seeds: runs per trial, with seeds ``seed``, ``seed + 1``, ... of the config.
    """

    config_name: str
    overrides: tuple[str, ...]
    params: tuple[SweepParam, ...]
    objective: str = "eval/episode_return"
    direction: Direction = "maximize"
    num_seeds: int = 1

    def __attrs_post_init__(self) -> None:
        check_overrides(self.overrides)  # a bare string would be one override per character
        keys = [param.key for param in self.params]
        fixed = {override.partition("=")[0].lstrip("+~") for override in self.overrides}
        clashes = sorted({k for k in keys if keys.count(k) > 1} | (set(keys) & fixed))
        if clashes:
            raise ConfigError(f"cadence sweep: {', '.join(clashes)} is both swept and set twice")
        if not self.params:
            raise ConfigError("cadence sweep: give at least one --param KEY=KIND(ARGS)")
        if self.num_seeds < 1:
            raise ConfigError(f"cadence sweep: --seeds must be >= 1, got {self.num_seeds}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (stored as the study's user attribute ``cadence_sweep``)."""
        data = attrs.asdict(self, recurse=False)
        return {**data, "overrides": list(self.overrides), "params": list(map(str, self.params))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        params = tuple(parse_param(text) for text in data["params"])
        return cls(**{**data, "overrides": tuple(data["overrides"]), "params": params})

    def check(self) -> None:
        """Loads the config with each parameter's first value, so that an unknown key or an
        invalid value is refused before a study or a run directory is created."""
        for param in self.params:
            self.load(param.override(param.args[0]))

    def load(self, *overrides: str, root_dir: Path | None = None) -> Any:
        """The config of one run: the fixed overrides, then ``overrides``."""
        return load_config(self.config_name, [*self.overrides, *overrides], root_dir=root_dir)


# ------------------------------------------------------------------ storage
def storage_url(sweep_dir: Path, storage: str | None) -> str:
    """``storage``, or the default ``sqlite:///<sweep_dir>/study.db``."""
    return storage or f"sqlite:///{Path(sweep_dir).resolve() / 'study.db'}"


def open_storage(url: str) -> tuple[Any, StudyLock]:
    """The Optuna storage of ``url`` and the lock that serializes its users on one machine
    (a file beside a SQLite or journal file; none for a database server, which has its own
    locking). The storage is created under the lock: two processes creating one SQLite
    database at once would both write its schema.

    ``sqlite:///PATH`` is a SQLite file in WAL mode, waiting up to 60 s for a lock;
    ``journal:///PATH`` is Optuna's journal file storage (for file systems shared by
    several machines, e.g. NFS); any other URL is an SQLAlchemy URL (PostgreSQL, MySQL).
    """
    optuna = require_optuna()
    if url.startswith("journal://"):
        path = Path(url.removeprefix("journal://")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            from optuna.storages.journal import JournalFileBackend
        except ImportError:  # Optuna < 4
            from optuna.storages import JournalFileStorage as JournalFileBackend
        lock = StudyLock(_lock_path(path))
        backend = lock.call(JournalFileBackend, str(path))
        return optuna.storages.JournalStorage(backend), lock
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = StudyLock(_lock_path(path))
        lock.call(_use_wal, path)
        connect_args = {"connect_args": {"timeout": 60}}
        return lock.call(optuna.storages.RDBStorage, url, engine_kwargs=connect_args), lock
    lock = StudyLock(None)
    return lock.call(optuna.storages.RDBStorage, url), lock


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _use_wal(path: Path) -> None:
    """WAL lets readers (a dashboard, ``--summary``) read while a sweep writes; the mode is
    stored in the database file, so setting it once holds for every later connection."""
    import sqlite3

    connection = sqlite3.connect(path, timeout=60)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


class StudyLock:
    """Serializes the storage operations of the sweep processes of one machine.

    Every call takes an exclusive ``flock`` on ``path`` (when there is one) and retries an
    operation that a busy database refused (``database is locked``, e.g. while a dashboard
    reads), so that SQLite, which allows one writer at a time, never fails a sweep.
    """

    def __init__(self, path: Path | None, attempts: int = 20):
        self.path = path
        self.attempts = attempts

    def call(self, operation: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``operation(*args, **kwargs)`` under the lock, retried while the database is busy."""
        for attempt in range(self.attempts):
            with self._held():
                try:
                    return operation(*args, **kwargs)
                except Exception as error:  # noqa: BLE001 - only a busy database is retried
                    if attempt + 1 == self.attempts or not _is_busy(error):
                        raise
            time.sleep(min(5.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        import fcntl

        with open(self.path, "a") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)


def _is_busy(error: Exception) -> bool:
    text = str(error).lower()
    return "database is locked" in text or "database is busy" in text


# ------------------------------------------------------------------ the sweep
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
    call = _CALL.fullmatch(text.strip())
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


# ------------------------------------------------------------------ one trial
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


# ------------------------------------------------------------------ summary
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
