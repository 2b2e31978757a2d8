"""`BitFlipEnv`: the bit-flipping goal environment of hindsight experience replay.

From Andrychowicz et al. 2017 (https://arxiv.org/abs/1707.01495), section 3.1:
the state is ``n_bits`` bits, action ``i`` flips bit ``i``, and the reward is
-1 on every step that does not reach the goal bits. With 15 or more bits, random
exploration almost never meets the goal, so the sparse reward teaches nothing
without hindsight relabelling.

The observation is a Gymnasium-Robotics goal Dict (``observation``,
``achieved_goal``, ``desired_goal``; here the achieved goal is the state itself),
and ``info["is_success"]`` reports success, so the trainer logs
``rollout/success_rate`` and ``eval/success_rate``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class BitFlipEnv(gym.Env):
    """``n_bits`` bits to flip into a random goal pattern; an episode ends on success.

    Rewards: ``0`` on the step that reaches the goal (which ends the episode,
    ``terminated``), ``-1`` on every other step. An episode is cut
    (``truncated``) after ``max_steps`` steps, by default ``n_bits``: enough to
    reach any goal.

    Args:
        n_bits: the number of bits.
        max_steps: the episode length limit (default ``n_bits``).
        render_mode: None or ``"ansi"`` (the state and goal as text).

    >>> env = BitFlipEnv(n_bits=3)
    >>> observation, _ = env.reset(seed=0)
    >>> sorted(observation), env.action_space.n
    (['achieved_goal', 'desired_goal', 'observation'], 3)
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self, n_bits: int = 15, max_steps: int | None = None, render_mode: str | None = None
    ):
        if n_bits < 1:
            raise ValueError(f"n_bits must be >= 1, got {n_bits}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.n_bits = n_bits
        self.max_steps = n_bits if max_steps is None else max_steps
        self.render_mode = render_mode
        bits = gym.spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(n_bits)
        self._state = np.zeros(n_bits, np.float32)
        self._goal = np.zeros(n_bits, np.float32)
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state
        while np.array_equal(self._goal, self._state):  # an episode solved at reset teaches nothing
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._steps = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an int in [0, {self.n_bits}), got {action!r}")
        self._state = self._state.copy()
        self._state[int(action)] = 1.0 - self._state[int(action)]
        self._steps += 1
        success = bool(np.array_equal(self._state, self._goal))
        reward = float(self.compute_reward(self._state, self._goal, {}))
        truncated = not success and self._steps >= self.max_steps
        return self._observation(), reward, success, truncated, {"is_success": float(success)}

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any
    ) -> np.ndarray:
        """``0`` where the goals agree on every bit, else ``-1`` (batched over leading dims)."""
        return -np.any(achieved_goal != desired_goal, axis=-1).astype(np.float32)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return f"state {_bits(self._state)}  goal {_bits(self._goal)}"

    def _observation(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }


def _bits(values: np.ndarray) -> str:
    return "".join(str(int(v)) for v in values)
