"""A user's own environment module in the working directory, named as ``module:Id``,
trains, evaluates and plays from the installed ``cadence`` script with no PYTHONPATH."""

import os
import shutil
import subprocess

import pytest

MODULE = '''
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right to the end of a corridor of 5 cells."""

    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.position = max(0, min(4, self.position + (1 if action == 1 else -1)))
        done = self.position == 4
        return np.array([self.position], np.float32), float(done), done, False, {}


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
'''


@pytest.mark.skipif(shutil.which("cadence") is None, reason="the cadence script is not installed")
def test_a_module_in_the_working_directory_is_found_by_the_cadence_script(tmp_path):
    (tmp_path / "my_corridor.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [
            "cadence", "train", "ppo_cartpole", "env.name=my_corridor:Corridor-v0",
            "trainer.num_env_steps=512", "trainer.progress_bar=off", "--root-dir", "run",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    for command in (["eval", "run", "--episodes", "2"], ["play", "run"]):
        result = subprocess.run(
            ["cadence", *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
