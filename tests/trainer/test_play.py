"""`play` and `evaluate` on real run directories: returns, and an mp4 with one frame
per time step, from a tensor-native env and from a Gymnasium env in a thread."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import imageio.v2 as imageio
import numpy as np
import pytest

from cadence.config import load_config
from cadence.envs.errors import EnvBuildError
from cadence.trainer.play import _frame, evaluate, play
from cadence.trainer.run import train

TINY = [
    "env.num_envs=2",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=32",
    "trainer.eval_interval=0",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "algorithm.mini_batch_size=8",
]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A trained (briefly) ppo_cartpole run: CartPole plays in the tensor back end."""
    root = tmp_path_factory.mktemp("cartpole") / "run"
    config = load_config("ppo_cartpole", [*TINY, "env.max_episode_steps=30"], root_dir=root)
    train(config)
    return config, root


@pytest.fixture(scope="module")
def pixel_run(tmp_path_factory):
    """A briefly trained pixel run: its Gymnasium env plays in a ThreadEnvironment."""
    root = tmp_path_factory.mktemp("pixels") / "run"
    overrides = [*TINY, "env.max_episode_steps=12", "env.backend=serial", "env.env_kwargs.size=16"]
    config = load_config("ppo_cartpole_pixels", overrides, root_dir=root)
    train(config)
    return config, root


def _decode(path):
    """The number of frames ffmpeg decodes from the mp4, and the first of them."""
    count, first = 0, None
    with imageio.get_reader(path, "ffmpeg") as reader:
        for frame in reader:
            first = frame if first is None else first
            count += 1
    return count, np.asarray(first)


@pytest.mark.parametrize("run", ["cartpole_run", "pixel_run"])
def test_play_writes_one_frame_per_time_step(run, request, tmp_path):
    config, root = request.getfixturevalue(run)
    video = tmp_path / "out.mp4"
    result = play(config, root, episodes=2, video_path=video)
    assert len(result.returns) == len(result.lengths) == 2
    assert all(1 <= length <= config.env.max_episode_steps for length in result.lengths)
    # CartPole pays 1 per step.
    assert result.returns == [float(length) for length in result.lengths]
    # Each episode: its FIRST step's frame and one per action.
    assert result.num_frames == sum(result.lengths) + 2
    count, first = _decode(video)
    assert count == result.num_frames
    assert first.shape[-1] == 3 and first.shape[0] >= 64
    assert first.std() > 0  # not a blank picture


def test_play_without_video_renders_nothing(cartpole_run):
    config, root = cartpole_run
    result = play(config, root, episodes=1)
    assert result.num_frames == 0 and len(result.returns) == 1


def test_evaluate_averages_over_the_requested_episodes(cartpole_run):
    config, root = cartpole_run
    stats = evaluate(config, root, episodes=3)
    assert stats["episodes"] == 3.0
    assert 1.0 <= stats["mean_return"] <= 30.0
    assert stats["mean_length"] == stats["mean_return"]
    assert stats["std_return"] >= 0.0


def test_play_needs_a_checkpoint(tmp_path):
    config = load_config("ppo_cartpole", TINY, root_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        play(config, tmp_path)


@pytest.mark.skipif(
    not (ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa")),
    reason="MuJoCo needs EGL or OSMesa to render without a display",
)
def test_play_renders_a_mujoco_env_without_a_display(tmp_path):
    # Gymnasium's own choice, glfw, fails at the first frame on a machine without a display.
    root = tmp_path / "run"
    overrides = [*TINY, "env.max_episode_steps=10", "env.backend=serial"]
    config = load_config("ppo_hopper", overrides, root_dir=root)
    train(config)
    video = tmp_path / "hopper.mp4"
    env = {
        k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")
    }
    code = (
        "from cadence.cli import main; "
        f"raise SystemExit(main(['play', {str(root)!r}, '--video', {str(video)!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    count, first = _decode(video)
    assert count >= 2 and first.shape[-1] == 3 and first.std() > 0


class _Unrenderable:
    def render(self, env_index):
        raise RuntimeError("no OpenGL context")


def test_a_mujoco_env_that_cannot_render_says_how_to_fix_it():
    with pytest.raises(EnvBuildError, match="Hopper-v5 could not render.*MUJOCO_GL"):
        _frame(_Unrenderable(), "Hopper-v5")
    with pytest.raises(EnvBuildError, match="CartPole-v1 could not render") as error:
        _frame(_Unrenderable(), "CartPole-v1")
    assert "MUJOCO_GL" not in str(error.value)
