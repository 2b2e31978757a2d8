"""A one-step contextual bandit for fast actor-critic tests.

Each episode shows a context c in {0, 1} (as a one-hot vector, an 8x8 image
whose top or bottom half is lit, or a Dict of both) and ends after one action.
Discrete actions earn 1 when the action equals c; continuous actions in [-3, 3] earn
``-(a - target(c))**2`` with targets -0.5 and 0.5; MultiDiscrete and MultiBinary actions
earn the fraction of their dimensions equal to c's targets (`MULTI_TARGETS`). A Dict
action ``{"pick": Discrete(2), "push": Box}`` earns the sum of the discrete and continuous
rewards; a Tuple action ``(Discrete(2), MultiBinary(3))`` the mean of theirs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

CONTINUOUS_TARGETS = (-0.5, 0.5)
MULTI_TARGETS = {
    "multi_discrete": (np.array([2, 1]), np.array([0, 0])),
    "multi_binary": (np.array([1, 0, 1]), np.array([0, 1, 1])),
}


class ContextBandit(gym.Env):
    def __init__(self, observation: str = "vector", action: str = "discrete"):
        self.observation_kind = observation
        self.action_kind = action
        vector = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        image = gym.spaces.Box(0, 255, (1, 8, 8), np.uint8)
        self.observation_space = {
            "vector": vector,
            "image": image,
            "dict": gym.spaces.Dict({"vector": vector, "image": image}),
        }[observation]
        self.action_space = {
            "discrete": gym.spaces.Discrete(2),
            "continuous": gym.spaces.Box(-3.0, 3.0, (1,), np.float32),
            "multi_discrete": gym.spaces.MultiDiscrete([3, 2]),
            "multi_binary": gym.spaces.MultiBinary(3),
            "dict": gym.spaces.Dict(
                {
                    "pick": gym.spaces.Discrete(2),
                    "push": gym.spaces.Box(-3.0, 3.0, (1,), np.float32),
                }
            ),
            "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(3))),
        }[action]
        self._context = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._context = int(self.np_random.integers(2))
        return self._observe(), {}

    def step(self, action):
        if self.action_kind == "dict":  # both parts' rewards
            reward = self._reward("discrete", action["pick"])
            reward += self._reward("continuous", action["push"])
        elif self.action_kind == "tuple":  # the mean of both parts' rewards
            pick, bits = action
            reward = (self._reward("discrete", pick) + self._reward("multi_binary", bits)) / 2
        else:
            reward = self._reward(self.action_kind, action)
        return self._observe(), reward, True, False, {}

    def _reward(self, kind, action):
        if kind == "discrete":
            return float(int(action) == self._context)
        if kind in MULTI_TARGETS:  # the fraction of dimensions right
            return float(np.mean(action == MULTI_TARGETS[kind][self._context]))
        return -float((np.asarray(action).item() - CONTINUOUS_TARGETS[self._context]) ** 2)

    def _observe(self):
        vector = np.eye(2, dtype=np.float32)[self._context]
        image = np.zeros((1, 8, 8), np.uint8)
        image[0, 4 * self._context : 4 * self._context + 4] = 255
        return {"vector": vector, "image": image, "dict": {"vector": vector, "image": image}}[
            self.observation_kind
        ]


class DelayedCue(gym.Env):
    """A bandit with a memory: the context shows only at the first step.

    Each episode shows a one-hot cue c in {0, 1}, then ``delay`` blank (zero) observations;
    the action taken at the last blank earns 1 when it equals c, and the episode ends.
    Earlier actions earn nothing. Without memory a policy earns 0.5 on average.
    """

    def __init__(self, delay: int = 2):
        self.delay = delay
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cue = 0
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        self._t = 0
        return np.eye(2, dtype=np.float32)[self._cue], {}

    def step(self, action):
        self._t += 1
        done = self._t > self.delay
        reward = float(done and int(action) == self._cue)
        return np.zeros(2, np.float32), reward, done, False, {}
