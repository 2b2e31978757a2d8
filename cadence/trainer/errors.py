"""Why training or loading stopped: errors the ``cadence`` command reports without a traceback.

Torch-free, so the command can catch them without importing the trainer.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """No checkpoint of a run verifies; the message names what failed in each."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint failed verification; the message names the file."""


class NonFiniteUpdateError(RuntimeError):
    """An update met a NaN or infinite loss or gradient norm; training stopped before
    anything of that iteration was checkpointed."""


class RunConfigMismatchError(RuntimeError):
    """A run directory was started again with a config that differs from its config.yaml."""


class RunStorageError(RuntimeError):
    """The run directory could not be written (a full disk, a lost mount): training
    stopped; the checkpoints published before are intact and the same command resumes."""
