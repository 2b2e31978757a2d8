"""Adam, built one way for every algorithm and model-based learner.

Every optimizer in cadence is Adam (A2C may choose RMSprop). The algorithms step
small networks, where a per-tensor Python loop dominates an update, so they take
the fused kernel (one call for all parameters). The model-based learners keep
torch's default implementation, which their results were measured with: the fused
kernel rounds differently, so switching would change their numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def make_adam(
    parameters: Iterable[Any], learning_rate: float, eps: float = 1e-8, fused: bool = True
) -> torch.optim.Adam:
    """A ``torch.optim.Adam`` over ``parameters``.

    Args:
        parameters: tensors or parameter groups, as ``torch.optim.Adam`` takes them.
        learning_rate: the step size.
        eps: the term added to the denominator.
        fused: True: the fused kernel (torch checks the parameters' device and dtype at
            the first step, not here). False: torch's default implementation.

    >>> make_adam([torch.nn.Parameter(torch.zeros(2))], 1e-3).defaults["fused"]
    True
    """
    if not fused:
        return torch.optim.Adam(parameters, lr=learning_rate, eps=eps)
    return torch.optim.Adam(parameters, lr=learning_rate, eps=eps, fused=True)
