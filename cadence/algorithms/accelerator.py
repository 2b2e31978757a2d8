"""The seam between an algorithm's update and the optional fast path that may accelerate it.

`Algorithm` runs the pure part of its update through `Algorithm.in_graph` and steps several
optimizers through `Algorithm.optimizer_steps`; eager, both simply run. An accelerator
(`UpdateAccelerator`: `cadence.accel.UpdateCompiler`, which the trainer installs with
`Algorithm.set_accelerator` when a run compiles) may run them faster with the same numbers.
Nothing here imports the accelerator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

ACCELERATOR_STATE_KEY = "compile/choices"
"""Where an algorithm's checkpoint keeps its accelerator's `UpdateAccelerator.choices`."""


class OptimizerSteps:
    """Several optimizers stepped as one update's: each its own ``zero_grad`` and ``step``,
    in order. An accelerator may give a faster equivalent (`UpdateAccelerator.optimizer_steps`).

    >>> params = [torch.nn.Parameter(torch.ones(2))]
    >>> steps = OptimizerSteps([torch.optim.SGD(params, lr=0.5)])
    >>> steps.zero_grad(); params[0].sum().backward(); steps.step()
    >>> params[0].tolist()
    [0.5, 0.5]
    """

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]):
        self.optimizers = list(optimizers)

    def zero_grad(self) -> None:
        """Drops every gradient (``set_to_none``)."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """One step of each optimizer, in order."""
        for optimizer in self.optimizers:
            optimizer.step()


class UpdateAccelerator(Protocol):
    """The one seam through which an optional layer speeds up an algorithm's update
    (`cadence.accel.UpdateCompiler` implements it; `Algorithm.set_accelerator` installs it).

    Attributes:
        mode: how it runs the update (``"eager"`` where it fell back to running it as is).
        choices: what it measured and chose, by function; checkpointed with the algorithm
            under `ACCELERATOR_STATE_KEY`.
        compile_seconds: the seconds its calls spent preparing (compiling) so far.
        on_compile: called with True before a call that prepares (compiles) and False
            after it, e.g. to say so in a progress bar; None: nothing is called.
    """

    mode: str
    choices: dict[str, str]
    compile_seconds: float
    on_compile: Callable[[bool], None] | None

    def run(self, fn: Callable[..., Any], *args: Any, steps: int = 1) -> Any:
        """``fn(*args)``, which takes ``steps`` optimizer steps, as the accelerator runs it."""

    def minimize(
        self,
        loss: torch.Tensor,
        optimizers: Sequence[torch.optim.Optimizer],
        max_grad_norm: float | None,
        skip_nonfinite: bool,
        update_index: int,
    ) -> torch.Tensor | None:
        """`Algorithm.minimize` inside the accelerator's graph: same result, no ``.grad``."""

    def optimizer_steps(self, optimizers: Sequence[torch.optim.Optimizer]) -> OptimizerSteps:
        """The optimizers stepped as `OptimizerSteps` would, the same numbers."""

    def load_choices(self, choices: dict[str, str]) -> None:
        """Takes the `choices` of a checkpoint."""

    def reattach(self) -> None:
        """After the optimizers loaded a checkpoint (their state tensors were replaced)."""
