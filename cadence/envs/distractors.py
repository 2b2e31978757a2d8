"""Distractors for pixel observations, generated without any download (Denoised MDP's
"video background", "noisy sensor" and "camera jitter" variants, with procedurally
generated content standing in for the paper's Kinetics videos).

Each wrapper takes channel-first uint8 frames ``[C, H, W]``, is seeded, and replays the
same distractor for the same ``seed`` and the same ``reset(seed=...)``:

- `BackgroundDistractor`: the background pixels (those of a colour key, or of the env's
  segmentation) show a moving scene: coloured blobs drifting and bouncing, a new scene
  each episode. With ``reward_coupling`` c it is also the paper's noisy sensor: the reward
  reads ``c * sensor`` on top of the task's, where ``sensor`` (`BackgroundDistractor.sensor`)
  is the scene's left half's mean intensity minus its right half's, in ``[-1, 1]``: zero
  mean by the scene's left-right symmetry, std ~0.22 within an episode with 4 blobs, moving
  as the blobs drift (predictable from the scene's past, not from the action).
- `CameraJitter`: the whole frame shifted by a smooth random walk of up to
  ``max_shift`` pixels (the borders repeat the edge pixels).
"""

from __future__ import annotations

from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs

__all__ = ["BackgroundDistractor", "CameraJitter"]


def _check_frames(env: gym.Env, wrapper: str) -> tuple[int, int, int]:
    space = env.observation_space
    if not (
        isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
    ):
        raise ValueError(f"{wrapper} takes channel-first uint8 frames [C, H, W], got {space}")
    return space.shape


class _EpisodeSeeds:
    """Per-episode generators: episode k of ``reset(seed=s)`` draws from ``(seed, s, k)``."""

    def __init__(self, seed: int):
        self.seed = seed
        self._reset_seed = 0
        self._episode = 0

    def next(self, reset_seed: int | None) -> np.random.Generator:
        if reset_seed is not None:
            self._reset_seed, self._episode = reset_seed + 1, 0
        self._episode += 1
        return np.random.default_rng([self.seed, self._reset_seed, self._episode])


class BackgroundDistractor(gym.Wrapper, RecordConstructorArgs):
    """Replaces the background of each frame with a moving procedural scene.

    Args:
        env: an env with channel-first uint8 frames.
        seed: the seed of the scenes.
        mask: ``"colour_key"``: the background is the pixels of ``key_colour``;
            ``"segmentation"``: the env's ``background_mask()`` says which pixels are
            background (`cadence.envs.suites.dmc.DMCEnv`: the sky and the floor).
        key_colour: the background's colour (one value per channel); None: the colour of
            the first frame's top-left pixel.
        tolerance: pixels within this distance (per channel) of the key are background.
        num_blobs: blobs in each scene.
        reward_coupling: the noisy sensor's strength c: the reward is the task's plus
            ``c * sensor()`` (0: the task's alone).

    >>> from cadence.envs.suites import PixelPendulumEnv
    >>> env = BackgroundDistractor(PixelPendulumEnv(), seed=0, reward_coupling=1.0)
    >>> env.reset(seed=0)[0].shape
    (3, 64, 64)
    """

    def __init__(
        self,
        env: gym.Env,
        seed: int = 0,
        mask: Literal["colour_key", "segmentation"] = "colour_key",
        key_colour: list[int] | None = None,
        tolerance: int = 0,
        num_blobs: int = 4,
        reward_coupling: float = 0.0,
    ):
        RecordConstructorArgs.__init__(
            self,
            seed=seed,
            mask=mask,
            key_colour=key_colour,
            tolerance=tolerance,
            num_blobs=num_blobs,
            reward_coupling=reward_coupling,
        )
        gym.Wrapper.__init__(self, env)
        self.channels, self.height, self.width = _check_frames(env, "BackgroundDistractor")
        if mask not in ("colour_key", "segmentation"):
            raise ValueError(f"mask must be 'colour_key' or 'segmentation', got {mask!r}")
        if mask == "segmentation" and not hasattr(env.unwrapped, "background_mask"):
            raise ValueError(
                f"mask='segmentation' needs an env with background_mask(); "
                f"{type(env.unwrapped).__name__} has none (use mask='colour_key')"
            )
        self.mask = mask
        self.key_colour = None if key_colour is None else np.asarray(key_colour, np.int16)
        self.tolerance = tolerance
        self.num_blobs = num_blobs
        self.reward_coupling = reward_coupling
        self._seeds = _EpisodeSeeds(seed)
        self._t = 0
        self._scene: dict[str, np.ndarray] = {}
        ys, xs = np.mgrid[0 : self.height, 0 : self.width]
        self._grid = np.stack([ys / self.height, xs / self.width]).astype(np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        rng = self._seeds.next(kwargs.get("seed"))
        self._scene = {
            "position": rng.uniform(0, 1, (self.num_blobs, 2)),
            "velocity": rng.uniform(-0.04, 0.04, (self.num_blobs, 2)),
            "colour": rng.uniform(0, 255, (self.num_blobs, self.channels)),
            "radius": rng.uniform(0.1, 0.3, self.num_blobs),
        }
        self._t = 0
        if self.key_colour is None:
            self.key_colour = observation[:, 0, 0].astype(np.int16)
        return self._composite(observation), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        frame = self.scene_frame()
        reward = float(reward) + self.reward_coupling * self.sensor(frame)
        return self._composite(observation, frame), reward, terminated, truncated, info

    def background_mask(self, observation: np.ndarray) -> np.ndarray:
        """``[H, W]`` True where ``observation`` shows the background."""
        if self.mask == "segmentation":
            return np.asarray(self.env.unwrapped.background_mask(), dtype=bool)
        difference = np.abs(observation.astype(np.int16) - self.key_colour[:, None, None])
        return (difference <= self.tolerance).all(0)

    def sensor(self, frame: np.ndarray | None = None) -> float:
        """The noisy sensor's reading of the scene ``frame`` ``[C, H, W]`` (default: the
        current one): its left half's mean intensity minus its right half's, in ``[-1, 1]``.

        A left-right difference rather than the mean intensity: blobs are as likely on
        either side, so it has zero mean whatever the number and size of the blobs.
        """
        frame = self.scene_frame() if frame is None else frame
        half = self.width // 2
        left, right = frame[:, :, :half], frame[:, :, self.width - half :]
        return float(left.mean() - right.mean()) / 255.0

    def scene_frame(self) -> np.ndarray:
        """The scene at the current step, ``[C, H, W]`` uint8 (blobs bounce off the edges)."""
        scene = self._scene
        position = scene["position"] + self._t * scene["velocity"]
        position = 1 - np.abs(position % 2 - 1)  # reflect into [0, 1]
        distance = self._grid[None] - position[:, :, None, None].astype(np.float32)
        weight = np.exp(-(distance**2).sum(1) / (2 * scene["radius"][:, None, None] ** 2))
        image = np.einsum("khw,kc->chw", weight, scene["colour"])
        return np.clip(image, 0, 255).astype(np.uint8)

    def _composite(self, observation: np.ndarray, frame: np.ndarray | None = None) -> np.ndarray:
        frame = self.scene_frame() if frame is None else frame
        return np.where(self.background_mask(observation)[None], frame, observation)


class CameraJitter(gym.ObservationWrapper, RecordConstructorArgs):
    """Shifts every frame by a smooth random walk ``(dy, dx)`` within ``max_shift`` pixels.

    The walk's velocity changes by Gaussian noise of ``std`` pixels per step and is damped,
    so the camera drifts rather than shakes; the shift is rounded to whole pixels and the
    uncovered border repeats the frame's edge.

    Args:
        env: an env with channel-first uint8 frames.
        seed: the seed of the walk.
        max_shift: the largest shift in pixels along each axis.
        std: the per-step noise of the walk's velocity.

    >>> from cadence.envs.suites import PixelPendulumEnv
    >>> env = CameraJitter(PixelPendulumEnv(), seed=0, max_shift=4)
    >>> _ = env.reset(seed=0)
    >>> max(map(abs, env.shift)) <= 4
    True
    """

    def __init__(self, env: gym.Env, seed: int = 0, max_shift: int = 4, std: float = 0.5):
        RecordConstructorArgs.__init__(self, seed=seed, max_shift=max_shift, std=std)
        gym.ObservationWrapper.__init__(self, env)
        _check_frames(env, "CameraJitter")
        self.max_shift, self.std = max_shift, std
        self._seeds = _EpisodeSeeds(seed)
        self._rng = np.random.default_rng(seed)
        self._offset = np.zeros(2)
        self._velocity = np.zeros(2)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self._rng = self._seeds.next(kwargs.get("seed"))
        self._offset = self._rng.uniform(-self.max_shift, self.max_shift, 2)
        self._velocity = np.zeros(2)
        return super().reset(**kwargs)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self._velocity = 0.8 * self._velocity + self._rng.normal(0, self.std, 2)
        self._offset = np.clip(self._offset + self._velocity, -self.max_shift, self.max_shift)
        return super().step(action)

    @property
    def shift(self) -> tuple[int, int]:
        """The current ``(dy, dx)`` in pixels."""
        dy, dx = np.round(self._offset).astype(int)
        return int(dy), int(dx)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return shift_frame(observation, *self.shift)


def shift_frame(frame: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``frame`` ``[C, H, W]`` moved down by ``dy`` and right by ``dx`` pixels, edges repeated."""
    pad = max(abs(dy), abs(dx))
    if pad == 0:
        return frame.copy()
    padded = np.pad(frame, ((0, 0), (pad, pad), (pad, pad)), mode="edge")
    height, width = frame.shape[1:]
    return np.ascontiguousarray(
        padded[:, pad - dy : pad - dy + height, pad - dx : pad - dx + width]
    )
