"""`train`: build a run from an experiment config and train it (new or resumed)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.build import build_algorithm
from cadence.algorithms.off_policy import OffPolicyScheme, check_first_window, make_replay_buffer
from cadence.algorithms.off_policy_config import off_policy_config
from cadence.algorithms.on_policy import OnPolicyScheme
from cadence.algorithms.scheme import TrainingScheme
from cadence.collect.unroll import Collector
from cadence.envs.environment import Environment
from cadence.envs.make import check_env, make_env
from cadence.envs.worker_pool import available_cores
from cadence.replay.buffer import ReplayBuffer
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.rng import seed_everything
from cadence.trainer.run_config import CHANGES_FILE, check_resume_config
from cadence.trainer.snapshot import write_snapshot
from cadence.trainer.trainer import EvaluationHook, Outcome, Trainer
from cadence.transforms.build import make_data_transformer
from cadence.transforms.transformer import DataTransformer

logger = logging.getLogger(__name__)


def train(
    config: Any, resume_with_changes: bool = False, on_evaluation: EvaluationHook | None = None
) -> Outcome | None:
    """Trains the experiment ``config`` in ``config.root_dir``, exactly as ``cadence train`` does.

    A new run writes ``config.yaml`` (the resolved tree, which alone reproduces the
    run and lets ``cadence play`` and ``cadence eval`` open it) and ``snapshot.tar.gz``
    first; a run directory holding a checkpoint resumes from it; one holding
    ``COMPLETE`` does nothing.

    Args:
        config: an experiment config (``cadence.config.ExperimentConfig``, e.g. from
            ``cadence.load_config``).
        resume_with_changes: continue a run whose ``config.yaml`` differs from ``config``
            (e.g. a finished run given a larger budget); the change is recorded in
            ``config_changes.jsonl``. Without it such a start is refused.
        on_evaluation: called after each evaluation; True pauses the run there (see `Trainer`).

    Returns:
        How training ended (``"complete"``, ``"preempted"``, ``"stopped_at_eval_return"``,
        ``"paused"`` by ``on_evaluation``), or None when the run was already complete.

    Raises:
        RunConfigMismatchError: the run directory holds a run with another config (see
            `cadence.trainer.run_config`); nothing was written.
        EnvBuildError: the environment cannot be built (see `check_training_env`); nothing
            was written.
        CheckpointError: no checkpoint of the run verifies; nothing was written.
        NonFiniteUpdateError: an update met a NaN or infinite loss or gradient.
    """
    run_dir = Path(config.root_dir)
    checkpoints = CheckpointManager(run_dir / "checkpoints")
    if checkpoints.has_checkpoints():
        iteration = latest_iteration(checkpoints.directory)
        if check_resume_config(run_dir, config.to_yaml(), resume_with_changes, iteration):
            logger.warning("%s resumes with a changed config (see %s)", run_dir, CHANGES_FILE)
            (run_dir / "COMPLETE").unlink(missing_ok=True)  # e.g. a larger budget
    if (run_dir / "COMPLETE").exists():
        logger.info("%s is already complete; nothing to do", run_dir)
        return None
    check_training_env(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not checkpoints.has_checkpoints():
        (run_dir / "config.yaml").write_text(config.to_yaml())
        write_snapshot(run_dir / "snapshot.tar.gz")
    trainer = build_trainer(config, run_dir, on_evaluation)
    try:
        return trainer.run()
    finally:
        trainer.collector.env.close()


def build_trainer(
    config: Any, run_dir: Path, on_evaluation: EvaluationHook | None = None
) -> Trainer:
    """Builds the environments, the algorithm and the trainer of ``config``."""
    trainer_config = config.trainer
    _configure_torch(trainer_config)
    seed_everything(config.seed)
    device = torch.device(trainer_config.device)
    _check_transformers_fit(config)
    env = make_training_env(config, config.env.num_envs, config.seed)
    _share_cores_with_env_workers(trainer_config, env)
    replay_buffer = make_training_replay_buffer(config, env.batch_size, device)
    transformer = make_data_transformer(
        config.data_transformers, env.observation_spec, replay_buffer
    )
    algorithm = build_algorithm(
        config.algorithm,
        transformed_spec(transformer, env.observation_spec),
        env.action_spec,
        config.network,
    )
    algorithm.to(device)
    if transformer is not None:
        transformer.to(device)
    collector = Collector(
        env,
        algorithm,
        trainer_config.unroll_length,
        device,
        transformer,
        action_repeat=config.env.action_repeat,
    )

    def make_eval_env(seed: int) -> Environment:
        backend = "serial" if config.env.backend == "parallel" else config.env.backend
        return make_training_env(config, trainer_config.num_eval_episodes, seed, backend=backend)

    return Trainer(
        trainer_config,
        algorithm,
        collector,
        make_scheme(config, algorithm, collector, env, replay_buffer),
        make_eval_env,
        run_dir,
        eval_seed=config.seed + trainer_config.eval_seed_offset,
        on_evaluation=on_evaluation,
    )


def make_scheme(
    config: Any,
    algorithm: Algorithm,
    collector: Collector,
    env: Environment,
    replay_buffer: ReplayBuffer | None = None,
) -> TrainingScheme:
    """The on-policy scheme, or the off-policy one for an algorithm config with ``off_policy``.

    The off-policy scheme trains on ``replay_buffer`` (a new one when None) and
    applies the collector's data transformers to every replayed minibatch.
    """
    off_policy = off_policy_config(config.algorithm)
    if off_policy is None:
        return OnPolicyScheme(algorithm, collector)
    if replay_buffer is None:
        replay_buffer = make_training_replay_buffer(config, env.batch_size, collector.device)
    check_first_window(
        off_policy, collector.unroll_length, collector.num_env_steps_per_unroll, env.batch_size
    )
    transformer = collector.transformer
    transform = None if transformer is None else transformer.transform_sample
    return OffPolicyScheme(
        algorithm, collector, replay_buffer, off_policy, env.action_spec, transform=transform
    )


def make_training_replay_buffer(
    config: Any, num_envs: int, device: torch.device | str
) -> ReplayBuffer | None:
    """The replay buffer of an off-policy ``config.algorithm``; None for on-policy ones."""
    off_policy = off_policy_config(config.algorithm)
    if off_policy is None:
        return None
    return make_replay_buffer(off_policy, num_envs, config.trainer.num_env_steps, device)


def transformed_spec(transformer: DataTransformer | None, observation_spec: Any) -> Any:
    """The observation spec the algorithm sees: the env's, after the data transformers."""
    if transformer is None:
        return observation_spec
    return transformer.transformed_observation_spec(observation_spec)


def _check_transformers_fit(config: Any) -> None:
    """Refuses HER for an on-policy algorithm (it relabels replayed samples only)."""
    on_policy = off_policy_config(config.algorithm) is None
    if on_policy and "hindsight_experience" in config.data_transformers.names:
        raise ValueError(
            f"data_transformers: hindsight_experience relabels replayed samples, but "
            f"{config.algorithm.name} is on-policy (no replay buffer); use an off-policy "
            "algorithm or remove it"
        )


def check_training_env(config: Any) -> None:
    """Builds and resets one env of ``config.env`` in this process, then closes it, so that an
    unknown id, a missing dependency or an env that raises fails before anything is written.

    Raises:
        EnvBuildError: the env cannot be built; the message says why (see `check_env`).
    """
    from cadence.envs.wrapper_config import gym_wrappers

    env_config = config.env
    check_env(
        env_config.name,
        env_config.backend,
        max_episode_steps=env_config.max_episode_steps,
        gym_wrappers=gym_wrappers(env_config.all_wrappers),
        env_kwargs=dict(env_config.env_kwargs or {}),
    )


def make_training_env(
    config: Any, num_envs: int, seed: int, backend: str | None = None
) -> Environment:
    """The environments of ``config.env`` with ``num_envs`` copies seeded from ``seed``."""
    from cadence.envs.wrapper_config import gym_wrappers

    env_config = config.env
    return make_env(
        env_config.name,
        num_envs,
        backend or env_config.backend,
        seed,
        max_episode_steps=env_config.max_episode_steps,
        gym_wrappers=gym_wrappers(env_config.all_wrappers),
        env_kwargs=dict(env_config.env_kwargs or {}),
        num_workers=env_config.num_workers,
        spin_us=env_config.spin_us,
        pin_workers=env_config.pin_workers,
        step_timeout_s=env_config.step_timeout_s,
        build_timeout_s=env_config.build_timeout_s,
    )


def _share_cores_with_env_workers(trainer_config: Any, env: Environment) -> None:
    """With ``num_threads`` 0, leaves the env's worker processes their cores.

    Torch's intra-op threads wait for each other by spinning; sharing cores with
    env workers, one of them is often descheduled and the rest wait for it (a PPO
    run on Hopper took 1.1x to 6x as long as with one thread, varying run to run).
    """
    num_workers = getattr(env, "num_workers", 0)
    if trainer_config.num_threads > 0 or not num_workers:
        return
    threads = max(1, available_cores() - num_workers)
    if threads < torch.get_num_threads():
        logger.info(
            "torch uses %d thread(s): the env's %d worker processes have the other cores "
            "(set trainer.num_threads to choose)",
            threads,
            num_workers,
        )
        torch.set_num_threads(threads)


def _configure_torch(trainer_config: Any) -> None:
    if trainer_config.num_threads > 0:
        torch.set_num_threads(trainer_config.num_threads)
    if trainer_config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
