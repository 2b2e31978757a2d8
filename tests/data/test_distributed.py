"""`cadence.data.distributed`: the one-process expressions in one process, and over 2 gloo
ranks with different numbers of samples the statistics of all samples pooled."""

import json
import subprocess
import sys

import torch

from cadence.data import distributed
from cadence.trainer.launch import GroupStore
from cadence.transforms.running_stats import RunningMeanStd


def test_in_one_process_each_helper_is_the_one_process_expression():
    x = torch.randn(37)
    assert distributed.world_size() == 1 and not distributed.is_distributed()
    count = distributed.sample_count(x)
    assert count is None
    assert torch.equal(distributed.mean(x, count), x.mean())
    mean, std = distributed.mean_std(x, count)
    assert torch.equal(mean, x.mean()) and torch.equal(std, x.std())
    assert distributed.counts_over_ranks(5) == [5]
    assert distributed.mean_over_ranks({"a": 1.5}) == {"a": 1.5}
    parameter = torch.nn.Parameter(torch.ones(3))
    parameter.grad = torch.full((3,), 2.0)
    distributed.average_gradients([parameter])
    assert torch.equal(parameter.grad, torch.full((3,), 2.0))


# Rank r holds samples seeded r, 5 + 3r of them; prints what the helpers give.
_RANK_SCRIPT = """
import json, sys, torch
import torch.distributed as dist
from cadence.data import distributed
from cadence.transforms.running_stats import RunningMeanStd

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.randn(5 + 3 * rank, generator=torch.Generator().manual_seed(rank))
count = distributed.sample_count(x)
mean, std = distributed.mean_std(x, count)
share = distributed.mean(x * 2, count)
shares = [torch.zeros(()) for _ in range(2)]
dist.all_gather(shares, share)
stats = RunningMeanStd((1,))
stats.update(x.reshape(-1, 1))
stats.update(torch.empty(0, 1) if rank == 0 else x[:2].reshape(-1, 1))
weight = torch.nn.Parameter(torch.zeros(2))
weight.grad = torch.full((2,), float(rank + 1))
distributed.average_gradients([weight])
print(json.dumps({
    "count": count, "mean": mean.item(), "std": std.item(),
    "mean_of_2x": float(sum(shares) / 2), "counts": distributed.counts_over_ranks(len(x)),
    "stats": [stats.mean.item(), stats.var.item(), stats.count.item()],
    "grad": weight.grad.tolist(), "metrics": distributed.mean_over_ranks({"m": rank * 1.0}),
}))
dist.destroy_process_group()
"""


def test_over_two_gloo_ranks_the_statistics_are_those_of_all_samples():
    with GroupStore(2, timeout_s=120) as store:
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", _RANK_SCRIPT],
                env=store.rank_environment(rank),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for rank in range(2)
        ]
        results = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err.decode()[-2000:]
            results.append(json.loads(out))
    parts = [torch.randn(5 + 3 * r, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    pooled = torch.cat(parts)
    reference = RunningMeanStd((1,))
    reference.update(pooled.reshape(-1, 1))
    reference.update(parts[1][:2].reshape(-1, 1))
    for result in results:
        assert result["count"] == 13 and result["counts"] == [5, 8]
        assert abs(result["mean"] - pooled.mean().item()) < 1e-6
        assert abs(result["std"] - pooled.std().item()) < 1e-6
        # Rank 0 has 5 samples, rank 1 8: the shares average to the mean of all 13.
        assert abs(result["mean_of_2x"] - (2 * pooled).mean().item()) < 1e-6
        expected = [reference.mean.item(), reference.var.item(), reference.count.item()]
        assert all(abs(a - b) < 1e-9 for a, b in zip(result["stats"], expected, strict=True))
        assert result["grad"] == [1.5, 1.5]
        assert result["metrics"] == {"m": 0.5}
