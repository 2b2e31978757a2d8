"""Gymnasium wrappers: observation and action shaping below the `GymAdapter` (DESIGN §3).

Each is a plain ``gymnasium.Wrapper`` holding only picklable state, so that worker
processes can build it: pass ``functools.partial(EnvFrameStack, num_stack=4)`` (or the
class itself) in ``make_env(..., gym_wrappers=[...])``, or name it in a config's
``env.wrappers`` (``- {name: EnvFrameStack, num_stack: 4}``).

- `EnvFrameStack`: the last ``k`` observations, stacked inside the env (the replay
  buffer then stores whole stacks; `cadence.transforms.ReplayFrameStack` stores
  single frames and stacks them at sample time instead);
- `FrameSkip`: each action repeated ``k`` times ("action repeat"), rewards summed;
- `NormalizedAction`: a ``[-1, 1]`` action interface to a bounded ``Box``;
- `ContinuousActionClip`: actions clipped to the ``Box`` bounds;
- `ImageChannelFirst`: ``[H, W, C]`` image observations as ``[C, H, W]``;
- `ObservationMask`: only some entries of a 1-D ``Box`` observation (e.g. CartPole
  without its velocities).
"""

from __future__ import annotations

import collections
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import RecordConstructorArgs

from cadence.envs.distractors import BackgroundDistractor, CameraJitter

__all__ = [
    "BackgroundDistractor",
    "CameraJitter",
    "ContinuousActionClip",
    "EnvFrameStack",
    "FrameSkip",
    "ImageChannelFirst",
    "NormalizedAction",
    "ObservationMask",
]


class EnvFrameStack(gym.Wrapper, RecordConstructorArgs):
    """Observations of the last ``num_stack`` steps, oldest first, stacked inside the env.

    Everything downstream sees the stacks: the policy, and a replay buffer, which
    then stores each observation ``num_stack`` times over. For off-policy training
    on large observations, `cadence.transforms.ReplayFrameStack` (config name
    ``replay_frame_stack``) stores single frames and stacks them when it samples.

    With ``axis=None`` the frames are stacked along a new leading axis
    (``[k, *obs_shape]``); with an integer ``axis`` they are concatenated along
    that existing axis, e.g. ``axis=0`` turns ``[C, H, W]`` frames into
    ``[k * C, H, W]`` (what a CNN takes). After ``reset`` every slot holds the
    reset observation, so the first stacked observation of an episode never
    mixes in the previous episode.

    Args:
        env: an env with a ``Box`` observation space.
        num_stack: the number of frames ``k`` (>= 1).
        axis: ``None`` for a new leading axis, or the existing axis to concatenate along.

    Raises:
        TypeError: the observation space is not a ``Box``.
        ValueError: ``num_stack < 1`` or ``axis`` is out of range.

    >>> env = EnvFrameStack(gym.make("CartPole-v1"), num_stack=3)
    >>> env.observation_space.shape
    (3, 4)
    """

    def __init__(self, env: gym.Env, num_stack: int, axis: int | None = None):
        RecordConstructorArgs.__init__(self, num_stack=num_stack, axis=axis)
        gym.Wrapper.__init__(self, env)
        space = _require_box(env.observation_space, "EnvFrameStack", "observation")
        if num_stack < 1:
            raise ValueError(f"EnvFrameStack needs num_stack >= 1, got {num_stack}")
        if axis is not None and not -len(space.shape) <= axis < len(space.shape):
            raise ValueError(
                f"EnvFrameStack axis {axis} is out of range for observations of shape {space.shape}"
            )
        self._num_stack = num_stack
        self._axis = axis
        self._frames: collections.deque[np.ndarray] = collections.deque(maxlen=num_stack)
        self.observation_space = spaces.Box(
            self._stack([space.low] * num_stack),
            self._stack([space.high] * num_stack),
            dtype=space.dtype,
        )

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        for _ in range(self._num_stack):
            self._frames.append(observation)
        return self._stack(self._frames), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(observation)
        return self._stack(self._frames), reward, terminated, truncated, info

    def _stack(self, frames: Any) -> np.ndarray:
        # A fresh array each step: callers may keep observations.
        if self._axis is None:
            return np.stack(frames, axis=0)
        return np.concatenate(frames, axis=self._axis)


class FrameSkip(gym.Wrapper, RecordConstructorArgs):
    """Repeats each action ``skip`` times and returns the summed reward ("action repeat").

    Stops repeating as soon as the episode terminates or is truncated, so a
    step never runs past the end of an episode. The observation and ``info``
    are those of the last inner step.

    Args:
        env: any env.
        skip: inner steps per step (>= 1).

    Raises:
        ValueError: ``skip < 1``.

    >>> env = FrameSkip(gym.make("CartPole-v1"), skip=4)
    """

    def __init__(self, env: gym.Env, skip: int):
        RecordConstructorArgs.__init__(self, skip=skip)
        gym.Wrapper.__init__(self, env)
        if skip < 1:
            raise ValueError(f"FrameSkip needs skip >= 1, got {skip}")
        self._skip = skip

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        total_reward = 0.0
        for _ in range(self._skip):
            observation, reward, terminated, truncated, info = self.env.step(action)
            total_reward += float(reward)
            if terminated or truncated:
                break
        return observation, total_reward, terminated, truncated, info


class NormalizedAction(gym.ActionWrapper, RecordConstructorArgs):
    """Takes actions in ``[-1, 1]`` and maps them affinely onto the ``Box`` bounds.

    ``-1`` maps to ``low`` and ``1`` to ``high``; actions outside ``[-1, 1]``
    are clipped first, so a policy (e.g. a Gaussian one) can never drive the env
    out of its bounds.

    Args:
        env: an env with a float ``Box`` action space with finite bounds.

    Raises:
        TypeError: the action space is not a float ``Box``.
        ValueError: a bound is infinite.

    >>> env = NormalizedAction(gym.make("Pendulum-v1"))  # torque in [-2, 2]
    >>> float(env.action(np.array([1.0], np.float32))[0])
    2.0
    """

    def __init__(self, env: gym.Env):
        RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        space = _require_float_box(env.action_space, "NormalizedAction")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"NormalizedAction needs finite action bounds, got low={space.low} "
                f"high={space.high}; use ContinuousActionClip or no wrapper for unbounded actions"
            )
        self._low = space.low.astype(np.float64)
        self._half_range = (space.high.astype(np.float64) - self._low) / 2.0
        self._dtype = space.dtype
        self.action_space = spaces.Box(-1.0, 1.0, space.shape, dtype=space.dtype)

    def action(self, action: Any) -> np.ndarray:
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        return (self._low + (action + 1.0) * self._half_range).astype(self._dtype)


class ContinuousActionClip(gym.ActionWrapper, RecordConstructorArgs):
    """Clips actions to the bounds of the env's ``Box`` action space.

    Args:
        env: an env with a float ``Box`` action space.

    Raises:
        TypeError: the action space is not a float ``Box``.

    >>> env = ContinuousActionClip(gym.make("Pendulum-v1"))
    >>> float(env.action(np.array([5.0], np.float32))[0])
    2.0
    """

    def __init__(self, env: gym.Env):
        RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        space = _require_float_box(env.action_space, "ContinuousActionClip")
        self._low, self._high, self._dtype = space.low, space.high, space.dtype

    def action(self, action: Any) -> np.ndarray:
        return np.clip(np.asarray(action, dtype=self._dtype), self._low, self._high)


class ImageChannelFirst(gym.ObservationWrapper, RecordConstructorArgs):
    """Transposes ``[H, W, C]`` image observations to ``[C, H, W]``, as torch's convolutions want.

    A ``Box`` observation must be 3-D; in a ``Dict`` observation every 3-D
    ``Box`` entry is transposed and the others pass through.

    Args:
        env: an env with a 3-D ``Box`` observation space, or a ``Dict`` holding some.

    Raises:
        TypeError: there is no 3-D ``Box`` observation to transpose.

    >>> from cadence.testing.fakes import ImageEnv
    >>> ImageChannelFirst(ImageEnv(size=16)).observation_space.shape
    (3, 16, 16)
    """

    def __init__(self, env: gym.Env):
        RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if isinstance(space, spaces.Dict):
            self._keys = [k for k, s in space.spaces.items() if _is_image(s)]
            transposed = {
                k: _channel_first_box(s) if k in self._keys else s for k, s in space.spaces.items()
            }
            self.observation_space = spaces.Dict(transposed)
        elif _is_image(space):
            self._keys = None
            self.observation_space = _channel_first_box(space)
        else:
            self._keys = []
        if self._keys == []:
            raise TypeError(
                f"ImageChannelFirst needs a 3-D Box observation space [H, W, C] (or a Dict "
                f"holding one), got {space}"
            )

    def observation(self, observation: Any) -> Any:
        if self._keys is None:
            return _channel_first(observation)
        return {k: _channel_first(v) if k in self._keys else v for k, v in observation.items()}


class ObservationMask(gym.ObservationWrapper, RecordConstructorArgs):
    """Keeps only the entries ``keep`` of a 1-D ``Box`` observation, in that order.

    Makes a task partially observable: CartPole-v1 with ``keep=[0, 2]`` shows the
    cart position and the pole angle but not their velocities, which a policy must
    then infer from several steps (a recurrent one, or stacked frames).

    Args:
        env: an env with a 1-D ``Box`` observation space.
        keep: the indices to keep (negative ones count from the end), each once.

    Raises:
        TypeError: the observation space is not a 1-D ``Box``.
        ValueError: ``keep`` is empty, repeats an index or holds one out of range.

    >>> env = ObservationMask(gym.make("CartPole-v1"), keep=[0, 2])
    >>> env.observation_space.shape
    (2,)
    """

    def __init__(self, env: gym.Env, keep: list[int]):
        RecordConstructorArgs.__init__(self, keep=keep)
        gym.ObservationWrapper.__init__(self, env)
        space = _require_box(env.observation_space, "ObservationMask", "observation")
        if len(space.shape) != 1:
            raise TypeError(f"ObservationMask needs a 1-D Box observation space, got {space}")
        self._keep = _mask_indices(keep, space.shape[0])
        self.observation_space = spaces.Box(
            space.low[self._keep], space.high[self._keep], dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self._keep]  # a fresh array: indexing by a list copies


def _mask_indices(keep: Any, size: int) -> np.ndarray:
    """``keep`` as non-negative indices into ``size`` entries; refuses bad ones."""
    indices = list(keep) if isinstance(keep, (list, tuple, np.ndarray)) else None
    if not indices or not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in indices
    ):
        raise ValueError(f"ObservationMask needs keep: a non-empty list of ints, got {keep!r}")
    out_of_range = [i for i in indices if not -size <= i < size]
    if out_of_range:
        raise ValueError(
            f"ObservationMask keep {out_of_range} out of range for observations of {size} entries"
        )
    normalized = [int(i) % size for i in indices]
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"ObservationMask keep repeats an index: {keep!r}")
    return np.array(normalized, dtype=np.intp)


def _channel_first(image: np.ndarray) -> np.ndarray:
    # Contiguous, so that later copies (into shared memory, into torch) are plain memcpys.
    return np.ascontiguousarray(np.transpose(image, (2, 0, 1)))


def _channel_first_box(space: spaces.Box) -> spaces.Box:
    return spaces.Box(_channel_first(space.low), _channel_first(space.high), dtype=space.dtype)


def _is_image(space: gym.Space) -> bool:
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def _require_box(space: gym.Space, wrapper: str, what: str) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"{wrapper} needs a Box {what} space, got {space}")
    return space


def _require_float_box(space: gym.Space, wrapper: str) -> spaces.Box:
    space = _require_box(space, wrapper, "action")
    if not np.issubdtype(space.dtype, np.floating):
        raise TypeError(f"{wrapper} needs a float Box action space, got dtype {space.dtype}")
    return space
