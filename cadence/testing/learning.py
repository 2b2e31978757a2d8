"""Learning checks for any named config: train to a bar, read back the evaluations.

A learning test trains a named config (test kind 3) until an evaluation reaches its
bar or the budget runs out, then asks how far it got: the best evaluation return, or
the env steps of the first evaluation at the bar (time to solve).

>>> curve = train_to_bar("ppo_cartpole", tmp_path / "run", 475, ["seed=0"])  # doctest: +SKIP
>>> curve.best_return >= 475 and curve.env_steps_to(475) <= curve.budget  # doctest: +SKIP
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from cadence.config import load_config
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

__all__ = ["EvalCurve", "train_to_bar"]


@dataclasses.dataclass
class EvalCurve:
    """The evaluations of one run, in order.

    Attributes:
        env_steps: the env steps at each evaluation.
        returns: the mean ``eval/episode_return`` of each evaluation.
        budget: the run's ``trainer.num_env_steps``.
    """

    env_steps: list[int]
    returns: list[float]
    budget: int

    @property
    def best_return(self) -> float:
        """The highest evaluation return."""
        return max(self.returns)

    def final_return(self, last: int = 3) -> float:
        """The mean of the last ``last`` evaluation returns (a run's final performance, less
        noisy than its last evaluation alone)."""
        tail = self.returns[-last:]
        return sum(tail) / len(tail)

    def env_steps_to(self, bar: float) -> int | None:
        """The env steps of the first evaluation at or above ``bar``, or None."""
        return next(
            (s for s, r in zip(self.env_steps, self.returns, strict=True) if r >= bar), None
        )


def train_to_bar(
    config_name: str, run_dir: Path, bar: float | None, overrides: Sequence[str] = ()
) -> EvalCurve:
    """Trains a named config in ``run_dir`` until an evaluation reaches ``bar`` (or the budget ends).

    Args:
        config_name: a named config (`cadence.config.list_configs`).
        run_dir: a new run directory.
        bar: the evaluation return that stops training (``trainer.stop_at_eval_return``);
            None trains the whole budget.
        overrides: further config overrides (``seed=...``, ``trainer.num_env_steps=...``).

    Returns:
        The run's evaluations.

    Raises:
        AssertionError: the run logged no evaluation (so nothing can be said of its learning).
        RuntimeError: the run was pre-empted (SIGTERM or SIGUSR1: e.g. the test run was
            stopped), so its curve ends early and says nothing of its learning either.
    """
    config = load_config(
        config_name,
        [
            f"root_dir={run_dir}",
            "trainer.progress_bar=off",
            f"trainer.stop_at_eval_return={'null' if bar is None else bar}",
            *overrides,
        ],
    )
    if train(config) == "preempted":
        raise RuntimeError(
            f"{config_name} was pre-empted (SIGTERM or SIGUSR1) in {run_dir}: it checkpointed "
            "and stopped before reaching its bar or budget, so its learning is not judged"
        )
    evals = [r for r in read_metrics(run_dir) if r.get("eval/episode_return") is not None]
    if not evals:
        raise AssertionError(f"{config_name} logged no evaluation in {run_dir}")
    return EvalCurve(
        env_steps=[int(r["env_steps"]) for r in evals],
        returns=[float(r["eval/episode_return"]) for r in evals],
        budget=int(config.trainer.num_env_steps),
    )
