"""`RunningMeanStd`: the exact mean and variance of everything seen so far."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cadence.data import distributed


class RunningMeanStd(nn.Module):
    """Element-wise running mean and (population) variance, merged batch by batch.

    Batches are merged with the parallel formula of Chan, Golub and LeVeque (1979),
    in float64, so the result equals the statistics of all samples at once up to
    rounding, whatever the batch sizes. The statistics are torch buffers: they are
    in ``state_dict`` and restore exactly.

    Under several ranks (docs/ddp.md) each `update` merges the batch of every rank (its
    moments summed across ranks), so that all ranks hold the same statistics, those of
    one process seeing all their samples; every rank must then call `update` at the same
    points (the rollout does, in lockstep).

    Args:
        shape: the shape of one sample (no batch dims).

    >>> stats = RunningMeanStd((2,))
    >>> stats.update(torch.tensor([[1.0, 0.0], [3.0, 0.0]]))
    >>> stats.update(torch.tensor([[5.0, 6.0]]))
    >>> stats.mean.tolist(), stats.var.tolist(), int(stats.count)
    ([3.0, 2.0], [2.6666666666666665, 8.0], 3)
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int] = ()) -> None:
        super().__init__()
        shape = tuple(shape)
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, samples: torch.Tensor) -> None:
        """Merges ``samples`` ``[N, *shape]`` into the statistics (no-op for ``N == 0``)."""
        samples = samples.to(self.mean.device, torch.float64)
        num = samples.shape[0]
        if distributed.is_distributed():
            num, batch_mean, batch_var = _moments_over_ranks(samples)
        elif num == 0:
            return
        else:
            batch_mean = samples.mean(0)
            batch_var = samples.var(0, unbiased=False)
        if num == 0:
            return
        total = self.count + num
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * num + delta.square() * self.count * num / total
        self.mean.add_(delta * num / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def std(self, epsilon: float) -> torch.Tensor:
        """``sqrt(var + epsilon)``, float64."""
        return (self.var + epsilon).sqrt()


def _moments_over_ranks(samples: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The count, mean and population variance of all ranks' ``samples`` ``[N, *shape]``
    (two collectives: the sums, then the squared deviations from the mean)."""
    shape = samples.shape[1:]
    sums = torch.cat([samples.new_tensor([samples.shape[0]]), samples.sum(0).reshape(-1)])
    distributed.all_reduce_sum(sums)
    num = int(sums[0].item())
    if num == 0:
        return 0, sums[1:].reshape(shape), sums[1:].reshape(shape)
    batch_mean = (sums[1:] / num).reshape(shape)
    squares = distributed.all_reduce_sum((samples - batch_mean).square().sum(0))
    return num, batch_mean, squares / num
