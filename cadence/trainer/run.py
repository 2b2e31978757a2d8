"""`train`: build a run from an experiment config and train it (new or resumed)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.build import build_algorithm
from cadence.algorithms.off_policy import OffPolicyScheme, make_replay_buffer
from cadence.algorithms.on_policy import OnPolicyScheme, TrainingScheme
from cadence.collect.unroll import Collector
from cadence.envs.environment import Environment
from cadence.envs.make import make_env
from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.rng import seed_everything
from cadence.trainer.snapshot import write_snapshot
from cadence.trainer.trainer import Outcome, Trainer

logger = logging.getLogger(__name__)


def train(config: Any, config_yaml: str | None = None) -> Outcome | None:
    """Trains the experiment ``config`` in ``config.root_dir``.

    A new run writes ``config.yaml`` (``config_yaml``, the resolved tree) and
    ``snapshot.tar.gz`` first; a run directory holding a checkpoint resumes from
    it; one holding ``COMPLETE`` does nothing.

    Args:
        config: an experiment config (``cadence.config.ExperimentConfig``).
        config_yaml: its resolved YAML, written to ``config.yaml`` for a new run.

    Returns:
        How training ended, or None when the run was already complete.
    """
    run_dir = Path(config.root_dir)
    if (run_dir / "COMPLETE").exists():
        logger.info("%s is already complete; nothing to do", run_dir)
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    if CheckpointManager(run_dir / "checkpoints").latest() is None:
        if config_yaml is not None:
            (run_dir / "config.yaml").write_text(config_yaml)
        write_snapshot(run_dir / "snapshot.tar.gz")
    trainer = build_trainer(config, run_dir)
    try:
        return trainer.run()
    finally:
        trainer.collector.env.close()


def build_trainer(config: Any, run_dir: Path) -> Trainer:
    """Builds the environments, the algorithm and the trainer of ``config``."""
    trainer_config = config.trainer
    _configure_torch(trainer_config)
    seed_everything(config.seed)
    device = torch.device(trainer_config.device)
    env = make_training_env(config, config.env.num_envs, config.seed)
    algorithm = build_algorithm(config.algorithm, env.observation_spec, env.action_spec, config.network)
    algorithm.to(device)
    collector = Collector(env, algorithm, trainer_config.unroll_length, device)

    def make_eval_env(seed: int) -> Environment:
        backend = "serial" if config.env.backend == "parallel" else config.env.backend
        return make_training_env(config, trainer_config.num_eval_episodes, seed, backend=backend)

    return Trainer(
        trainer_config,
        algorithm,
        collector,
        make_scheme(config, algorithm, collector, env),
        make_eval_env,
        run_dir,
        eval_seed=config.seed + trainer_config.eval_seed_offset,
    )


def make_scheme(
    config: Any, algorithm: Algorithm, collector: Collector, env: Environment
) -> TrainingScheme:
    """The on-policy scheme, or the off-policy one for an algorithm config with ``off_policy``."""
    off_policy = getattr(config.algorithm, "off_policy", None)
    if off_policy is None:
        return OnPolicyScheme(algorithm, collector)
    replay_buffer = make_replay_buffer(
        off_policy, env.batch_size, config.trainer.num_env_steps, collector.device
    )
    return OffPolicyScheme(algorithm, collector, replay_buffer, off_policy, env.action_spec)


def make_training_env(config: Any, num_envs: int, seed: int, backend: str | None = None) -> Environment:
    """The environments of ``config.env`` with ``num_envs`` copies seeded from ``seed``."""
    env_config = config.env
    return make_env(
        env_config.name,
        num_envs,
        backend or env_config.backend,
        seed,
        max_episode_steps=env_config.max_episode_steps,
        env_kwargs=dict(env_config.env_kwargs or {}),
        num_workers=env_config.num_workers,
    )


def _configure_torch(trainer_config: Any) -> None:
    if trainer_config.num_threads > 0:
        torch.set_num_threads(trainer_config.num_threads)
    if trainer_config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
