"""The on-policy training scheme: unroll once, update on it, drop it (DESIGN §5)."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.data.experience import Experience
from cadence.data.nest import Nest, map_structure


class ExperienceSource(Protocol):
    """Where experience comes from (`cadence.collect.Collector` is one)."""

    num_env_steps_per_unroll: int

    def unroll(self) -> tuple[Experience, dict[str, torch.Tensor]]: ...


class OnPolicyAlgorithm(Protocol):
    """What `OnPolicyScheme` needs of an algorithm beyond the `Algorithm` contract."""

    num_updates_per_train_iter: int
    mini_batch_size: int | None

    def preprocess_experience(self, experience: Experience) -> dict[str, Nest]: ...

    def apply_gradients(self, loss: torch.Tensor) -> torch.Tensor: ...


class TrainingScheme(Protocol):
    """What the trainer drives: ``train_iter()`` plus the scheme's own state
    (e.g. a replay buffer), which goes into every checkpoint."""

    source: ExperienceSource

    def train_iter(self) -> tuple[dict[str, float], dict[str, torch.Tensor]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class OnPolicyScheme:
    """``train_iter()``: one unroll, then minibatch epochs over it.

    Each minibatch goes ``train_step -> calc_loss -> optimizer step``. The
    unroll is flattened to ``[T * B]`` samples by ``preprocess_experience``
    (which may drop samples, e.g. actions ignored by auto-reset).

    Args:
        algorithm: an `Algorithm` that also satisfies `OnPolicyAlgorithm`.
        source: where unrolls come from.
    """

    def __init__(self, algorithm: Algorithm, source: ExperienceSource):
        self.algorithm = algorithm
        self.source = source

    def train_iter(self) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        """Returns the mean of every logged loss term and the completed-episode stats."""
        self.algorithm.eval()
        experience, episodes = self.source.unroll()
        self.algorithm.train()
        batch = self.algorithm.preprocess_experience(experience)
        return self._update(batch), episodes

    def state_dict(self) -> dict[str, Any]:
        """Nothing survives an iteration: the unroll is dropped after its update."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def _update(self, batch: dict[str, Nest]) -> dict[str, float]:
        num_samples = int(batch["advantage"].shape[0])
        mini_batch_size = self.algorithm.mini_batch_size or num_samples
        totals: dict[str, torch.Tensor] = {}
        num_updates = 0
        for _ in range(self.algorithm.num_updates_per_train_iter):
            permutation = torch.randperm(num_samples, device=batch["advantage"].device)
            for start in range(0, num_samples, mini_batch_size):
                indices = permutation[start : start + mini_batch_size]
                loss_info = self._update_minibatch(_select(batch, indices))
                for key, value in loss_info.items():
                    totals[key] = totals.get(key, 0.0) + value
                num_updates += 1
            if self._should_stop_epochs(totals, num_updates):
                break
        metrics = {key: float(value) / num_updates for key, value in totals.items()}
        metrics["train/num_updates"] = float(num_updates)
        return metrics

    def _update_minibatch(self, mini_batch: dict[str, Nest]) -> dict[str, torch.Tensor]:
        step = self.algorithm.train_step(mini_batch, ())
        loss_info = self.algorithm.calc_loss(step.info)
        grad_norm = self.algorithm.apply_gradients(loss_info.loss)
        extra = {k: v.detach() for k, v in loss_info.extra.items()}
        extra["loss/total"] = loss_info.loss.detach()
        extra["train/grad_norm"] = grad_norm.detach()
        return extra

    def _should_stop_epochs(self, totals: dict[str, torch.Tensor], num_updates: int) -> bool:
        target_kl = getattr(self.algorithm, "target_kl", None)
        if target_kl is None or "train/approx_kl" not in totals:
            return False
        return float(totals["train/approx_kl"]) / num_updates > target_kl


def _select(batch: dict[str, Nest], indices: torch.Tensor) -> dict[str, Any]:
    return map_structure(lambda x: x[indices], batch)
