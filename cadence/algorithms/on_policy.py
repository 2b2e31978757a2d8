"""The on-policy training scheme: unroll once, update on it, drop it (DESIGN §5)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
import torch

from cadence.algorithms.algorithm import Algorithm, Batch
from cadence.algorithms.compile_config import DEFAULT_UPDATES_PER_GRAPH, MAX_UPDATES_PER_GRAPH
from cadence.algorithms.scheme import IterationProgress, IterationResult, NoProgress, UpdateTotals
from cadence.data import distributed
from cadence.data.experience import Experience
from cadence.data.nest import flatten


class ExperienceSource(Protocol):
    """Where experience comes from (`cadence.collect.Collector` is one)."""

    num_env_steps_per_unroll: int

    def unroll(self) -> tuple[Experience, dict[str, torch.Tensor]]: ...


@attrs.frozen
class OnPolicySchedule:
    """The update schedule of an on-policy run: passes over each unroll, in minibatches of
    what size (the run's `cadence.trainer.run_plan.RunPlan` reads it from the algorithm
    config; the default is one pass over the whole unroll, A2C's).

    Attributes:
        num_updates_per_train_iter: passes (PPO's epochs) over each unroll.
        mini_batch_size: samples per minibatch, or env sequences with a recurrent policy
            (None: the whole unroll).

    >>> OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=128)
    OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=128)
    """

    num_updates_per_train_iter: int = 1
    mini_batch_size: int | None = None


class OnPolicyScheme:
    """``train_iter()``: one unroll, then the schedule's ``num_updates_per_train_iter``
    passes over it.

    ``preprocess_experience`` turns the unroll into a batch whose leaves share their first
    dim: ``[T * B]`` samples for a feed-forward policy (it may drop some, e.g. actions
    ignored by auto-reset), or ``[B]`` whole env sequences for a recurrent one. Each pass
    shuffles that dim and cuts it into minibatches of the schedule's ``mini_batch_size``
    (all of it when None), each one `Algorithm.update_rows`; after each pass,
    `Algorithm.stop_epochs` sees that pass's mean metrics and may end the passes early.

    Under several ranks (docs/ddp.md), ``mini_batch_size`` counts the samples of all
    ranks, as in one process of all their envs: each pass has ``ceil(total /
    mini_batch_size)`` minibatches on every rank (each rank cutting its own samples into
    that many nearly equal parts), so that every rank steps the same number of times
    whatever its number of samples; `Algorithm.stop_epochs` sees the means over all ranks.

    Where the algorithm `Algorithm.fuses_updates` (a compiled update), the updates run
    ``updates_per_graph`` at a time as one compiled call (`Algorithm.update_rows_many`):
    all passes' shuffles are then drawn before their updates, unless `stop_epochs` may end
    the passes early (`Algorithm.may_stop_epochs`), when each pass is run on its own. The
    eager scheme draws its shuffles in the same order, so both give the same minibatches.

    Args:
        algorithm: the algorithm.
        source: where unrolls come from.
        schedule: the passes over each unroll and their minibatch size (default: one
            pass over the whole unroll).
        updates_per_graph: compiled updates per call at most (calls of nearly equal
            sizes); 1: one call per update.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        source: ExperienceSource,
        schedule: OnPolicySchedule = OnPolicySchedule(),
        updates_per_graph: int = DEFAULT_UPDATES_PER_GRAPH,
    ):
        if not 1 <= updates_per_graph <= MAX_UPDATES_PER_GRAPH:
            raise ValueError(
                f"updates_per_graph must be 1 to {MAX_UPDATES_PER_GRAPH}; got {updates_per_graph}"
            )
        self.algorithm = algorithm
        self.source = source
        self.schedule = schedule
        self.updates_per_graph = updates_per_graph
        self.progress: IterationProgress = NoProgress()

    def train_iter(self) -> IterationResult:
        """Returns the mean of every logged term and the completed-episode stats."""
        self.algorithm.eval()
        self.progress.collecting(self.source.num_env_steps_per_unroll * distributed.world_size())
        experience, episodes = self.source.unroll()
        self.algorithm.train()
        batch = self.algorithm.preprocess_experience(experience)
        return self._update(batch).result(episodes)

    def state_dict(self) -> dict[str, Any]:
        """Nothing survives an iteration: the unroll is dropped after its update."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def persist(self, directory: Path) -> None:
        """Nothing to stream: the scheme holds no data between iterations."""

    def write_checkpoint(self, directory: Path) -> tuple[dict[str, Any], dict[str, str]]:
        return self.state_dict(), {}

    def read_checkpoint(
        self, state: dict[str, Any], directory: Path, files: Mapping[str, str]
    ) -> None:
        self.load_state_dict(state)

    def cut_episodes(self) -> None:
        """Nothing stored: the next unroll starts from the new episodes."""

    def close(self) -> None:
        pass

    def _update(self, batch: Batch) -> UpdateTotals:
        if distributed.is_distributed():
            return self._update_across_ranks(batch)
        algorithm = self.algorithm
        first_leaf = flatten(batch)[0]
        num_samples = int(first_leaf.shape[0])
        mini_batch_size = self.schedule.mini_batch_size or num_samples
        epochs = self.schedule.num_updates_per_train_iter
        # Passes whose shuffles are drawn before their updates: all of them, unless
        # `stop_epochs` may end them after any one.
        together = 1 if algorithm.may_stop_epochs else epochs
        totals = UpdateTotals(algorithm.skip_nonfinite_updates)
        per_pass = -(-num_samples // mini_batch_size)
        self.progress.updating(0, epochs * per_pass)  # at most: `stop_epochs` may end sooner
        for first in range(0, epochs, together):
            permutations = [
                torch.randperm(num_samples, device=first_leaf.device)
                for _ in range(min(together, epochs - first))
            ]
            minibatches = [
                permutation[start : start + mini_batch_size]
                for permutation in permutations
                for start in range(0, num_samples, mini_batch_size)
            ]
            passes = UpdateTotals(algorithm.skip_nonfinite_updates)
            self._run_updates(batch, minibatches, passes, (first * per_pass, epochs * per_pass))
            totals.merge(passes)
            if together == 1 and algorithm.stop_epochs(passes.means()):
                break
        return totals

    def _run_updates(
        self,
        batch: Batch,
        minibatches: list[torch.Tensor],
        totals: UpdateTotals,
        count: tuple[int, int],
    ) -> None:
        """The updates on ``minibatches`` in turn, ``updates_per_graph`` per compiled call
        (as few calls as that allows, of nearly equal sizes) where the algorithm fuses;
        ``count``: the iteration's updates done before these and in all, for `progress`."""
        algorithm = self.algorithm
        done, total = count
        if not algorithm.fuses_updates or self.updates_per_graph == 1 or len(minibatches) == 1:
            for indices in minibatches:
                totals.add(algorithm.update_rows(batch, indices))
                done += 1
                self.progress.updating(done, total)
            return
        calls = -(-len(minibatches) // self.updates_per_graph)
        for part in _split_evenly(minibatches, calls):
            totals.add(algorithm.update_rows_many(batch, part))
            done += len(part)
            self.progress.updating(done, total)

    def _update_across_ranks(self, batch: Batch) -> UpdateTotals:
        algorithm = self.algorithm
        first_leaf = flatten(batch)[0]
        device = first_leaf.device
        num_samples = int(first_leaf.shape[0])
        counts = distributed.counts_over_ranks(num_samples, device)
        total = sum(counts)
        mini_batch_size = self.schedule.mini_batch_size or total
        num_minibatches = max(1, min(-(-total // mini_batch_size), min(counts)))
        totals = UpdateTotals(algorithm.skip_nonfinite_updates)
        epochs = self.schedule.num_updates_per_train_iter
        updates, done = epochs * num_minibatches, 0
        self.progress.updating(0, updates)
        for _ in range(epochs):
            epoch = UpdateTotals(algorithm.skip_nonfinite_updates)
            permutation = torch.randperm(num_samples, device=device)
            for indices in permutation.tensor_split(num_minibatches):
                epoch.add(algorithm.update_rows(batch, indices))
                done += 1
                self.progress.updating(done, updates)
            totals.merge(epoch)
            if algorithm.stop_epochs(distributed.mean_over_ranks(dict(epoch.means()), device)):
                break
        return totals


def _split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` consecutive runs whose lengths differ by at most one (the
    longer first)."""
    size, extra = divmod(len(items), parts)
    runs, start = [], 0
    for part in range(parts):
        end = start + size + (part < extra)
        runs.append(items[start:end])
        start = end
    return runs
