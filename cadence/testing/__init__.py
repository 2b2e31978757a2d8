"""Test helpers for cadence and its users: fake environments and the environment contract suite.

Two more modules are imported on their own, as they pull in the trainer:
`cadence.testing.resume` (`check_exact_resume` for any named config) and
`cadence.testing.learning` (`train_to_bar` for learning tests).
"""

from cadence.testing.contract import (
    ContractReport,
    Stream,
    check_distinct_env_ids,
    check_environment,
    check_identical_streams,
    check_stream,
    check_time_step,
    record_stream,
)
from cadence.testing.fakes import DictObservationEnv, FailingEnv, ImageEnv

__all__ = [
    "ContractReport",
    "DictObservationEnv",
    "FailingEnv",
    "ImageEnv",
    "Stream",
    "check_distinct_env_ids",
    "check_environment",
    "check_identical_streams",
    "check_stream",
    "check_time_step",
    "record_stream",
]
