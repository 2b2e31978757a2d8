"""Latent probes of a model-based run directory: a checkpoint's policy loaded and probed.

`cadence.mbrl.probe` holds the probe itself (`probe_policy`, `ridge_r2`); loading a run's
config and checkpoint needs `cadence.config` and `cadence.trainer`, layers above
`cadence.mbrl`, so the run-directory entry points live here, at the top with the command
line and the sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cadence.config.serialize import from_yaml
from cadence.mbrl.probe import (
    PROBE_EPISODES,
    PROBE_HELD_OUT,
    noisy_pendulum_signals,
    probe_policy,
)
from cadence.trainer.play import load_policy
from cadence.trainer.run import make_training_env


def probe_run(
    run_dir: Path,
    checkpoint: str = "latest",
    episodes: int = PROBE_EPISODES,
    held_out: int = PROBE_HELD_OUT,
    groups: Sequence[str] = ("x",),
    seed: int = 2024,
) -> torch.Tensor:
    """R² of a ridge probe from a model-based run's latent to each observed coordinate.

    Loads ``checkpoint`` of the run, runs its deterministic policy for one episode in each
    of ``episodes`` envs (seeded from ``seed``, so every checkpoint and run starts from the
    same initial states), fits `ridge_r2` from the features of ``groups`` (posterior belief and
    state) to the observation on the first ``episodes - held_out`` and scores it on the
    rest (`probe_policy`).

    Returns:
        ``[D]``: the held-out R² of every coordinate of the (flat) observation.
    """
    if not 0 < held_out < episodes:
        raise ValueError(f"held_out must be in 1 .. episodes - 1, got {held_out} of {episodes}")
    config = from_yaml((Path(run_dir) / "config.yaml").read_text())
    env = make_training_env(config, episodes, seed=seed, backend="serial")
    try:
        algorithm, _ = load_policy(config, run_dir, env, checkpoint)
        return probe_policy(algorithm, env, held_out, groups)
    finally:
        env.close()


def probe_noisy_pendulum(
    run_dir: Path, checkpoint: str = "latest", groups: Sequence[str] = ("x",)
) -> dict[str, Any]:
    """`probe_run` from ``groups`` (x by default), read by NoisyPendulum's signals
    (`noisy_pendulum_signals`): ``cos``, ``sin`` and ``velocity`` (the pendulum's R²), and
    ``y_max`` / ``z_max``, the largest R² over the coordinates of the reward-relevant and of
    the other distractors (absent without them). On plain Pendulum only the first three."""
    r2 = probe_run(run_dir, checkpoint, groups=groups)
    env_kwargs: dict[str, Any] = {}
    if r2.shape[0] > 3:
        config = from_yaml((Path(run_dir) / "config.yaml").read_text())
        env_kwargs = dict(config.env.env_kwargs or {})
    return noisy_pendulum_signals(r2, env_kwargs)
