"""Test helpers for cadence and its users: fake environments and the environment contract suite."""

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
