"""Ids the user registered in their script or notebook reach `ParallelEnvironment`'s workers.

A worker never runs the user's script (`cadence.envs.main_module`), so it does not
repeat the script's ``gym.register``: `GymEnvFactory` carries the parent's ``EnvSpec``
and registers it in the worker where the id is missing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import gymnasium as gym
import pytest

import cadence
from cadence.envs.make import GymEnvFactory

# A plain script, no ``if __name__ == "__main__":`` guard, registering ids whose entry
# points it defines itself (a class, a lambda), then stepping them in worker processes
# started by forkserver (make_env's default) and by spawn.
COUNTING_ENV = """
import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, offset=0.0):
        self.offset = offset

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0.0
        return np.array([self.offset], np.float32), {}

    def step(self, action):
        self.count += 1.0
        return np.array([self.offset + self.count], np.float32), 1.0, False, False, {}
"""

SCRIPT = (
    COUNTING_ENV
    + """
import cadence
from cadence.envs.make import GymEnvFactory
from cadence.envs.parallel import ParallelEnvironment

gym.register("Counting-v0", entry_point=CountingEnv, kwargs={"offset": 3.0})
gym.register("CountingLambda-v0", entry_point=lambda **kwargs: CountingEnv(offset=7.0))

with cadence.make_env("Counting-v0", num_envs=2, backend="parallel", num_workers=2) as env:
    env.reset()
    print("forkserver", env.step(env.action_spec.sample((2,))).observation.flatten().tolist())
factories = [GymEnvFactory("CountingLambda-v0", i, seed=0) for i in range(2)]
with ParallelEnvironment(factories, num_workers=2, start_method="spawn") as env:
    env.reset()
    print("spawn", env.step(env.action_spec.sample((2,))).observation.flatten().tolist())
"""
)


@pytest.mark.timeout(300)
def test_ids_a_script_registers_reach_the_workers_under_forkserver_and_spawn(tmp_path):
    out = _run_plain_script(tmp_path, SCRIPT)
    assert "forkserver [4.0, 4.0]" in out
    assert "spawn [8.0, 8.0]" in out


def _run_plain_script(directory, source: str) -> str:
    """Runs ``source`` as ``python script.py`` in ``directory``; returns its stdout."""
    (directory / "script.py").write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=directory, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_id_registered_in_this_process_alone_reaches_the_workers():
    gym.register("CadenceTestCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        with cadence.make_env(
            "CadenceTestCartPole-v0", num_envs=2, backend="parallel", num_workers=2
        ) as env:
            assert env.reset().observation.shape == (2, 4)
    finally:
        del gym.registry["CadenceTestCartPole-v0"]


def _make_counting(**kwargs):
    return gym.make("CartPole-v1")


def test_a_registration_that_cannot_be_sent_says_what_to_do():
    gym.register(
        "CadenceTestLocked-v0", entry_point=_make_counting, kwargs={"lock": threading.Lock()}
    )
    try:
        with pytest.raises(ValueError, match="cannot be sent to the worker processes") as info:
            cadence.make_env("CadenceTestLocked-v0", num_envs=2, backend="parallel")
        assert "'module:EnvClass'" in str(info.value) and "backend 'serial'" in str(info.value)
    finally:
        del gym.registry["CadenceTestLocked-v0"]


def test_a_module_id_and_a_callable_carry_no_registration():
    assert GymEnvFactory("CartPole-v1", 0, 0).spec is gym.registry["CartPole-v1"]
    assert GymEnvFactory("gymnasium.envs:CartPole-v1", 0, 0).spec is None
    assert GymEnvFactory(_make_counting, 0, 0).spec is None


# The same script's ids in a `Batcher`'s workers, local and Ray alike: `make_gym_env`
# builds the env there from the id alone, so the id's registration travels with the recipe.
BATCHER_SCRIPT = (
    COUNTING_ENV
    + """
import torch

from cadence.collect import Agent, Batcher, make_gym_env
from cadence.data import DictTensor


class ZeroAgent(Agent):
    def __call__(self, state, observation, agent_info, history=None):
        return DictTensor({"action": torch.zeros(observation.n_elems(), dtype=torch.long)}), state


gym.register("BatcherCounting-v0", entry_point=CountingEnv, kwargs={"offset": 5.0})
batcher = Batcher(
    n_timesteps=3, n_processes=2, n_envs=1, create_env=make_gym_env,
    env_args={"name": "BatcherCounting-v0"}, create_agent=ZeroAgent, agent_args={},
)
batcher.reset()
batcher.execute()
trajectories, _ = batcher.get()
print("frames", trajectories.trajectories["observation/frame"][:, :, 0].tolist())
batcher.close()
"""
)


@pytest.mark.timeout(300)
def test_ids_a_script_registers_reach_a_batchers_workers(tmp_path):
    out = _run_plain_script(tmp_path, BATCHER_SCRIPT)
    assert "frames [[5.0, 6.0, 7.0], [5.0, 6.0, 7.0]]" in out
