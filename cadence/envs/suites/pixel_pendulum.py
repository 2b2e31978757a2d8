"""Pendulum seen through a camera: Pendulum-v1 with 64x64 RGB observations.

The dynamics, reset distribution and reward are those of Gymnasium's ``PendulumEnv``
(it runs inside); the observation is a channel-first ``[3, size, size]`` uint8 frame of
the rod drawn with numpy (anti-aliased by supersampling) on a flat background of
`BACKGROUND` — a colour key that `cadence.envs.distractors.BackgroundDistractor` can
replace. One frame shows the angle, not the velocity: a recurrent world model infers it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.pendulum import PendulumEnv

BACKGROUND = (30, 30, 40)
ROD_COLOUR = np.array([220, 80, 60], dtype=np.float64)
PIVOT_COLOUR = np.array([240, 240, 240], dtype=np.float64)
ROD_LENGTH, ROD_HALF_WIDTH, PIVOT_RADIUS = 0.8, 0.09, 0.08  # in half-frames
SUPERSAMPLE = 2


def draw_pendulum(theta: float, size: int) -> np.ndarray:
    """The ``[size, size, 3]`` uint8 frame of a rod at angle ``theta`` (0: up)."""
    n = size * SUPERSAMPLE
    coords = (np.arange(n) + 0.5) / n * 2 - 1
    x, y = np.meshgrid(coords, -coords)
    tip = np.array([np.sin(theta), np.cos(theta)]) * ROD_LENGTH
    along = np.clip((x * tip[0] + y * tip[1]) / (tip @ tip), 0.0, 1.0)
    distance = np.hypot(x - along * tip[0], y - along * tip[1])
    rod = (distance < ROD_HALF_WIDTH)[..., None]
    pivot = (np.hypot(x, y) < PIVOT_RADIUS)[..., None]
    frame = np.broadcast_to(np.array(BACKGROUND, dtype=np.float64), (n, n, 3))
    frame = np.where(rod, ROD_COLOUR, frame)
    frame = np.where(pivot, PIVOT_COLOUR, frame)
    frame = frame.reshape(size, SUPERSAMPLE, size, SUPERSAMPLE, 3).mean((1, 3))
    return frame.round().astype(np.uint8)


class PixelPendulumEnv(gym.Env):
    """Pendulum-v1 observed as ``[3, size, size]`` uint8 RGB frames.

    Args:
        size: the height and width of each frame (64 for the world models' conv stack).
        render_mode: ``None`` or ``"rgb_array"`` (the observation's frame, ``[H, W, 3]``).

    >>> frame, _ = PixelPendulumEnv().reset(seed=0)
    >>> frame.shape, frame.dtype
    ((3, 64, 64), dtype('uint8'))
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, size: int = 64, render_mode: str | None = None):
        self.size = size
        self.render_mode = render_mode
        self._pendulum = PendulumEnv()
        self.observation_space = spaces.Box(0, 255, (3, size, size), dtype=np.uint8)
        self.action_space = self._pendulum.action_space
        self._frame = np.zeros((size, size, 3), np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        _, info = self._pendulum.reset(seed=int(self.np_random.integers(2**31)), options=options)
        return self._observation(), info

    def step(self, action: Any):
        _, reward, terminated, truncated, info = self._pendulum.step(action)
        return self._observation(), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray:
        return self._frame.copy()

    def _observation(self) -> np.ndarray:
        self._frame = draw_pendulum(float(self._pendulum.state[0]), self.size)
        return np.ascontiguousarray(self._frame.transpose(2, 0, 1))
