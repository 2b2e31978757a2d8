"""`VectorEnvironment`: a Gymnasium ``VectorEnv`` as a batch, stepped in one call.

A vectorised env (``gymnasium.make_vec`` of an id registered with a
``vector_entry_point``, such as CartPole-v1's NumPy ``CartPoleVectorEnv``, or a
user's own ``gymnasium.vector.VectorEnv``) steps its whole batch in one call,
several times faster than stepping its envs one by one. Its batched
``(obs, reward, terminated, truncated, info)`` becomes a `TimeStep` by the same
rules as `GymAdapter` (DESIGN §2), as whole-batch array operations:

- ``terminated`` gives LAST with discount 0, ``truncated`` alone LAST with
  discount 1;
- the env must reset in the step after an episode ends, as Gymnasium's
  ``AutoresetMode.NEXT_STEP`` (the default) does: that step's rows become FIRST
  with reward 0 and a zero ``prev_action``, the action passed for them ignored.
  ``SAME_STEP`` (a reset observation in the step that ended the episode) and
  ``DISABLED`` do not fit time steps whose next action is chosen from the LAST
  observation, so they are refused;
- the numeric ``info`` keys (arrays of one value per env, Gymnasium's ``_key``
  masks saying which envs set them) become ``env_info``, found by probing the
  env once at construction; an env that did not set a key this step reads 0.

Seeding: the env's first reset is seeded with the batch's seed. A vector env
draws all its envs from the random generator that seed starts, so the episodes
are reproducible from the seed but are not those of envs seeded ``seed + i``
one by one (DESIGN §3's rule for the other back ends).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.buffer import TimeStepBuffer, action_to_numpy
from cadence.envs.env_state import UnsavableEnvStateError, loads_env_state
from cadence.envs.environment import Environment
from cadence.envs.errors import EnvStateMismatchError
from cadence.envs.gym_adapter import GymSpaces, is_numeric_scalar

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class VectorEnvironment(Environment):
    """Steps a ``gymnasium.vector.VectorEnv``'s whole batch in one call.

    Args:
        make_vector_env: builds the vector env (called once, here).
        seed: the seed of the env's first reset.
        device: where the time steps are delivered.
        env_info_keys: the ``info`` keys to report; ``None`` probes the env for those
            holding one number per env (one reset and one random step).

    Raises:
        ValueError: the env is not a ``VectorEnv``, or resets in another
            ``autoreset_mode`` than ``NEXT_STEP``.

    >>> import gymnasium as gym
    >>> env = VectorEnvironment(lambda: gym.make_vec("CartPole-v1", 4, "vector_entry_point"))
    >>> env.reset().observation.shape
    torch.Size([4, 4])
    """

    uniform_time_steps = True  # each one read out of a `TimeStepBuffer`

    def __init__(
        self,
        make_vector_env: Callable[[], gym.vector.VectorEnv],
        seed: int | None = 0,
        device: Any = "cpu",
        env_info_keys: list[str] | None = None,
    ):
        env = make_vector_env()
        if not isinstance(env, gym.vector.VectorEnv):
            raise ValueError(
                f"{_label(env)} is not a gymnasium.vector.VectorEnv; env.backend='vector' "
                "needs one (a Gymnasium id registered with a vector_entry_point); use "
                "'serial', 'parallel' or 'auto' for a single env's id"
            )
        self._env = env
        self._check_autoreset(env)
        self._num_envs = env.num_envs
        self._device = torch.device(device)
        self._seed = seed
        self._spaces = GymSpaces(env.single_observation_space, env.single_action_space)
        self._observation_spec = self._spaces.observation_spec
        self._action_spec = self._spaces.action_spec
        if env_info_keys is None:
            env_info_keys = self._probe_info_keys()
        self._info_keys = tuple(env_info_keys)
        self._env_info_spec = CompositeSpec(
            {k: TensorSpec((), torch.float32) for k in self._info_keys}
        )
        # The batch is written column by column and read out as the other back ends' are.
        self._buffer = TimeStepBuffer(
            self._observation_spec, self._action_spec, self._env_info_spec, self._num_envs
        )
        # Rows whose last step was LAST: the env resets them in this step (NEXT_STEP).
        self._resetting = np.zeros(self._num_envs, dtype=bool)
        self._closed = False

    @staticmethod
    def _check_autoreset(env: gym.vector.VectorEnv) -> None:
        # Gymnasium's vector envs reset in the next step unless their metadata says otherwise.
        mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        if gym.vector.AutoresetMode(mode) is not gym.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"{_label(env)} resets its envs in autoreset_mode {mode}; cadence's time "
                "steps need AutoresetMode.NEXT_STEP (an env whose episode ended resets in "
                "the step after its LAST, whose action is ignored). Build it with "
                "autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP, or use one of "
                "the single-env back ends ('serial', 'parallel')"
            )

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def observation_spec(self) -> Spec:
        return self._observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._env_info_spec

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def vector_env(self) -> gym.vector.VectorEnv:
        return self._env

    def reset(self) -> TimeStep:
        observation, info = self._env.reset(seed=self._seed)
        self._seed = None
        self._resetting[:] = False
        step_type = np.full(self._num_envs, _FIRST, dtype=np.int64)
        reward = np.zeros(self._num_envs, dtype=np.float32)
        discount = np.ones(self._num_envs, dtype=np.float32)
        return self._time_step(step_type, reward, discount, observation, None, info)

    def step(self, action: Nest) -> TimeStep:
        action = action_to_numpy(action)
        observation, reward, terminated, truncated, info = self._env.step(
            self._spaces.action(action)
        )
        terminated = np.asarray(terminated, dtype=bool)
        ended = terminated | np.asarray(truncated, dtype=bool)
        reward = np.array(reward, dtype=np.float32)
        resetting = self._resetting
        first = resetting if resetting.any() else None
        if first is not None:
            # New arrays: a vector env may keep the arrays it returned.
            terminated = terminated & ~first
            ended = ended & ~first
            reward[first] = 0.0
        step_type = np.where(ended, np.int64(_LAST), np.int64(_MID))
        if first is not None:
            step_type[first] = _FIRST
        self._resetting = ended
        discount = (~terminated).astype(np.float32)
        return self._time_step(step_type, reward, discount, observation, action, info, first)

    def _time_step(
        self,
        step_type: np.ndarray,
        reward: np.ndarray,
        discount: np.ndarray,
        observation: Any,
        prev_action: Nest | None,
        info: dict[str, Any],
        first: np.ndarray | None = None,
    ) -> TimeStep:
        """The batch as a torch `TimeStep`: written into the buffer (which converts each
        field to its spec's dtype), a zero ``prev_action`` where ``prev_action`` is None
        and in the rows ``first`` (None: no row), then read out in one copy."""
        env_info = {k: self._info_value(info, k) for k in self._info_keys}
        observation = self._spaces.observation(observation)
        self._buffer.write_batch(step_type, reward, discount, observation, prev_action, env_info)
        if first is not None:
            self._buffer.zero_actions(first)
        return self._buffer.read(self._device)

    def _info_value(self, info: dict[str, Any], key: str) -> np.ndarray:
        value = info.get(key)
        if value is None:
            return np.zeros(self._num_envs, dtype=np.float32)
        value = np.asarray(value, dtype=np.float32).reshape(self._num_envs)
        mask = info.get(f"_{key}")
        return value if mask is None else np.where(mask, value, np.float32(0.0))

    def _probe_info_keys(self) -> list[str]:
        _, reset_info = self._env.reset(seed=self._seed)
        _, _, _, _, step_info = self._env.step(self._env.action_space.sample())
        keys: dict[str, None] = {}
        for info in (reset_info, step_info):
            for key, value in info.items():
                if key.startswith("_") or f"_{key}" not in info:
                    continue  # Gymnasium pairs each per-env key with its "_key" mask
                values = np.asarray(value)
                if values.shape == (self._num_envs,) and all(map(is_numeric_scalar, values)):
                    keys[key] = None
        return list(keys)

    def render(self, env_index: int = 0) -> np.ndarray | None:
        """Env ``env_index``'s frame, from the vector env's frames (a sequence of them, or
        one ``[num_envs, H, W, 3]`` array); a single frame is returned as it is."""
        frames = self._env.render()
        if frames is None:
            return None
        if isinstance(frames, list | tuple) or np.ndim(frames) == 4:
            return np.asarray(frames[env_index])
        return np.asarray(frames)

    def get_state(self) -> bytes:
        """The pickled vector env (its random generator included) and which rows reset next.

        Raises:
            UnsavableEnvStateError: the env does not pickle.
        """
        state = {"env": self._env, "resetting": self._resetting, "seed": self._seed}
        try:
            return pickle.dumps(state)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise UnsavableEnvStateError(
                f"{_label(self._env)} cannot save its state: it does not pickle ({error}); a "
                "run resumed from a checkpoint starts new episodes"
            ) from error

    def set_state(self, state: Any) -> None:
        """Restores a `get_state`, loading only plain data and the env's own classes."""
        state = loads_env_state(state, self._env)
        if not isinstance(state, dict) or type(state.get("env")) is not type(self._env):
            raise EnvStateMismatchError(
                f"the env state was not saved by a vector env of {_label(self._env)}: it was "
                "saved by another back end or env config"
            )
        self._env.close()
        self._env = state["env"]
        self._resetting = state["resetting"]
        self._seed = state["seed"]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()


def _label(env: Any) -> str:
    spec = getattr(getattr(env, "unwrapped", env), "spec", None)
    return f"environment {spec.id}" if spec is not None else f"environment {type(env).__name__}"
