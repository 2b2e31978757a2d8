"""The ``compile`` key every algorithm config has (`cadence.algorithms.compiled` acts on it)."""

from __future__ import annotations

from typing import Any, Literal

from attrs import field
from attrs.validators import in_

CompileMode = Literal["off", "default", "max-autotune-no-cudagraphs", "auto"]
COMPILE_MODES = ("off", "default", "max-autotune-no-cudagraphs", "auto")


def compile_field(default: str = "off") -> Any:
    """The ``compile`` attrs field: how the update runs (eager or one compiled graph)."""
    return field(
        default=default,
        validator=in_(COMPILE_MODES),
        metadata={
            "doc": "Run the update as one compiled graph per minibatch shape ('off': eager; "
            "'default', 'max-autotune-no-cudagraphs': torch.compile modes; 'auto': time "
            "eager and compiled on the first minibatches, keep the faster, record it in "
            "checkpoints). A config's first run compiles (seconds to a minute); later runs "
            "load the graphs from the per-machine cache ($CADENCE_COMPILE_CACHE)."
        },
    )


MAX_UPDATES_PER_GRAPH = 32
"""Optimizer steps one compiled call may take (`Algorithm.update_rows_many`): a
`GraphOptimizer` keeps Adam's bias corrections for that many steps ahead."""
