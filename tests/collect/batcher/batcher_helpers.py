"""Agents and env factories for the Batcher tests, importable by worker processes."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cadence.collect import Agent, SlotRandom, make_gym_env, reset_where
from cadence.data import DictTensor
from cadence.envs import PyEnvironment, PyEnvironmentWrapper


class PolicyAgent(Agent):
    """A linear categorical policy on CartPole with a step counter as its state.

    ``agent_info``: ``epsilon`` (take a uniform action with this probability) and
    ``stochastic`` (sample; else take the most likely action), each optional. Besides
    the action it outputs its ``logits``, their ``log_prob`` and the uniform ``draw``
    its sample came from, so a test can tell how close each step came to a tie.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        fail_at_step: int | None = None,
        sleep_s: float = 0.0,
        seed: int = 0,
    ):
        self.model = model if model is not None else nn.Linear(4, 2)
        self.random = SlotRandom(seed)  # one seed in every worker: streams keyed by env id
        self.fail_at_step = fail_at_step
        self.sleep_s = sleep_s
        self.steps = 0

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
        draw = _next_uniform(self.random, env_id)  # what categorical is about to draw
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
            "draw": draw,
            "count": state["count"],
        }
        return DictTensor(outputs), DictTensor({"count": state["count"] + 1})


def _next_uniform(random: SlotRandom, env_id: torch.Tensor) -> torch.Tensor:
    """The uniforms ``random`` gives ``env_id`` next, leaving its streams where they are."""
    twin = SlotRandom()
    twin.load_state_dict(random.state_dict())
    return twin.uniform(env_id)


ROUNDED = ("action/logits", "action/log_prob")
"""What `PolicyAgent` computes with its model's floats. The BLAS may round a batch of N rows
differently from one of N/2 (MKL does, on an AVX-512 Xeon), so these agree within rounding
only, across splits into processes; everything else a Batcher returns agrees bit for bit."""

ROUNDING = {"rtol": 1.3e-6, "atol": 1e-5}
"""Equal within float32 rounding (`torch.testing.assert_close`'s defaults for float32)."""

TIE_MARGIN = 1e-4
"""No step of a cross-split comparison may come closer than this to a tie: a draw this near
its categorical's cumulative probabilities, or a greedy slot's two largest logits this near
each other, could pick another action under other rounding (10x what `ROUNDING` allows)."""


def nearest_tie(trajectories) -> float:
    """How close the valid steps of ``trajectories`` came to a tie: for sampling slots the
    distance of the draw to the categorical's cumulative probabilities, for greedy ones the
    gap between the two largest logits."""
    steps = trajectories.trajectories
    valid = steps.mask().bool()
    logits = steps["action/logits"][valid].double()
    cdf = torch.softmax(logits, -1).cumsum(-1)[:, :-1]
    to_draw = (steps["action/draw"][valid].double()[:, None] - cdf).abs().amin(-1)
    top = logits.topk(2, dim=-1).values
    sampling = trajectories.info["agent_info/stochastic"][:, None].expand(valid.shape)[valid]
    return float(torch.where(sampling, to_draw, top[:, 0] - top[:, 1]).min())


def assert_same_acquisitions(got: list, want: list, exact: bool = False) -> None:
    """What a `Batcher` promises for the same seed whatever the split into processes (or
    back end): the same lengths, env steps, random draws and actions, bit for bit, and the
    agent's float outputs (`ROUNDED`) equal within rounding. The actions are the same
    because no step lies within rounding of a tie, which is checked, not assumed.
    ``exact``: the float outputs bit for bit too (the same split again)."""
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.trajectories.lengths, b.trajectories.lengths)
        assert a.trajectories.keys() == b.trajectories.keys()
        assert a.info.keys() == b.info.keys()
        margin = nearest_tie(b)
        assert margin > TIE_MARGIN, (
            f"a step came within {margin:.1e} of a tie, where rounding may pick another "
            "action: the test needs a seed whose steps stay clear of ties"
        )
        for key in a.trajectories.keys():
            if key in ROUNDED and not exact:
                torch.testing.assert_close(a.trajectories[key], b.trajectories[key], **ROUNDING)
            else:
                assert torch.equal(a.trajectories[key], b.trajectories[key]), key
        for key in a.info.keys():
            assert torch.equal(a.info[key], b.info[key]), key


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


class TaskEnv(gym.Env):
    """A multi-task env: it shows its task, read from ``options["env_info"]["task"]`` at
    every reset (0 without), as its observation and reward; episodes last 3 steps."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = float(options["env_info"]["task"]) if options else 0.0
        self.t = 0
        return np.full(1, self.task, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.task, np.float32), self.task, self.t >= 3, False, {}


def task_env(seed: int, flag_file: str | None = None, at_step: int = 0) -> PyEnvironment:
    """`TaskEnv` through the Gymnasium adapter; with ``flag_file``, dying as `dying_env`."""
    env = make_gym_env(seed=seed, name=TaskEnv)
    return env if flag_file is None else _Dying(env, flag_file, at_step, "exit")


class StatelessAgent(Agent):
    """rlstructures' stateless agent: ``DictTensor({})`` (no rows) as initial and new state."""

    def initial_state(self, agent_info, n_elems):
        return DictTensor({})

    def __call__(self, state, observation, agent_info, history=None):
        return DictTensor({"action": torch.zeros(observation.n_elems(), dtype=torch.int64)}), (
            DictTensor({})
        )


class GeneratorAgent(Agent):
    """Draws from a generator of its own, made in `seed` (so it cannot act unseeded)."""

    def seed(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, state, observation, agent_info, history=None):
        n = observation.n_elems()
        draw = torch.rand(n, generator=self.generator)
        return DictTensor({"action": (draw < 0.5).long(), "draw": draw}), state


def straggler_env(
    seed: int,
    slow_seeds: tuple[int, ...] = (),
    sleep_s: float = 0.0,
    gate_file: str | None = None,
    flag_file: str | None = None,
    at_step: int = 0,
) -> PyEnvironment:
    """CartPole, where the envs seeded one of ``slow_seeds`` straggle: each step sleeps
    ``sleep_s`` and waits until ``gate_file`` exists (if given); with ``flag_file`` they
    die as `dying_env` does. A worker's replacement is seeded anew, so it is fast."""
    env = cartpole(seed)
    if seed not in slow_seeds:
        return env
    env = _Straggler(env, sleep_s, gate_file)
    return env if flag_file is None else _Dying(env, flag_file, at_step, "exit")


class _Straggler(PyEnvironmentWrapper):
    def __init__(self, env: PyEnvironment, sleep_s: float, gate_file: str | None):
        super().__init__(env)
        self._sleep_s, self._gate = sleep_s, gate_file

    def step(self, action):
        time.sleep(self._sleep_s)
        while self._gate is not None and not os.path.exists(self._gate):
            time.sleep(0.005)
        return self._env.step(action)
