"""The Polyak update of target networks: ``target <- target + tau * (online - target)``.

Lillicrap et al. 2015 (https://arxiv.org/abs/1509.02971, section 7) call it a soft target
update. SAC, TD3/DDPG and SAC on latents (`cadence.mbrl.policies`) all move their targets
with this one function, so they share its numbers: one in-place ``lerp_`` per tensor,
in the order the parameters are given, which is bit for bit what torch's fused foreach
lerp computes, eager and inside a compiled update.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


@torch.no_grad()
def polyak_update(
    targets: Iterable[torch.Tensor], onlines: Iterable[torch.Tensor], tau: float
) -> None:
    """Moves every target tensor ``tau`` of the way to its online counterpart, in place.

    Args:
        targets: the target network's tensors (typically ``target.parameters()``).
        onlines: the online network's tensors, in the same order and of the same shapes.
        tau: the Polyak rate in ``(0, 1]``; 1 lands on the online values up to the
            rounding of a lerp (use ``copy_`` where an exact copy matters).

    Raises:
        ValueError: if ``targets`` and ``onlines`` differ in length.

    >>> target, online = torch.zeros(2), torch.ones(2)
    >>> polyak_update([target], [online], 0.25)
    >>> target
    tensor([0.2500, 0.2500])
    """
    for target, online in zip(targets, onlines, strict=True):
        target.lerp_(online, tau)
