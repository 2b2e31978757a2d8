"""The `Algorithm` contract (DESIGN §5).

An algorithm is an ``nn.Module`` with three step functions, each
``(inputs, state) -> AlgStep(output, state, info)``:

- `predict_step` for evaluation and play (no exploration unless asked);
- `rollout_step` during an unroll (exploration; ``info`` is stored with the experience);
- `train_step` on experience (recomputing what the loss needs);

and ``calc_loss(info) -> LossInfo(loss, extra)`` with named terms. Recurrent
state is always explicit: ``initial_state(batch_size)`` gives the state of a new
episode and callers pass it back in. Optimizers belong to the algorithm and are
part of its ``state_dict``.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.data.time_step import TimeStep


class AlgStep(NamedTuple):
    """What a step function returns: ``output`` (e.g. the action), the next ``state``
    and ``info`` (a nest of ``[B, ...]`` tensors kept with the experience)."""

    output: Any
    state: Nest = ()
    info: Nest = ()


class LossInfo(NamedTuple):
    """A scalar ``loss`` to minimise and ``extra``: named scalar terms to log
    (``loss/*`` are the summed parts, everything else is a diagnostic)."""

    loss: torch.Tensor
    extra: dict[str, torch.Tensor]


class Algorithm(nn.Module, abc.ABC):
    """Base of all algorithms: the step functions, the loss and the optimizers."""

    def initial_state(self, batch_size: int) -> Nest:
        """The recurrent state of ``batch_size`` new episodes (``()`` when stateless)."""
        return ()

    @abc.abstractmethod
    def predict_step(self, time_step: TimeStep, state: Nest) -> AlgStep:
        """Chooses actions for evaluation: ``output`` is the action nest ``[B, ...]``."""

    @abc.abstractmethod
    def rollout_step(self, time_step: TimeStep, state: Nest) -> AlgStep:
        """Chooses exploratory actions during an unroll; ``info`` goes into the experience."""

    def train_step(self, inputs: Any, state: Nest) -> AlgStep:
        """Recomputes what `calc_loss` needs on a batch of experience."""
        raise NotImplementedError(f"{type(self).__name__} does not train from replayed steps")

    @abc.abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The algorithm's optimizers by name (checkpointed with it)."""

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Network parameters and buffers, plus every optimizer's state under ``optim/``."""
        state = super().state_dict(*args, **kwargs)
        for name, optimizer in self.optimizers().items():
            state[f"optim/{name}"] = optimizer.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        state_dict = dict(state_dict)
        for name, optimizer in self.optimizers().items():
            optimizer.load_state_dict(state_dict.pop(f"optim/{name}"))
        return super().load_state_dict(state_dict, strict=strict)
