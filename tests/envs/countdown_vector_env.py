"""A user's own vector env, registered with a ``vector_entry_point`` and no single-env one.

Each env counts down from a start drawn in 3..5: action ``a`` in {-1, 0, 1} (a
``Discrete(3, start=-1)``) takes ``a + 2`` off, and the episode terminates at 0 or
below. Observations are float64 ``[count, steps]``; the reward is ``a``; ``info``
reports ``"count"`` for even envs only (Gymnasium's ``"_count"`` mask). It resets in
the step after an episode ends, as ``AutoresetMode.NEXT_STEP`` says, unless built with
another ``autoreset_mode``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

COUNTDOWN_ID = "cadence-test/Countdown-v0"


class CountdownVectorEnv(gym.vector.VectorEnv):
    def __init__(
        self,
        num_envs: int = 1,
        max_episode_steps: int = 100,
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    ):
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.metadata = {"autoreset_mode": autoreset_mode}
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.single_action_space = gym.spaces.Discrete(3, start=-1)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.actions_taken: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = self.np_random.integers(3, 6, self.num_envs)
        self.steps = np.zeros(self.num_envs, np.int64)
        self.prev_done = np.zeros(self.num_envs, bool)
        return self._observation(), {}

    def step(self, action):
        assert self.action_space.contains(action), f"{action!r} is not in {self.action_space}"
        self.actions_taken.append(np.array(action))
        self.count = self.count - (np.asarray(action) + 2)
        self.steps += 1
        terminated = self.count <= 0
        truncated = self.steps >= self.max_episode_steps
        reward = np.asarray(action, np.float64)
        resetting = self.prev_done
        self.count[resetting] = self.np_random.integers(3, 6, resetting.sum())
        self.steps[resetting] = 0
        reward[resetting] = 0.0
        terminated[resetting] = False
        truncated[resetting] = False
        self.prev_done = terminated | truncated
        even = np.arange(self.num_envs) % 2 == 0
        info = {"count": self.count.astype(np.float64), "_count": even}
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> np.ndarray:
        return np.stack([self.count, self.steps], axis=1).astype(np.float64)


gym.register(COUNTDOWN_ID, vector_entry_point=CountdownVectorEnv)
