"""`cadence.envs.env_state`: an env state loads plain data and the env's own classes, nothing else."""

from __future__ import annotations

import os
import pickle
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
