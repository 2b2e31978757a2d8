"""The parallel back end from a script without an ``if __name__ == "__main__":`` guard.

Workers never run the user's script (`cadence.envs.main_module`): the README's example
works saved as a plain script, and so does an env class the script defines.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

README_EXAMPLE = """
import cadence

with cadence.make_env("{name}", num_envs=4, backend="parallel", seed=0) as env:
    time_step = env.reset()
    time_step = env.step(env.action_spec.sample((4,)))
    print("stepped", time_step.step_type.tolist(), env.num_workers)
"""

OWN_ENV = """
import gymnasium as gym
import numpy as np

import cadence

OFFSET = 3.0  # a global of the script, used by the env


class CountingEnv(gym.Env):
    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0.0
        return np.array([OFFSET], np.float32), {}

    def step(self, action):
        self.count += 1.0
        return np.array([OFFSET + self.count], np.float32), 1.0, False, False, {}


with cadence.make_env(CountingEnv, num_envs=2, backend="parallel", num_workers=2) as env:
    env.reset()
    time_step = env.step(env.action_spec.sample((2,)))
    state = env.get_state()  # pickled in the workers, naming __main__.CountingEnv
    env.set_state(state)
    print("observed", time_step.observation.flatten().tolist())
"""


def _run(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(300)
def test_the_readme_example_runs_as_a_script_without_a_main_guard(tmp_path):
    source = README_EXAMPLE.format(name="CartPole-v1") + 'print("top level ran")\n'
    done = _run(tmp_path, source, "script.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stepped [1, 1, 1, 1]" in done.stdout and done.stdout.count("top level ran") == 1


@pytest.mark.timeout(300)
def test_a_module_run_with_python_m_is_not_run_again_in_the_workers(tmp_path):
    source = README_EXAMPLE.format(name="CartPole-v1") + 'print("top level ran")\n'
    done = _run(tmp_path, source, "-m", "script")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("top level ran") == 1


@pytest.mark.timeout(300)
def test_an_env_class_defined_in_an_unguarded_script_reaches_the_workers(tmp_path):
    source = OWN_ENV
    done = _run(tmp_path, source, "script.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "observed [4.0, 4.0]" in done.stdout


@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs mujoco")
def test_the_readme_example_with_halfcheetah_runs_as_a_script(tmp_path):
    done = _run(tmp_path, README_EXAMPLE.format(name="HalfCheetah-v5"), "script.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("stepped [1, 1, 1, 1]")
