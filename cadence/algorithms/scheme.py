"""What a training scheme is to the trainer (DESIGN §5): ``train_iter()`` and its own state.

`cadence.algorithms.on_policy.OnPolicyScheme` and `cadence.algorithms.off_policy.OffPolicyScheme`
are the two; both feed minibatches to `Algorithm.update` and sum its results with
`UpdateTotals`, and tell their `IterationProgress` how far an iteration has got.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from cadence.algorithms.algorithm import UpdateResult


class IterationResult(NamedTuple):
    """What one ``train_iter()`` returns.

    Attributes:
        metrics: the mean of every logged term over the iteration's updates, plus
            ``train/num_updates``.
        episodes: the stats of the episodes the unroll completed (``return``, ``length``,
            ``info/*``, each ``[N]``).
        nonfinite: 0-d bool tensor, True when any update met a non-finite loss or gradient;
            the trainer reads it once per iteration.
    """

    metrics: dict[str, float]
    episodes: dict[str, torch.Tensor]
    nonfinite: torch.Tensor


class IterationProgress(Protocol):
    """Told by a training scheme how far its iteration has got (the trainer's progress
    display listens: a model-based iteration takes minutes). Each call costs a clock
    read; none is made inside an update, so a compiled update stays one graph."""

    def collecting(self, env_steps: int, initial: bool = False) -> None:
        """An unroll of ``env_steps`` (those of every rank) begins; ``initial``: random
        actions before training starts."""

    def updating(self, done: int, total: int | None) -> None:
        """``done`` of the iteration's ``total`` updates (None: not known ahead) are done:
        called with 0 before the first update, then after each one (or each compiled call
        of several)."""


class NoProgress:
    """An `IterationProgress` that listens to nothing (a scheme's default)."""

    def collecting(self, env_steps: int, initial: bool = False) -> None:
        pass

    def updating(self, done: int, total: int | None) -> None:
        pass


class TrainingScheme(Protocol):
    """What the trainer drives: ``train_iter()`` plus the scheme's own state
    (e.g. a replay buffer), which goes into every checkpoint.

    ``progress`` is told how far each iteration has got; the trainer sets it while it
    runs (a `NoProgress` otherwise).

    ``state_dict`` / ``load_state_dict`` hold everything, in memory. A checkpoint takes
    the scheme's state in two parts instead (`write_checkpoint`): bulk data as files
    (a replay buffer's chunks, mostly on disk already: `persist` streams them there
    while training runs) and the rest for ``state.pt``.
    """

    progress: IterationProgress

    def train_iter(self) -> IterationResult: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def persist(self, directory: Path) -> None:
        """Keeps the bulk data streaming to ``directory`` (owned by the scheme) from now on."""

    def write_checkpoint(self, directory: Path) -> tuple[dict[str, Any], dict[str, str]]:
        """Writes the bulk data as fsynced files into ``directory`` (new, empty).

        Returns:
            the rest of the state (for ``state.pt``) and ``{file name relative to
            directory: sha256}`` of the files written.
        """

    def read_checkpoint(
        self, state: dict[str, Any], directory: Path, files: Mapping[str, str]
    ) -> None:
        """Restores what `write_checkpoint` wrote; ``files`` are its verified digests."""

    def cut_episodes(self) -> None:
        """The environments start new episodes without the old ones' ends (a resume
        without env state): the stored episodes in progress end as truncated."""

    def close(self) -> None:
        """Stops streaming (what was queued is written first)."""


class UpdateTotals:
    """Sums the metrics of a sequence of `UpdateResult` without syncing with the host.

    The results are kept as they come and summed when first read (one stack and sum per
    metric, instead of an addition per metric and update: a small update's metrics would
    otherwise cost tens of microseconds of Python each).

    Args:
        skip_nonfinite: count the updates flagged non-finite (which the algorithm did not
            apply, see `Algorithm.skip_nonfinite_updates`) instead of summing them; costs
            one host sync per update.
    """

    def __init__(self, skip_nonfinite: bool = False) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._nonfinite: torch.Tensor | None = None
        self._metrics: list[dict[str, torch.Tensor]] = []  # not yet in the sums
        self._flags: list[torch.Tensor] = []
        self.count = 0
        self.skip_nonfinite = skip_nonfinite
        self.skipped = 0

    @property
    def sums(self) -> dict[str, torch.Tensor]:
        """Every metric summed over the updates added."""
        self._fold()
        return self._sums

    @property
    def nonfinite(self) -> torch.Tensor | None:
        """0-d bool: whether any update added was flagged non-finite (None: none added)."""
        self._fold()
        return self._nonfinite

    def add(self, result: UpdateResult) -> None:
        """Adds one update's result, or K updates' stacked (``nonfinite`` ``[K]``, see
        `Algorithm.update_rows_many`); with ``skip_nonfinite``, those flagged are counted
        as skipped instead."""
        if self.skip_nonfinite:
            flags = result.nonfinite.reshape(-1)
            if bool(flags.any()):
                kept = ~flags
                self.skipped += int(flags.sum())
                if result.nonfinite.dim() == 0 or not bool(kept.any()):
                    return
                metrics = {key: value[kept] for key, value in result.metrics.items()}
                result = result._replace(metrics=metrics, nonfinite=flags[kept])
        self._metrics.append(result.metrics)
        self._flags.append(result.nonfinite)
        self.count += result.nonfinite.numel()

    def merge(self, other: UpdateTotals) -> None:
        """Adds the updates summed in ``other``."""
        self._metrics.extend(other._metrics)
        self._flags.extend(other._flags)
        for key, value in other._sums.items():
            self._sums[key] = self._sums[key] + value if key in self._sums else value
        if other._nonfinite is not None:
            self._or_nonfinite(other._nonfinite)
        self.count += other.count
        self.skipped += other.skipped

    def _fold(self) -> None:
        if not self._flags:
            return
        keys = dict.fromkeys(key for metrics in self._metrics for key in metrics)
        for key in keys:
            values = [metrics[key] for metrics in self._metrics if key in metrics]
            total = _joined(values).detach().sum()
            self._sums[key] = self._sums[key] + total if key in self._sums else total
        self._or_nonfinite(_joined(self._flags).any())
        self._metrics, self._flags = [], []

    def _or_nonfinite(self, flag: torch.Tensor) -> None:
        self._nonfinite = flag if self._nonfinite is None else self._nonfinite | flag

    def means(self) -> Mapping[str, float]:
        """The mean of every metric so far, each synced only when it is read."""
        return _Means(self)

    def result(self, episodes: dict[str, torch.Tensor]) -> IterationResult:
        """The iteration's result: one host sync per metric."""
        metrics = dict(self.means())
        metrics["train/num_updates"] = float(self.count)
        if self.skip_nonfinite:
            metrics["train/skipped_updates"] = float(self.skipped)
        nonfinite = torch.tensor(False) if self.nonfinite is None else self.nonfinite
        return IterationResult(metrics, episodes, nonfinite)


class _Means(Mapping[str, float]):
    def __init__(self, totals: UpdateTotals):
        self._totals = totals

    def __getitem__(self, key: str) -> float:
        return float(self._totals.sums[key]) / max(self._totals.count, 1)

    def __iter__(self) -> Iterator[str]:
        return iter(self._totals.sums)

    def __len__(self) -> int:
        return len(self._totals.sums)


def _joined(values: list[torch.Tensor]) -> torch.Tensor:
    """One update's 0-d values or several updates' ``[K]`` ones, as one 1-d tensor."""
    if all(value.dim() == 0 for value in values):
        return torch.stack(values)
    return torch.cat([value.reshape(-1) for value in values])
