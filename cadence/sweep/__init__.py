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
ends with exactly ``--trials`` complete or pruned trials. See docs/sweeps.

The package is split by concept: `spec` (the swept parameters and what every trial
shares), `storage` (the Optuna storage and its lock), `study` (the study: created or
loaded, trials claimed, dead ones rerun), `trial` (one trial's seeds in lockstep) and
`summary` (the table ``--summary`` prints).
"""

from cadence.sweep.dependency import INSTALL_HINT, require_optuna
from cadence.sweep.spec import Direction, Kind, SweepParam, SweepSpec, parse_param
from cadence.sweep.storage import StudyLock, open_storage, storage_url
from cadence.sweep.study import Sweep, SweepOutcome, make_pruner, make_sampler, open_sweep
from cadence.sweep.summary import format_summary
from cadence.sweep.trial import SeedRun, TrialRun

__all__ = [
    "INSTALL_HINT",
    "Direction",
    "Kind",
    "SeedRun",
    "StudyLock",
    "Sweep",
    "SweepOutcome",
    "SweepParam",
    "SweepSpec",
    "TrialRun",
    "format_summary",
    "make_pruner",
    "make_sampler",
    "open_storage",
    "open_sweep",
    "parse_param",
    "require_optuna",
    "storage_url",
]
