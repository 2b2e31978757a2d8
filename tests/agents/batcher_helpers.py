"""Agents and env factories for the Batcher tests, importable by worker processes."""

from __future__ import annotations

import os
import time

import torch
from torch import nn

from cadence.agents import Agent, SlotRandom, make_gym_env, reset_where
from cadence.data import DictTensor
from cadence.envs import PyEnvironment, PyEnvironmentWrapper


class PolicyAgent(Agent):
    """A linear categorical policy on CartPole with a step counter as its state.

    ``agent_info``: ``epsilon`` (take a uniform action with this probability) and
    ``stochastic`` (sample; else take the most likely action), each optional.
    """

    def __init__(
        self, model: nn.Module | None = None, fail_at_step: int | None = None, sleep_s: float = 0.0
    ):
        self.model = model if model is not None else nn.Linear(4, 2)
        self.random = SlotRandom()
        self.fail_at_step = fail_at_step
        self.sleep_s = sleep_s
        self.steps = 0

    def seed(self, seed: int) -> None:
        self.random.seed(seed)

    def update(self, info):
        self.model.load_state_dict(info)

    def initial_state(self, agent_info, n_elems):
        return DictTensor({"count": torch.zeros(n_elems, dtype=torch.int64)})

    def __call__(self, state, observation, agent_info, history=None):
        self.steps += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail_at_step is not None and self.steps == self.fail_at_step:
            raise ValueError("PolicyAgent was told to fail here")
        initial = self.initial_state(agent_info, state.n_elems())
        state = reset_where(state, initial, observation["initial_state"])
        logits = self.model(observation["frame"])
        env_id = observation["env_id"]
        action = self.random.categorical(env_id, logits)
        if "stochastic" in agent_info:
            action = torch.where(agent_info["stochastic"], action, logits.argmax(-1))
        if "epsilon" in agent_info:
            explore = self.random.bernoulli(env_id, agent_info["epsilon"])
            uniform = self.random.categorical(env_id, torch.zeros_like(logits))
            action = torch.where(explore, uniform, action)
        log_prob = torch.log_softmax(logits, -1).gather(-1, action[:, None])[:, 0]
        outputs = {
            "action": action,
            "log_prob": log_prob,
            "logits": logits,
            "count": state["count"],
        }
        return DictTensor(outputs), DictTensor({"count": state["count"] + 1})


def biased_model(action: int) -> nn.Linear:
    """A policy that prefers ``action`` by far (logits differ by 10 whatever it sees)."""
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([10.0, 0.0] if action == 0 else [0.0, 10.0]))
    return model


class HistoryAgent(Agent):
    """Acts 0 or 1 by the parity of the number of steps in its history."""

    def require_history(self):
        return True

    def __call__(self, state, observation, agent_info, history=None):
        seen = torch.full((observation.n_elems(),), history.n_steps(), dtype=torch.int64)
        return DictTensor({"action": seen % 2, "seen": seen}), state


def cartpole(seed: int, max_episode_steps: int | None = None):
    return make_gym_env(seed=seed, name="CartPole-v1", max_episode_steps=max_episode_steps)


def dying_env(seed: int, flag_file: str, at_step: int, how: str = "exit") -> PyEnvironment:
    """CartPole whose first env to take its ``at_step``-th step (while ``flag_file`` is
    missing) kills its worker (``how="exit"``) or hangs (``"hang"``)."""
    return _Dying(cartpole(seed), flag_file, at_step, how)


class _Dying(PyEnvironmentWrapper):
    def __init__(self, env: PyEnvironment, flag_file: str, at_step: int, how: str):
        super().__init__(env)
        self._flag, self._at, self._how, self._steps = flag_file, at_step, how, 0

    def step(self, action):
        self._steps += 1
        if self._steps == self._at:
            try:
                os.close(os.open(self._flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return self._env.step(action)
            if self._how == "hang":
                time.sleep(3600)
            os._exit(3)
        return self._env.step(action)
