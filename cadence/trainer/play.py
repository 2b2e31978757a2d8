"""`play` and `evaluate`: run a trained policy from a run directory's checkpoint."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.build import build_algorithm
from cadence.envs.environment import Environment
from cadence.envs.errors import EnvBuildError
from cadence.envs.make import make_env, picks_vector
from cadence.envs.mujoco_setup import is_mujoco_env, offscreen_gl_hint
from cadence.envs.wrapper_config import gym_wrappers
from cadence.trainer.checkpoint import STATE_FILE, CheckpointManager
from cadence.trainer.evaluation import (
    TransformedPolicy,
    evaluate_episodes,
    warn_cut_episodes,
)
from cadence.trainer.run import check_training_env
from cadence.trainer.video import write_mp4 as write_video
from cadence.transforms.build import make_data_transformer
from cadence.transforms.transformer import DataTransformer

logger = logging.getLogger(__name__)

# Play and eval episodes are seeded apart from training (seed + i) and from
# the trainer's periodic evaluation (seed + eval_seed_offset + iteration).
PLAY_SEED_OFFSET = 2_000_000_000


@dataclasses.dataclass
class PlayResult:
    """What `play` ran: each episode's return and length (in env steps, as budgets count
    them: `cadence.trainer.evaluation.ENV_STEPS`), and the frames written."""

    returns: list[float]
    lengths: list[int]
    num_frames: int


def load_policy(
    config: Any, run_dir: Path, env: Environment, checkpoint: str = "latest"
) -> tuple[Algorithm, DataTransformer | None]:
    """The run's algorithm and data transformers (eval mode) from one of its checkpoints
    (`load_policy_checkpoint` without the checkpoint's path)."""
    return load_policy_checkpoint(config, run_dir, env, checkpoint)[1:]


def load_policy_checkpoint(
    config: Any, run_dir: Path, env: Environment, checkpoint: str = "latest"
) -> tuple[Path, Algorithm, DataTransformer | None]:
    """The checkpoint loaded, and the run's algorithm and data transformers (eval mode).

    The transformers' statistics (normalizers) are the checkpoint's; the replay
    side of HER and frame stacking is not needed to act.

    Args:
        config: the run's config.
        run_dir: the run directory.
        env: the environment the policy will act in (its specs).
        checkpoint: ``"latest"``, ``"best"`` (the highest evaluation return recorded at
            a checkpoint) or an iteration number (see `CheckpointManager.load_verified`).
    """
    checkpoints = CheckpointManager(Path(run_dir) / "checkpoints")
    if not checkpoints.has_checkpoints():
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet (checkpoints/ is empty)")
    # Only state.pt is verified and read: acting never needs the replay buffer.
    path, state = checkpoints.load_verified(only=(STATE_FILE,), which=str(checkpoint))
    transformer = make_data_transformer(config.data_transformers, env.observation_spec)
    observation_spec = env.observation_spec
    if transformer is not None:
        transformer.load_state_dict(state["data_transformers"])
        transformer.eval()
        observation_spec = transformer.transformed_observation_spec(observation_spec)
    algorithm = build_algorithm(config.algorithm, observation_spec, env.action_spec, config.network)
    algorithm.load_state_dict(state["algorithm"])
    algorithm.eval()
    logger.info("loaded %s (--checkpoint %s)", path, checkpoint)
    return path, algorithm, transformer


def play(
    config: Any,
    run_dir: Path,
    episodes: int = 1,
    video_path: Path | None = None,
    checkpoint: str = "latest",
) -> PlayResult:
    """Runs ``episodes`` episodes one after another in a `ThreadEnvironment`.

    With ``video_path`` every time step's frame (the first of each episode
    included) goes into an mp4 at 30 frames per second.

    Raises:
        EnvBuildError: the run's environment cannot be built here.
    """
    check_training_env(config)
    env = _make_play_env(config, render=video_path is not None)
    try:
        policy = TransformedPolicy(*load_policy(config, run_dir, env, checkpoint), batch_size=1)
        frames: list[np.ndarray] = []
        returns, lengths = _run_episodes(
            policy,
            env,
            episodes,
            frames if video_path else None,
            config.env.name,
            config.trainer.eval_max_episode_steps,
        )
        lengths = [length * config.env.action_repeat for length in lengths]  # env steps
    finally:
        env.close()
    if video_path is not None:
        write_video(Path(video_path), frames)
    return PlayResult(returns, lengths, len(frames))


def make_policy_env(config: Any, num_envs: int) -> Environment:
    """The run's environments, ``num_envs`` of them, to act in with its policy.

    As training built them, but in-process (a parallel run's back end becomes serial) and
    seeded at ``seed + PLAY_SEED_OFFSET`` so they never repeat training episodes.
    """
    return make_env(
        config.env.name,
        num_envs,
        "serial" if config.env.backend == "parallel" else config.env.backend,
        config.seed + PLAY_SEED_OFFSET,
        max_episode_steps=config.env.max_episode_steps,
        gym_wrappers=gym_wrappers(config.env.all_wrappers),
        env_kwargs=dict(config.env.env_kwargs or {}),
    )


def evaluate(
    config: Any, run_dir: Path, episodes: int = 10, checkpoint: str = "latest"
) -> dict[str, float]:
    """Mean and standard deviation of the return over ``episodes`` episodes, and their mean
    length in env steps (simulator steps, as budgets count them).

    Raises:
        EnvBuildError: the run's environment cannot be built here (e.g. its ``module:Id``
            does not import from this working directory).
    """
    check_training_env(config)
    env = make_policy_env(config, episodes)
    try:
        algorithm, transformer = load_policy(config, run_dir, env, checkpoint)
        results = evaluate_episodes(
            algorithm,
            env,
            transformer=transformer,
            max_steps=config.trainer.eval_max_episode_steps,
            action_repeat=config.env.action_repeat,
        )
    finally:
        env.close()
    returns = results["return"]
    return {
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std(unbiased=False)),
        "mean_length": float(results["length"].double().mean()),
        "episodes": float(returns.numel()),
    }


@torch.no_grad()
def _run_episodes(
    policy: TransformedPolicy,
    env: Environment,
    episodes: int,
    frames: list[np.ndarray] | None,
    env_name: str,
    max_steps: int,
) -> tuple[list[float], list[int]]:
    """Runs ``episodes`` episodes, each cut after ``max_steps`` steps (with a warning)."""
    returns: list[float] = []
    lengths: list[int] = []
    cut = 0
    time_step = env.reset()
    state = policy.algorithm.initial_state(1)
    episode_return, episode_length = 0.0, 0
    while len(returns) < episodes:
        if frames is not None:
            frames.append(_frame(env, env_name))
        ends = bool(time_step.is_last()[0])
        if ends or episode_length >= max_steps:
            cut += not ends
            returns.append(episode_return)
            lengths.append(episode_length)
            episode_return, episode_length = 0.0, 0
            if len(returns) == episodes:
                break
            if not ends:  # the env would step on in the cut episode: start the next one
                time_step = env.reset()
                state = policy.algorithm.initial_state(1)
                continue
        step = policy.predict_step(time_step, state)
        state = step.state
        time_step = env.step(step.output)
        if not time_step.is_first()[0]:
            episode_return += float(time_step.reward[0])
            episode_length += 1
    if cut:
        warn_cut_episodes(cut, episodes, max_steps)
    return returns, lengths


_RENDER_HOW_TO = (
    "To film it, give the env's __init__ a render_mode=None argument kept as "
    "self.render_mode, declare metadata = {'render_modes': ['rgb_array']} and return an "
    "HxWx3 uint8 array from render(); or play without --video"
)


def _frame(env: Environment, env_name: str) -> np.ndarray | None:
    """The env's frame; a failure to render says how to fix it where it can.

    Raises:
        EnvBuildError: the env cannot render a frame.
    """
    try:
        return env.render(0)
    except Exception as error:
        message = f"{env_name} could not render a frame ({type(error).__name__}: {error})"
        if is_mujoco_env(env_name):
            message += f". {offscreen_gl_hint()}"
        elif "render_modes" in str(error) or isinstance(error, NotImplementedError):
            message += f". {_RENDER_HOW_TO}"
        raise EnvBuildError(message) from error


def _quiet_offscreen_sdl() -> None:
    """On a machine without a display, points SDL (pygame, which Gymnasium's classic-control
    envs draw their rgb_array frames with) at its dummy video driver: the frames are the
    same, and SDL no longer prints ``error: XDG_RUNTIME_DIR is invalid`` when it starts."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def _make_play_env(config: Any, render: bool) -> Environment:
    env_kwargs = dict(config.env.env_kwargs or {})
    backend = "thread"
    from cadence.envs import tensor

    wrappers = gym_wrappers(config.env.all_wrappers)
    if (
        tensor.has_tensor_env(config.env.name)
        and config.env.backend in ("tensor", "prefer_tensor", "auto")
        and not wrappers
    ):
        backend = "tensor"  # renders itself; its dynamics match the Gymnasium env's
    elif picks_vector(config.env.name, config.env.backend, gym_wrappers=wrappers):
        # The env training stepped: a vector env's observations and kwargs may not be its
        # single env's (ALE's has the frame preprocessing built in), and an id may have
        # no single env at all.
        backend = "vector"
    if backend != "tensor" and render:
        env_kwargs.setdefault("render_mode", "rgb_array")
        _quiet_offscreen_sdl()
    try:
        return make_env(
            config.env.name,
            1,
            backend,
            config.seed + PLAY_SEED_OFFSET,
            max_episode_steps=config.env.max_episode_steps,
            gym_wrappers=wrappers,
            env_kwargs=env_kwargs,
        )
    except TypeError as error:
        if not render or "render_mode" not in str(error):
            raise
        if backend != "vector":
            raise EnvBuildError(
                f"{config.env.name} takes no render_mode argument, so it cannot film frames "
                f"({error}). {_RENDER_HOW_TO}"
            ) from error
        raise EnvBuildError(
            f"{config.env.name}'s vector env, which the run trained on, renders no frames "
            f"({error}); play without --video, or train on single envs "
            "(env.backend=serial) to film the policy"
        ) from error
