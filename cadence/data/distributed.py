"""Statistics and gradients over the ranks of a ``torch.distributed`` group.

Under ``torchrun`` (or ``cadence train --nproc N``) every rank trains on its own
environments; what the loss normalises by must then be a statistic of all ranks'
samples, not of one rank's, so that N ranks of E envs learn what one process of N*E
envs would (docs/ddp.md). These helpers are that, and they are the identity in one
process: without an initialized group of more than one rank each returns exactly
what the one-process code computes (``x.mean()``, ``x.std()``), so a single-process run
is unchanged bit for bit.

The group is ``torch.distributed``'s default one, which `cadence.trainer.distributed`
sets up. Every rank must call these at the same points with the same shapes (they are
collectives): the losses and the rollout's normalisers run in lockstep on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    """The number of ranks training together (1 without an initialized group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def is_distributed() -> bool:
    """Whether more than one rank trains together."""
    return world_size() > 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over the ranks, in place (unchanged in one process)."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def counts_over_ranks(count: int, device: torch.device | str = "cpu") -> list[int]:
    """Every rank's ``count``, in rank order (``[count]`` in one process).

    Args:
        count: this rank's number (e.g. of samples).
        device: where the collective runs (the learner's device: NCCL needs CUDA).
    """
    if not is_distributed():
        return [count]
    mine = torch.tensor([count], dtype=torch.int64, device=device)
    counts = [torch.zeros_like(mine) for _ in range(world_size())]
    dist.all_gather(counts, mine)
    return [int(c.item()) for c in counts]


def mean_over_ranks(
    values: dict[str, float], device: torch.device | str = "cpu"
) -> dict[str, float]:
    """Each value averaged over the ranks (every rank must pass the same keys)."""
    if not is_distributed() or not values:
        return values
    keys = sorted(values)
    stacked = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
    all_reduce_sum(stacked)
    return {k: v / world_size() for k, v in zip(keys, stacked.tolist(), strict=True)}


def sample_count(samples: torch.Tensor) -> int | None:
    """The number of elements of ``samples`` on all ranks together; None in one process
    (the callers then take the one-process path).

    Args:
        samples: ``[N]`` this rank's samples (N may differ between ranks).
    """
    if not is_distributed():
        return None
    count = torch.tensor([samples.numel()], dtype=torch.float64, device=samples.device)
    return int(all_reduce_sum(count).item())


def mean(x: torch.Tensor, count: int | None) -> torch.Tensor:
    """This rank's share of the mean of ``x`` over all ranks' samples.

    In one process (``count`` None), ``x.mean()``. Across ranks, ``x.sum() * world /
    count``: averaging these shares over the ranks (as the gradient-sync hook averages
    gradients and the trainer averages logged metrics) gives the mean over the ``count``
    samples of all ranks, whatever each rank's own number of samples.

    Args:
        x: ``[N]`` this rank's samples.
        count: `sample_count` of them.
    """
    if count is None:
        return x.mean()
    return x.sum() * (world_size() / max(count, 1))


def mean_std(x: torch.Tensor, count: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and the (Bessel-corrected) standard deviation of ``x`` over all ranks'
    samples, the same on every rank; ``x.mean(), x.std()`` in one process.

    Two passes (the mean, then the squared deviations from it), as ``torch.std``.

    Args:
        x: ``[N]`` this rank's samples.
        count: `sample_count` of them.
    """
    if count is None:
        return x.mean(), x.std()
    total = all_reduce_sum(x.detach().sum().reshape(1).double())
    global_mean = (total / count).to(x.dtype).reshape(())
    squares = all_reduce_sum((x.detach() - global_mean).square().sum().reshape(1).double())
    std = (squares / max(count - 1, 1)).sqrt().to(x.dtype).reshape(())
    return global_mean, std


def average_gradients(parameters: list[torch.Tensor]) -> None:
    """Replaces each parameter's ``.grad`` by its mean over the ranks: the gradient-sync
    hook (`cadence.algorithms.Algorithm.set_gradient_sync`) of a group of ranks.

    The gradients are flattened into one buffer per dtype and device, so one optimizer
    step costs one collective. Parameters without a gradient are left out; every rank
    must have gradients for the same parameters (the same graph), as DDP requires.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads or not is_distributed():
        return
    scale = 1.0 / world_size()
    buckets: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for grad in grads:
        buckets.setdefault((grad.dtype, grad.device), []).append(grad)
    for bucket in buckets.values():
        flat = torch.cat([grad.reshape(-1) for grad in bucket])
        dist.all_reduce(flat)
        flat.mul_(scale)
        for grad, chunk in zip(bucket, flat.split([g.numel() for g in bucket]), strict=True):
            grad.copy_(chunk.view_as(grad))
