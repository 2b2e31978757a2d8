"""`ThreadEnvironment`: the envs live, step, render and close on one dedicated thread."""

from __future__ import annotations

import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from cadence.envs import GymEnvFactory, ThreadEnvironment, make_env
from cadence.testing import FailingEnv


class ThreadRecordingEnv(gym.Env):
    """Appends ``(event, thread id)`` to ``log`` on every call."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, log: list[tuple[str, int]], render_mode: str | None = "rgb_array"):
        self._log = log
        self._log.append(("init", threading.get_ident()))
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._log.append(("reset", threading.get_ident()))
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._log.append(("step", threading.get_ident()))
        return np.ones(2, np.float32), 1.0, False, False, {}

    def render(self):
        self._log.append(("render", threading.get_ident()))
        return np.zeros((4, 4, 3), np.uint8)

    def close(self):
        self._log.append(("close", threading.get_ident()))


def _cadence_env_threads() -> int:
    return sum(t.name == "cadence-env" and t.is_alive() for t in threading.enumerate())


def test_envs_live_on_their_own_thread_from_creation_to_close():
    log: list[tuple[str, int]] = []
    env = make_env(ThreadRecordingEnv, 2, "thread", env_kwargs={"log": log})
    env_thread = env.thread.ident
    assert env_thread != threading.get_ident()
    env.reset()
    env.step(torch.zeros(2, dtype=torch.int64))
    with ThreadPoolExecutor(1) as pool:  # a call from yet another thread
        pool.submit(env.step, torch.ones(2, dtype=torch.int64)).result()
    assert env.render(1).shape == (4, 4, 3)
    env.close()
    events = {event for event, _ in log}
    assert events == {"init", "reset", "step", "render", "close"}
    assert {thread for _, thread in log} == {env_thread}
    assert not env.thread.is_alive()


def test_an_env_exception_is_reraised_in_the_caller_with_the_env_frames():
    env = ThreadEnvironment([GymEnvFactory(FailingEnv, 0, seed=0, env_kwargs={"fail_at_step": 2})])
    try:
        env.reset()
        env.step(torch.zeros(1, dtype=torch.int64))
        with pytest.raises(RuntimeError, match="FailingEnv failed at step 2") as error:
            env.step(torch.zeros(1, dtype=torch.int64))
        frames = traceback.extract_tb(error.value.__traceback__)
        assert any(f.filename.endswith("fakes.py") and f.name == "step" for f in frames)
        # The env thread survives an env's exception: the batch is still usable.
        assert env.thread.is_alive()
        assert env.reset().step_type.tolist() == [0]
    finally:
        env.close()


def test_a_failing_constructor_raises_and_stops_the_thread():
    before = _cadence_env_threads()
    factory = GymEnvFactory(FailingEnv, 0, seed=0, env_kwargs={"fail_on_init": True})
    with pytest.raises(RuntimeError, match="fail on construction"):
        ThreadEnvironment([factory])
    assert _cadence_env_threads() == before


def test_close_is_idempotent_and_later_calls_are_refused():
    env = make_env("CartPole-v1", 1, "thread")
    env.reset()
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="ThreadEnvironment is closed"):
        env.reset()


def test_state_round_trip_continues_the_same_episodes():
    with make_env("CartPole-v1", 2, "thread", seed=1) as env:
        env.reset()
        actions = [torch.tensor([t % 2, (t // 2) % 2]) for t in range(30)]
        for action in actions[:5]:
            env.step(action)
        state = env.get_state()
        expected = [env.step(a).observation for a in actions[5:]]
        env.set_state(state)
        assert all(
            env.step(a).observation.equal(e) for a, e in zip(actions[5:], expected, strict=True)
        )
