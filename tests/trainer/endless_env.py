"""An env without a time limit whose episodes never end: every step earns 1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Endless(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


gym.register("Endless-v0", entry_point=Endless)  # no max_episode_steps: no time limit
