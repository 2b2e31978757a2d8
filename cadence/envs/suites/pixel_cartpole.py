"""CartPole seen through a camera: Gymnasium's CartPole-v1 with image observations.

The dynamics, the reset distribution, the termination and the reward are those
of ``gymnasium.envs.classic_control.CartPoleEnv`` (it runs inside); only the
observation changes. Each observation stacks the last ``num_frames`` grayscale
frames channel-first, ``[num_frames, size, size]`` uint8, because one frame
shows positions but not velocities. The frames are drawn here with numpy,
anti-aliased by supersampling, so sub-pixel motion of the pole shows as a change
of intensity; Gymnasium's own pygame renderer would be slower and would need a
display library in every worker process.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

# The view in world units: the cart's whole range (|x| <= 2.4 before termination)
# plus a margin so the cart stays in the picture up to the threshold.
VIEW_HALF_WIDTH = 2.8
TRACK_Y = -1.4  # height of the cart's centre; the pole points up from it
CART_HALF_WIDTH, CART_HALF_HEIGHT = 0.3, 0.18
# The pole is drawn longer and thicker than the physical one (length 1.0), so
# that the angle changes that matter (hundredths of a radian) move whole pixels.
POLE_LENGTH, POLE_HALF_THICKNESS = 2.4, 0.12
CART_INTENSITY, POLE_INTENSITY = 0.55, 1.0


class PixelCartPoleEnv(gym.Env):
    """CartPole-v1 observed as stacked grayscale frames.

    Args:
        size: the height and width of each frame in pixels.
        num_frames: how many of the latest frames each observation stacks
            (2 or more make velocities observable).
        render_mode: ``None`` or ``"rgb_array"``; `render` draws the current
            state at ``render_size`` pixels for videos.
        render_size: the height and width of `render` frames.
        supersample: samples per pixel along each axis when drawing.

    Raises:
        ValueError: ``size < 8``, ``num_frames < 1``, ``supersample < 1``, or an
            unsupported ``render_mode``.

    >>> env = PixelCartPoleEnv(size=32)
    >>> env.reset(seed=0)[0].shape
    (2, 32, 32)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        size: int = 64,
        num_frames: int = 2,
        render_mode: str | None = None,
        render_size: int = 256,
        supersample: int = 4,
    ):
        if size < 8 or num_frames < 1 or supersample < 1:
            raise ValueError(
                f"PixelCartPole needs size >= 8, num_frames >= 1 and supersample >= 1; got "
                f"size={size}, num_frames={num_frames}, supersample={supersample}"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.size = size
        self.num_frames = num_frames
        self.render_mode = render_mode
        self.render_size = render_size
        self.supersample = supersample
        self._cartpole = CartPoleEnv()
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0, 255, (num_frames, size, size), dtype=np.uint8)
        self._frames = np.zeros((num_frames, size, size), dtype=np.uint8)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        state, info = self._cartpole.reset(seed=seed, options=options)
        # Before the first step there is no motion to show: every slot holds the first frame.
        self._frames[:] = self._draw(state)
        return self._frames.copy(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        state, reward, terminated, truncated, info = self._cartpole.step(action)
        self._frames[:-1] = self._frames[1:]
        self._frames[-1] = self._draw(state)
        return self._frames.copy(), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The current state drawn at ``render_size`` pixels, RGB ``[H, W, 3]`` uint8."""
        if self.render_mode != "rgb_array":
            return None
        gray = draw_cartpole(self._cartpole.state, self.render_size, self.supersample)
        return np.repeat(_to_uint8(gray)[..., None], 3, axis=-1)

    def _draw(self, state: np.ndarray) -> np.ndarray:
        return _to_uint8(draw_cartpole(state, self.size, self.supersample))


def draw_cartpole(state: Any, size: int, supersample: int = 4) -> np.ndarray:
    """A ``[size, size]`` float32 frame in ``[0, 1]`` of the cart-pole ``state``.

    Args:
        state: ``(x, x_dot, theta, theta_dot)`` as CartPole defines them
            (``theta > 0`` leans the pole right).
        size: the frame's height and width in pixels.
        supersample: samples per pixel along each axis (anti-aliasing).

    Returns:
        Pixel intensities: the fraction of each pixel covered, weighted by the
        intensity of what covers it (the pole is drawn over the cart).
    """
    x, _, theta, _ = (float(v) for v in state)
    scale = size / (2 * VIEW_HALF_WIDTH)  # pixels per world unit
    frame = np.zeros((size, size), dtype=np.float32)
    # Image rows grow downwards, world y upwards; the view is centred on (0, 0).
    cart_col, cart_row = (x + VIEW_HALF_WIDTH) * scale, (VIEW_HALF_WIDTH - TRACK_Y) * scale
    cart = _rectangle_coverage(
        size, cart_col, cart_row, CART_HALF_WIDTH * scale, CART_HALF_HEIGHT * scale
    )
    np.maximum(frame, CART_INTENSITY * cart, out=frame)
    tip = (
        cart_col + POLE_LENGTH * scale * math.sin(theta),
        cart_row - POLE_LENGTH * scale * math.cos(theta),
    )
    _draw_segment(
        frame, (cart_col, cart_row), tip, POLE_HALF_THICKNESS * scale, POLE_INTENSITY, supersample
    )
    return frame


def _rectangle_coverage(
    size: int, center_col: float, center_row: float, half_width: float, half_height: float
) -> np.ndarray:
    """The exact fraction of each pixel an axis-aligned rectangle covers, ``[size, size]``."""
    edges = np.arange(size, dtype=np.float32)
    cols = np.clip(
        np.minimum(edges + 1, center_col + half_width) - np.maximum(edges, center_col - half_width),
        0,
        1,
    )
    rows = np.clip(
        np.minimum(edges + 1, center_row + half_height)
        - np.maximum(edges, center_row - half_height),
        0,
        1,
    )
    return np.outer(rows, cols)


def _draw_segment(
    frame: np.ndarray,
    start: tuple[float, float],
    end: tuple[float, float],
    half_thickness: float,
    intensity: float,
    supersample: int,
) -> None:
    """Draws a thick segment (``(col, row)`` pixel coordinates) into ``frame`` in place.

    Only the pixels of the segment's bounding box are sampled, each at
    ``supersample**2`` points; a point is inside when it is within
    ``half_thickness`` of the segment.
    """
    size = frame.shape[0]
    (c0, r0), (c1, r1) = start, end
    low_c = max(int(math.floor(min(c0, c1) - half_thickness)), 0)
    high_c = min(int(math.ceil(max(c0, c1) + half_thickness)), size)
    low_r = max(int(math.floor(min(r0, r1) - half_thickness)), 0)
    high_r = min(int(math.ceil(max(r0, r1) + half_thickness)), size)
    if low_c >= high_c or low_r >= high_r:
        return
    offsets = (np.arange(supersample, dtype=np.float32) + 0.5) / supersample
    cols = (np.arange(low_c, high_c, dtype=np.float32)[:, None] + offsets).reshape(-1)
    rows = (np.arange(low_r, high_r, dtype=np.float32)[:, None] + offsets).reshape(-1)
    dc, dr = c1 - c0, r1 - r0
    length_sq = max(dc * dc + dr * dr, 1e-12)
    # The closest point of the segment to each sample, as a fraction along it.
    t = np.clip(((cols[None, :] - c0) * dc + (rows[:, None] - r0) * dr) / length_sq, 0.0, 1.0)
    dist_sq = (cols[None, :] - c0 - t * dc) ** 2 + (rows[:, None] - r0 - t * dr) ** 2
    inside = (dist_sq <= half_thickness**2).astype(np.float32)
    height, width = high_r - low_r, high_c - low_c
    coverage = inside.reshape(height, supersample, width, supersample).mean(axis=(1, 3))
    window = frame[low_r:high_r, low_c:high_c]
    np.maximum(window, intensity * coverage, out=window)


def _to_uint8(frame: np.ndarray) -> np.ndarray:
    return np.rint(frame * 255.0).astype(np.uint8)
