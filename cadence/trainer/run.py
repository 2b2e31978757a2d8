"""`train`: build a run from an experiment config and train it (new or resumed)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.build import build_algorithm
from cadence.algorithms.off_policy import OffPolicyScheme, check_first_window, make_replay_buffer
from cadence.algorithms.on_policy import OnPolicyScheme
from cadence.algorithms.registry import record_registration
from cadence.algorithms.scheme import TrainingScheme
from cadence.collect.unroll import Collector
from cadence.data import distributed
from cadence.envs.environment import Environment
from cadence.envs.make import check_env, make_env, picks_tensor
from cadence.envs.worker_pool import available_cores
from cadence.envs.wrapper_config import gym_wrappers
from cadence.replay.buffer import ReplayBuffer
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.distributed import Ranks, rank_device, start_ranks
from cadence.trainer.placement import (
    Placement,
    ThreadCounts,
    choose_threads,
    forward_flops_per_row,
    learner_device,
    measured_placement,
    record_placement,
    resolve_placement,
    resolve_threads,
    warn_of_load,
    warn_of_removed_matmuls,
)
from cadence.trainer.rng import rank_seed, seed_everything
from cadence.trainer.run_config import CHANGES_FILE, check_resume_config, first_budget
from cadence.trainer.run_plan import RunPlan, unroll_graph_steps
from cadence.trainer.snapshot import SNAPSHOT_FILE, write_snapshot
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
        ValueError: under ``torchrun``, ``trainer.num_ranks`` is not the number of ranks
            it started; or ``on_evaluation`` with more than one rank.
        RankFailedError: a rank started here exited with an error.

    With ``trainer.num_ranks`` > 1 outside ``torchrun`` this starts that many local ranks
    (`cadence.trainer.launch.launch_ranks`, as ``cadence train`` does: new processes, so a script
    needs no ``if __name__ == "__main__":`` guard) and waits for them. Under ``torchrun``
    (or `cadence.cli.rank`) it runs one rank of the group (docs/ddp.md): rank 0 checks and
    prepares the run directory, then every rank trains.
    """
    trainer_config = config.trainer
    if trainer_config.num_ranks > 1 and "WORLD_SIZE" not in os.environ:
        if on_evaluation is not None:
            raise ValueError("on_evaluation pauses one process's run; it takes one rank")
        from cadence.trainer.launch import launch_ranks

        return launch_ranks(config) if prepare_run(config, resume_with_changes) else None
    with start_ranks(
        trainer_config.num_ranks,
        learner_device(trainer_config.device),
        trainer_config.collective_timeout_s,
    ) as ranks:
        if ranks.world_size > 1 and on_evaluation is not None:
            raise ValueError("on_evaluation pauses one process's run; it takes one rank")
        ready: bool | BaseException | None = None
        run_dir = Path(config.root_dir)
        before = _entries(run_dir)
        if ranks.is_writer:
            try:
                ready = prepare_run(config, resume_with_changes)
            except Exception as error:  # noqa: BLE001 - every rank stops with it
                if ranks.world_size == 1:
                    raise
                ready = error
        ready = ranks.broadcast(ready)
        if isinstance(ready, BaseException):
            raise ready
        if not ready:
            return None
        with torch_settings_restored():
            try:
                trainer = build_trainer(config, run_dir, on_evaluation, ranks)
            except BaseException:
                if ranks.world_size == 1 and before is not None:
                    _remove_new_entries(run_dir, before)
                raise
            try:
                return trainer.run()
            finally:
                trainer.collector.env.close()


@contextlib.contextmanager
def torch_settings_restored() -> Iterator[None]:
    """Puts back what a run sets for the whole process (torch's thread count, deterministic
    algorithms) when it ends. A run's numbers depend on its thread count: left set, one
    run's ``trainer.num_threads=1`` (or the cores it left its env workers) became the next
    run's in the same process (a notebook's next cell, a test session's next test), which
    then reached another return than it did alone."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _entries(run_dir: Path) -> set[str] | None:
    """What ``run_dir`` holds before a start, or None where it holds a checkpoint (a run
    to resume, whose files a failed start must never touch)."""
    if CheckpointManager(run_dir / "checkpoints").has_checkpoints():
        return None
    return {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else set()


def _remove_new_entries(run_dir: Path, before: set[str]) -> None:
    """Undoes a new run's start that failed before training (a config the env's spaces
    refuse, a network that does not fit them): its ``config.yaml``, snapshot and whatever
    else it wrote go, and the directory too if the start made it, so that a refused
    start leaves no run without metrics behind (which `cadence plot` would trip on)."""
    if not run_dir.is_dir():
        return
    for path in run_dir.iterdir():
        if path.name in before:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if not before and not any(run_dir.iterdir()):
        run_dir.rmdir()


def prepare_run(config: Any, resume_with_changes: bool = False) -> bool:
    """Checks a start of ``config.root_dir`` (see `train`) and writes a new run's
    ``config.yaml`` and snapshot; returns False when the run is already complete."""
    run_dir = Path(config.root_dir)
    checkpoints = CheckpointManager(run_dir / "checkpoints")
    if checkpoints.has_checkpoints():
        iteration = latest_iteration(checkpoints.directory)
        if check_resume_config(run_dir, config.to_yaml(), resume_with_changes, iteration):
            logger.warning("%s resumes with a changed config (see %s)", run_dir, CHANGES_FILE)
            (run_dir / "COMPLETE").unlink(missing_ok=True)  # e.g. a larger budget
    if (run_dir / "COMPLETE").exists():
        logger.info("%s is already complete; nothing to do", run_dir)
        return False
    check_training_env(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not checkpoints.has_checkpoints():
        _warn_of_other_files(run_dir)
        (run_dir / "config.yaml").write_text(config.to_yaml())
        record_registration(run_dir, config.algorithm.name)  # for eval, play, a resume
        write_snapshot(run_dir / SNAPSHOT_FILE)
    return True


def _warn_of_other_files(run_dir: Path) -> None:
    """Warns when a new run starts in a directory that already holds files and no earlier
    start's ``config.yaml`` (``--root-dir .`` in a project folder, say): the run's files
    would mix with them, which is rarely what was meant."""
    if (run_dir / "config.yaml").exists():
        return
    others = sorted(p.name for p in run_dir.iterdir())
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        logger.warning(
            "%s already holds %s, which are not a run's; the new run writes its files beside "
            "them (give --root-dir a new or empty directory to keep them apart)",
            run_dir,
            shown,
        )


def build_trainer(
    config: Any,
    run_dir: Path,
    on_evaluation: EvaluationHook | None = None,
    ranks: Ranks | None = None,
) -> Trainer:
    """Builds the environments, the algorithm and the trainer of ``config``.

    Under several ranks (``ranks``), env j of rank r is seeded ``seed + r * num_envs + j``
    and its evaluation envs ``seed + (r + 1) * eval_seed_offset + ...``; every rank
    builds the same initial networks (then rank 0's are broadcast), installs the
    gradient averaging, and draws its own random numbers from then on.
    """
    ranks = ranks if ranks is not None else Ranks.single()
    plan = RunPlan.from_config(config)
    trainer_config = _set_up_process(config, run_dir)
    learner = rank_device(learner_device(trainer_config.device), ranks)
    _check_transformers_fit(config, plan)
    placement = _placement_without_measurement(config, trainer_config, learner, run_dir, ranks)
    env_device = placement.env if placement is not None else "cpu"
    num_envs = config.env.num_envs
    env = make_training_env(config, num_envs, config.seed + ranks.rank * num_envs, env_device)
    algorithm, transformer, replay_buffer = _build_learner(
        config, plan, env, torch.device(learner), trainer_config.schedule_horizon
    )
    acting_threads = _set_threads(config, plan, algorithm, transformer, env, ranks, run_dir)
    if ranks.world_size > 1:
        _join_group(algorithm, config.seed, ranks)
    placement = _complete_placement(placement, learner, algorithm, transformer, env, acting_threads)
    record_placement(placement, run_dir, ranks.is_writer)
    collector = _make_collector(
        config, plan, env, algorithm, transformer, placement, learner, acting_threads
    )

    def make_eval_env(seed: int) -> Environment:
        backend = "serial" if config.env.backend == "parallel" else config.env.backend
        return make_training_env(config, trainer_config.num_eval_episodes, seed, backend=backend)

    return Trainer(
        trainer_config,
        algorithm,
        collector,
        make_scheme(plan, algorithm, collector, env, replay_buffer, trainer_config),
        make_eval_env,
        run_dir,
        eval_seed=config.seed + trainer_config.eval_seed_offset * (ranks.rank + 1),
        on_evaluation=on_evaluation,
        ranks=ranks,
    )


def _set_up_process(config: Any, run_dir: Path) -> Any:
    """Sets what a run sets for the whole process (torch's threads and determinism, the seed
    of every generator) and returns the trainer config with its schedule horizon resolved
    (`schedule_horizon`)."""
    warn_of_load()
    warn_of_removed_matmuls(run_dir)
    trainer_config = attrs.evolve(
        config.trainer, schedule_horizon=schedule_horizon(config.trainer, run_dir)
    )
    _configure_torch(trainer_config)
    seed_everything(config.seed)
    return trainer_config


def _placement_without_measurement(
    config: Any, trainer_config: Any, learner: str, run_dir: Path, ranks: Ranks
) -> Placement | None:
    """The placement decided before anything is built (`resolve_placement`), or None where
    ``auto`` measures it once the algorithm exists (`_complete_placement`)."""
    # One collector per rank acts on its rank's learner device unless told otherwise.
    collector_setting = trainer_config.collector_device
    if ranks.world_size > 1 and collector_setting == "auto":
        collector_setting = "learner"
    tensor_env = picks_tensor(
        config.env.name,
        config.env.num_envs,
        config.env.backend,
        learner,
        gym_wrappers(config.env.all_wrappers),
    )
    return resolve_placement(learner, collector_setting, run_dir, tensor_env)


def _build_learner(
    config: Any, plan: RunPlan, env: Environment, device: torch.device, horizon: int
) -> tuple[Algorithm, DataTransformer | None, ReplayBuffer | None]:
    """The algorithm (its update compiled for ``algorithm.compile``), the data transformers
    and, for an off-policy algorithm, the replay buffer (its beta schedule over ``horizon``
    env steps), on the learner's ``device``."""
    replay_buffer = (
        None
        if plan.off_policy is None
        else make_replay_buffer(plan.off_policy, env.batch_size, horizon, device)
    )
    transformer = make_data_transformer(
        config.data_transformers, env.observation_spec, replay_buffer
    )
    algorithm = build_algorithm(
        config.algorithm,
        transformed_spec(transformer, env.observation_spec),
        env.action_spec,
        config.network,
    )
    if plan.compile != "off":
        compile_update(algorithm, plan.compile)
    algorithm.to(device)
    if transformer is not None:
        transformer.to(device)
    return algorithm, transformer, replay_buffer


def _set_threads(
    config: Any,
    plan: RunPlan,
    algorithm: Algorithm,
    transformer: DataTransformer | None,
    env: Environment,
    ranks: Ranks,
    run_dir: Path,
) -> int | None:
    """Sets torch's threads for updating (`resolve_threads`) and returns those for acting
    where they are fewer, else None."""
    threads = resolve_threads(
        config.trainer.num_threads,
        run_dir,
        lambda: _choose_threads(plan, algorithm, transformer, env, ranks),
        available_cores(),
    )
    torch.set_num_threads(threads.updating)
    return threads.acting if threads.acting < threads.updating else None


def _complete_placement(
    placement: Placement | None,
    learner: str,
    algorithm: Algorithm,
    transformer: DataTransformer | None,
    env: Environment,
    acting_threads: int | None,
) -> Placement:
    """The run's placement: the one decided before anything was built, else measured
    (`measured_placement`), with the thread counts.

    Raises:
        ValueError: the collector acts on another device than the learner's while data
            transformers are on.
    """
    if placement is None:  # auto, Gymnasium envs, the learner on an accelerator
        placement = (
            Placement(learner, learner, "cpu")  # transformers keep their statistics in one place
            if transformer is not None
            else measured_placement(learner, algorithm, env)
        )
    if placement.split and transformer is not None:
        raise ValueError(
            f"trainer.collector_device={placement.collector} is not the learner's device "
            f"({learner}), which data transformers do not support (they keep their "
            "statistics on one device); set trainer.collector_device=learner"
        )
    return attrs.evolve(
        placement,
        num_threads=torch.get_num_threads(),
        acting_threads=acting_threads or 0,
    )


def _make_collector(
    config: Any,
    plan: RunPlan,
    env: Environment,
    algorithm: Algorithm,
    transformer: DataTransformer | None,
    placement: Placement,
    learner: str,
    acting_threads: int | None,
) -> Collector:
    """The collector acting on ``placement.collector``, its unroll compiled for
    ``algorithm.compile``."""
    collector = Collector(
        env,
        algorithm,
        config.trainer.unroll_length,
        placement.collector,
        transformer,
        action_repeat=config.env.action_repeat,
        learner_device=learner,
        acting_threads=acting_threads,
    )
    if plan.compile != "off":
        compile_unroll(collector, plan)
    return collector


def _join_group(algorithm: Algorithm, seed: int, ranks: Ranks) -> None:
    """Starts every rank from rank 0's networks, averages the gradients across ranks, and
    gives each rank other than 0 its own random numbers (exploration, minibatches)."""
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in [*algorithm.parameters(), *algorithm.buffers()]:
            dist.broadcast(tensor, src=0)
    algorithm.set_gradient_sync(distributed.average_gradients)
    if ranks.rank != 0:
        seed_everything(rank_seed(seed, ranks.rank))


def _choose_threads(
    plan: RunPlan,
    algorithm: Algorithm,
    transformer: DataTransformer | None,
    env: Environment,
    ranks: Ranks,
) -> ThreadCounts:
    """``trainer.num_threads`` 0's thread counts (`cadence.trainer.placement.choose_threads`):
    from the FLOPs of one row through the networks, the rows of an acting step and of an
    update's minibatch, and the cores: torch's count, shared among the ranks on this
    machine, and while acting, less the cores the env's worker processes take.

    Torch's intra-op threads wait for each other by spinning; sharing cores with stepping
    env workers, one of them is often descheduled and the rest wait for it (a PPO run on
    Hopper took 1.1x to 6x as long with two threads as with one, varying run to run).
    Between unrolls the workers sleep, so updates large enough for threads take every core.
    """
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", ranks.world_size))
    cores = max(1, min(torch.get_num_threads(), available_cores() // max(1, local_ranks)))
    num_workers = getattr(env, "num_workers", 0)  # only process back ends have workers
    acting_cores = max(1, min(cores, available_cores() - num_workers)) if num_workers else cores
    spec = transformed_spec(transformer, env.observation_spec)
    try:
        flops = forward_flops_per_row(algorithm, spec, env.action_spec)
    except Exception as error:  # noqa: BLE001 - a policy that cannot act on zeros
        flops = 2 * sum(p.numel() for p in algorithm.parameters())  # an MLP's forward
        logger.info(
            "counting one row's FLOPs failed (%s: %s); taking twice the parameter count",
            type(error).__name__, error,
        )  # fmt: skip
    rows = plan.update_rows
    chosen = choose_threads(flops, env.batch_size, rows, cores, acting_cores)
    logger.info(
        "torch threads: %d while updating (%.2g FLOPs forward per minibatch of %d rows), %d "
        "while acting (%.2g per step of %d envs); %d core(s) available; set "
        "trainer.num_threads to fix one count",
        chosen.updating, flops * rows, rows, chosen.acting, flops * env.batch_size,
        env.batch_size, cores,
    )  # fmt: skip
    return chosen


def compile_update(algorithm: Algorithm, mode: str) -> None:
    """Compiles ``algorithm``'s update with ``algorithm.compile`` (before any acting copy
    is made, which copies its compiler): with `compile_unroll`, where a run loads the
    optional fast path (`cadence.accel`), which an eager run never imports."""
    from cadence.accel import compile_update as install

    install(algorithm, mode)


def compile_unroll(collector: Collector, plan: RunPlan) -> None:
    """Injects the compiled unroll strategy into ``collector`` (`cadence.accel`)."""
    from cadence.accel import CompiledUnroll

    collector.set_unroll_strategy(CompiledUnroll(collector, unroll_graph_steps(plan)))


def make_scheme(
    plan: RunPlan,
    algorithm: Algorithm,
    collector: Collector,
    env: Environment,
    replay_buffer: ReplayBuffer | None,
    trainer_config: Any,
) -> TrainingScheme:
    """The on-policy scheme, with ``plan.on_policy``'s schedule, or the off-policy one (for
    ``plan.off_policy``), which trains on ``replay_buffer`` and applies the collector's data
    transformers to every replayed minibatch."""
    if plan.on_policy is not None:
        return OnPolicyScheme(
            algorithm, collector, plan.on_policy, updates_per_graph=trainer_config.updates_per_graph
        )
    assert plan.off_policy is not None  # a plan is on-policy or off-policy
    assert replay_buffer is not None  # `_build_learner` makes one for an off-policy plan
    check_first_window(
        plan.off_policy,
        collector.unroll_length,
        collector.num_env_steps_per_unroll * distributed.world_size(),  # every rank unrolls
        env.batch_size,
    )
    transformer = collector.transformer
    transform = None if transformer is None else transformer.transform_sample
    return OffPolicyScheme(
        algorithm, collector, replay_buffer, plan.off_policy, env.action_spec, transform=transform
    )


def schedule_horizon(trainer_config: Any, run_dir: Path) -> int:
    """The env steps the schedules run over (docs/resume.md): ``trainer.schedule_horizon``,
    or, at 0, the budget the run was first started with; logs when the budget now
    goes past it (the schedules then hold their final values)."""
    horizon = trainer_config.schedule_horizon or first_budget(run_dir)
    horizon = horizon or trainer_config.num_env_steps
    if trainer_config.num_env_steps > horizon:
        logger.info(
            "the schedules (a linear learning rate, DQN's epsilon, prioritized replay's "
            "beta) run over %d env steps (trainer.schedule_horizon; by default the budget "
            "the run started with) and hold their final values past it; set "
            "trainer.schedule_horizon to stretch them over the budget of %d",
            horizon,
            trainer_config.num_env_steps,
        )
    return horizon


def transformed_spec(transformer: DataTransformer | None, observation_spec: Any) -> Any:
    """The observation spec the algorithm sees: the env's, after the data transformers."""
    if transformer is None:
        return observation_spec
    return transformer.transformed_observation_spec(observation_spec)


def _check_transformers_fit(config: Any, plan: RunPlan) -> None:
    """Refuses HER for an on-policy algorithm (it relabels replayed samples only)."""
    if plan.off_policy is None and "hindsight_experience" in config.data_transformers.names:
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
    env_config = config.env
    check_env(
        env_config.name,
        env_config.backend,
        max_episode_steps=env_config.max_episode_steps,
        gym_wrappers=gym_wrappers(env_config.all_wrappers),
        env_kwargs=dict(env_config.env_kwargs or {}),
    )


def make_training_env(
    config: Any, num_envs: int, seed: int, device: Any = "cpu", backend: str | None = None
) -> Environment:
    """The environments of ``config.env`` with ``num_envs`` copies seeded from ``seed``,
    delivering time steps on ``device`` (where tensor-native ones run); without a
    ``backend`` of its own (evaluation's), as ``env.async_batch_size`` asks."""
    env_config = config.env
    return make_env(
        env_config.name,
        num_envs,
        backend or env_config.backend,
        seed,
        device=device,
        max_episode_steps=env_config.max_episode_steps,
        gym_wrappers=gym_wrappers(env_config.all_wrappers),
        env_kwargs=dict(env_config.env_kwargs or {}),
        num_workers=env_config.num_workers,
        spin_us=env_config.spin_us,
        pin_workers=env_config.pin_workers,
        step_timeout_s=env_config.step_timeout_s,
        build_timeout_s=env_config.build_timeout_s,
        async_batch_size=env_config.async_batch_size if backend is None else None,
        reproducible=config.trainer.deterministic,
    )


def _configure_torch(trainer_config: Any) -> None:
    if trainer_config.num_threads > 0:
        torch.set_num_threads(trainer_config.num_threads)
    if trainer_config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
