"""Environments on the command line, as real ``cadence`` processes: a named config trains any
Gymnasium env given as ``env.name``, and every reason an env cannot be built (an unknown id, a
missing optional dependency, a ``module:Id`` whose module does not import, an env that raises
in its constructor) exits 2 with one message on stderr, no traceback, and nothing written.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.config import load_config, to_yaml

REPO = Path(__file__).resolve().parents[1]

BROKEN_MODULE = """
import gymnasium as gym


class Broken(gym.Env):
    def __init__(self):
        raise RuntimeError("no simulator licence")


gym.register("Broken-v0", entry_point=Broken)
"""


def _cadence(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    # This checkout first on the path, whatever cadence is installed.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "cadence", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_refused(result: subprocess.CompletedProcess, *messages: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for message in messages:
        assert message in result.stderr


_NO_BOX2D = importlib.util.find_spec("Box2D") is None


@pytest.mark.parametrize(
    ("overrides", "messages"),
    [
        (["env.name=NoSuchEnv-v0"], ["cadence train: Unknown environment id 'NoSuchEnv-v0'"]),
        (
            ["env.name=no_such_module:Foo-v0"],
            ["its module 'no_such_module' cannot be imported", "No module named 'no_such_module'"],
        ),
        (["env.name=broken_env:Broken-v0"], ["RuntimeError: no simulator licence"]),
        pytest.param(
            ["env.name=LunarLander-v3"],
            ["needs a package that is not installed", "Box2D is not installed", "pip install"],
            marks=pytest.mark.skipif(not _NO_BOX2D, reason="Box2D is installed"),
        ),
    ],
    ids=["unknown", "module", "constructor", "dependency"],
)
def test_train_with_an_env_that_cannot_be_built_exits_2_writing_nothing(
    tmp_path, overrides, messages
):
    (tmp_path / "broken_env.py").write_text(BROKEN_MODULE)
    result = _cadence("train", "sac_pendulum", *overrides, cwd=tmp_path)
    _assert_refused(result, *messages)
    # Neither the default run directory (runs/...) nor anything else was made.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken_env.py"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.name=Pendulm-v1"], "Did you mean: Pendulum-v1"),
        (
            ["env.name=Acrobot-v1", "env.backend=tensor"],
            "No tensor-native implementation of 'Acrobot-v1'",
        ),
    ],
)
def test_more_env_errors_in_process(capsys, tmp_path, monkeypatch, overrides, message):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "ppo_pendulum", *overrides]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_named_config_trains_another_gymnasium_env(tmp_path):
    # sac_pendulum runs on cadence's tensor-native Pendulum; MountainCar runs on Gymnasium.
    result = _cadence(
        "train",
        "sac_pendulum",
        "env.name=MountainCarContinuous-v0",
        "env.max_episode_steps=50",
        "trainer.num_env_steps=100",
        "trainer.num_eval_episodes=1",
        "trainer.progress_bar=off",
        "--root-dir",
        "run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "COMPLETE").exists()
    assert "backend: prefer_tensor" in (tmp_path / "run" / "config.yaml").read_text()


def test_eval_of_a_run_whose_env_cannot_be_built_here_exits_2(tmp_path):
    _write_run_of_a_moved_module(tmp_path / "run")
    result = _cadence("eval", "run", cwd=tmp_path)
    _assert_refused(result, "cadence eval: ", "its module 'moved_away' cannot be imported")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]


def test_play_of_a_run_whose_env_cannot_be_built_here_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_run_of_a_moved_module(tmp_path / "run")
    assert main(["play", "run", "--video", "out.mp4"]) == 2
    captured = capsys.readouterr()
    assert "cadence play: " in captured.err and "'moved_away' cannot be" in captured.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["config.yaml", "run"]


def _write_run_of_a_moved_module(run: Path) -> None:
    """A run of a user's env module that this working directory does not have."""
    run.mkdir()
    config = load_config("ppo_cartpole", ["env.name=moved_away:Corridor-v0"], root_dir=run)
    (run / "config.yaml").write_text(to_yaml(config))


SPACES_MODULE = """
import gymnasium as gym
import numpy as np


class Spaces(gym.Env):
    def __init__(self, observation_space, action_space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        return self.observation_space.sample(), 0.0, False, False, {}


VECTOR = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
gym.register(
    "MultiDiscreteActions-v0",
    entry_point=lambda: Spaces(VECTOR, gym.spaces.MultiDiscrete([3, 2])),
    max_episode_steps=10,
)
gym.register(
    "ChannelsLast-v0",
    entry_point=lambda: Spaces(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), gym.spaces.Discrete(2)),
    max_episode_steps=10,
)
"""
TINY_RUN = ["trainer.num_env_steps=64", "trainer.num_eval_episodes=1", "trainer.progress_bar=off"]


@pytest.mark.parametrize(
    ("config", "env", "message", "fix"),
    [
        (
            "dqn_cartpole",
            "MultiDiscreteActions-v0",
            "DQN needs a single discrete action (gymnasium Discrete)",
            ["ppo_cartpole"],  # PPO and A2C take MultiDiscrete actions
        ),
        (
            "ppo_cartpole",
            "ChannelsLast-v0",
            "the observations are images of shape (16, 16, 3), channels last",
            ["ppo_cartpole", "env.wrappers=[{name:ImageChannelFirst}]", "network.cnn=small"],
        ),
    ],
    ids=["dqn-multi-discrete", "channels-last-images"],
)
def test_train_with_spaces_the_algorithm_does_not_take_exits_2_saying_what_would(
    capsys, tmp_path, monkeypatch, config, env, message, fix
):
    """One line on stderr, no traceback, nothing left behind (a run directory without
    metrics would trip `cadence plot`); the fix it suggests then trains."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spaces_env.py").write_text(SPACES_MODULE)
    name = f"env.name=spaces_env:{env}"
    assert main(["train", config, name, *TINY_RUN, "--root-dir", "run"]) == 2
    captured = capsys.readouterr()
    assert f"cadence train: {message}" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""
    assert not (tmp_path / "run").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    assert main(["train", config, name, *TINY_RUN, "--root-dir", "mine"]) == 2
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    assert main(["train", fix[0], name, *fix[1:], *TINY_RUN, "--root-dir", "run"]) == 0
    assert (tmp_path / "run" / "COMPLETE").exists()


UNFILMABLE_MODULE = """
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


class CorridorWithRenderMode(Corridor):
    def __init__(self, render_mode=None):
        self.render_mode = render_mode


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=5)
gym.register("CorridorWithRenderMode-v0", entry_point=CorridorWithRenderMode, max_episode_steps=5)
"""


@pytest.mark.filterwarnings("ignore:.*render_mode='rgb_array' that is not in the possible")
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("Corridor-v0", "takes no render_mode argument, so it cannot film frames"),
        ("CorridorWithRenderMode-v0", "could not render a frame (AssertionError"),
    ],
)
def test_play_with_video_of_an_env_that_cannot_render_exits_2_saying_how_to_film_it(
    capsys, tmp_path, monkeypatch, env, message
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "unfilmable_env.py").write_text(UNFILMABLE_MODULE)
    name = f"env.name=unfilmable_env:{env}"
    assert main(["train", "ppo_cartpole", name, *TINY_RUN, "--root-dir", "run"]) == 0
    capsys.readouterr()
    assert main(["play", "run", "--video", "out.mp4"]) == 2
    captured = capsys.readouterr()
    assert f"cadence play: unfilmable_env:{env} {message}" in captured.err
    assert "metadata = {'render_modes': ['rgb_array']}" in captured.err
    assert "Traceback" not in captured.err and not (tmp_path / "out.mp4").exists()
    assert main(["play", "run"]) == 0, "without --video it plays"
