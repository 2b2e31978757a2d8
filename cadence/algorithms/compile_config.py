"""The ``compile`` key every algorithm config has (`cadence.accel.update_compiler` acts on it)."""

from __future__ import annotations

from typing import Any, Literal

from attrs import field
from attrs.validators import in_

CompileMode = Literal["off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "auto"]
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "auto")


def compile_field(default: str = "off") -> Any:
    """The ``compile`` attrs field: how the update runs (eager or one compiled graph)."""
    return field(
        default=default,
        validator=in_(COMPILE_MODES),
        metadata={
            "doc": "Run the update as one compiled graph per minibatch shape ('off': eager; "
            "'default', 'max-autotune-no-cudagraphs': torch.compile modes; 'reduce-overhead': "
            "'default', and on a GPU each graph's calls replay as a CUDA graph; 'auto': time "
            "eager, compiled and, on a GPU, CUDA graphs on the first minibatches (and eager "
            "and compiled on the first unrolls), keep the fastest, record it in "
            "checkpoints; the timings decide, so two fresh runs of one seed can round "
            "differently: name a mode to reproduce a run exactly). A config's first run "
            "compiles (seconds to a minute); later runs load the graphs from the "
            "per-machine cache ($CADENCE_COMPILE_CACHE)."
        },
    )


MAX_UPDATES_PER_GRAPH = 32
"""Optimizer steps one compiled call may take (`Algorithm.update_rows_many`): a
`GraphOptimizer` keeps Adam's bias corrections for that many steps ahead."""

DEFAULT_UPDATES_PER_GRAPH = 5
"""Compiled updates per call at most, by default (`OnPolicyScheme`). A call's graph holds
each of its updates (the loop is unrolled when compiled), so compile time grows with them
while the gain per update shrinks: PPO's loop in ``benchmarks/compiled_loop.py`` (20
updates per iteration) ran in 2.5 s with 1 update per call, 2.0-2.15 s with 5, 1.96-2.08 s
with 10 and 1.84-1.92 s with 20, and compiled in 26, 50, 86 and 192 s on an empty cache
(about 1.1 s warm for each)."""
