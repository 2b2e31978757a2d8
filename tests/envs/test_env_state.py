"""`cadence.envs.env_state`: an env state loads plain data and the env's own classes, nothing else."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from cadence.envs import GymAdapter
from cadence.envs.env_state import UnsafeEnvStateError, env_classes, loads_env_state
from cadence.testing import DictObservationEnv


class _RunsACommand:
    """Unpickling this calls ``os.system``: what a crafted checkpoint would do."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _tampered_state(adapter: GymAdapter, payload: object) -> bytes:
    state = pickle.loads(adapter.get_state())  # our own bytes: trusted here
    state["seed"] = payload
    return pickle.dumps(state)


def test_a_state_that_names_a_function_is_refused_before_it_runs(tmp_path):
    env = GymAdapter(gym.make("CartPole-v1"), seed=0)
    env.reset()
    marker = tmp_path / "ran"
    state = _tampered_state(env, _RunsACommand(f"touch {marker}"))
    with pytest.raises(UnsafeEnvStateError, match="posix.system|os.system"):
        env.set_state(state)
    assert not marker.exists()


def test_a_state_that_names_an_unimported_module_imports_nothing():
    env = gym.make("CartPole-v1")
    # GLOBAL opcode naming a module nobody imported: resolving it would import (run) it.
    crafted = b"\x80\x04cmodule_a_checkpoint_named\nEvil\n)R."
    with pytest.raises(UnsafeEnvStateError, match="module_a_checkpoint_named.Evil"):
        loads_env_state(crafted, env)
    assert "module_a_checkpoint_named" not in sys.modules


def test_the_env_classes_are_its_layers_and_their_modules_classes_not_builtins():
    env = gym.make("CartPole-v1")
    classes = env_classes(env)
    assert type(env.unwrapped) in classes and type(env) in classes
    assert gym.wrappers.TimeLimit in classes
    assert type not in classes
    # Only what the env's modules define, not what they import.
    assert all(not c.__module__.startswith(("builtins", "typing", "collections")) for c in classes)


def test_plain_data_and_the_envs_own_classes_load():
    env = DictObservationEnv()
    env.reset(seed=0)
    payload = {
        "array": np.arange(3, dtype=np.float32),
        "rng": np.random.default_rng(5),
        "env": env,
    }
    loaded = loads_env_state(pickle.dumps(payload), DictObservationEnv())
    np.testing.assert_array_equal(loaded["array"], payload["array"])
    assert loaded["rng"].random() == np.random.default_rng(5).random()
    assert type(loaded["env"]) is DictObservationEnv


def test_a_state_of_another_env_names_its_class_and_is_refused():
    cartpole = GymAdapter(gym.make("CartPole-v1"), seed=0)
    cartpole.reset()
    state = cartpole.get_state()
    with pytest.raises(UnsafeEnvStateError, match="CartPoleEnv"):
        GymAdapter(gym.make("Pendulum-v1"), seed=0).set_state(state)


class _ComposedEnv(gym.Env):
    """An env built from another env and an object of an unrelated module (``subprocess``),
    holding a function too if asked: how users and cadence's suites compose envs."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self, callback=None):
        from gymnasium.envs.classic_control.pendulum import PendulumEnv

        self._inner = [PendulumEnv()]  # in a container, to walk through it too
        self.completed = subprocess.CompletedProcess(args=["true"], returncode=0)
        self.callback = callback

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._inner[0].reset(seed=seed)[0], {}

    def step(self, action):
        return self._inner[0].step(action)


def test_a_composed_env_state_round_trips_with_the_classes_its_objects_have():
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    env = GymAdapter(_ComposedEnv(), seed=0)
    env.reset()
    env.step(np.zeros(1, np.float32))
    restored = GymAdapter(_ComposedEnv(), seed=1)
    restored.set_state(env.get_state())
    assert {PendulumEnv, subprocess.CompletedProcess} <= env_classes(_ComposedEnv())
    a, b = env.step(np.ones(1, np.float32)), restored.step(np.ones(1, np.float32))
    np.testing.assert_array_equal(a.observation, b.observation)


@pytest.mark.parametrize("name", ["subprocess.Popen", "subprocess.run", "posix.system"])
def test_an_object_of_another_module_does_not_make_its_other_names_loadable(name):
    env = _ComposedEnv(callback=os.system)
    module, attribute = name.rsplit(".", 1)
    # A GLOBAL naming the object, without calling it: only find_class decides.
    crafted = pickle.dumps({"named": getattr(sys.modules[module], attribute)})
    with pytest.raises(UnsafeEnvStateError, match=name.replace(".", r"\.")):
        loads_env_state(crafted, _ComposedEnv(callback=os.system))
    classes = env_classes(env)
    assert subprocess.Popen not in classes and type not in classes


@pytest.mark.parametrize(
    "env_id", ["cadence/NoisyPendulum-v0", "cadence/PixelPendulum-v0", "cadence/PixelCartPole-v1"]
)
def test_cadences_composed_envs_resume(env_id):
    import cadence.envs.suites  # noqa: F401 - registers the ids

    env = GymAdapter(gym.make(env_id), seed=0)
    env.reset()
    action = env._env.action_space.sample()
    for _ in range(3):
        env.step(action)
    restored = GymAdapter(gym.make(env_id), seed=1)
    restored.set_state(env.get_state())
    for _ in range(3):
        a, b = env.step(action), restored.step(action)
        np.testing.assert_array_equal(a.observation, b.observation)
        assert a.reward == b.reward


def test_a_robotics_env_resumes_with_its_goal():
    """FetchReach rebuilds fresh from its constructor's arguments (EzPickle); its goal, an
    attribute outside the MuJoCo simulation, must come back with the simulation."""
    robotics = pytest.importorskip("gymnasium_robotics")
    gym.register_envs(robotics)
    env = GymAdapter(gym.make("FetchReach-v4"), seed=0)
    env.reset()
    action = np.full(4, 0.5, np.float32)
    env.step(action)
    restored = GymAdapter(gym.make("FetchReach-v4"), seed=1)
    restored.set_state(env.get_state())
    for _ in range(3):
        a, b = env.step(action), restored.step(action)
        for key in a.observation:
            np.testing.assert_array_equal(a.observation[key], b.observation[key])
        assert a.reward == b.reward
