"""Test helpers for cadence and its users: fake environments and the environment contract suite.

Two more modules are imported on their own, as they pull in the trainer:
`cadence.testing.resume` (`check_exact_resume` for any named config) and
`cadence.testing.learning` (`train_to_bar` for learning tests).
"""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ContractReport": "contract",
        "Stream": "contract",
        "check_distinct_env_ids": "contract",
        "check_environment": "contract",
        "check_identical_streams": "contract",
        "check_stream": "contract",
        "check_time_step": "contract",
        "record_stream": "contract",
        "DictObservationEnv": "fakes",
        "FailingEnv": "fakes",
        "FaultyEnv": "fakes",
        "ImageEnv": "fakes",
    },
)

__all__ = [
    "ContractReport",
    "DictObservationEnv",
    "FailingEnv",
    "FaultyEnv",
    "ImageEnv",
    "Stream",
    "check_distinct_env_ids",
    "check_environment",
    "check_identical_streams",
    "check_stream",
    "check_time_step",
    "record_stream",
]
