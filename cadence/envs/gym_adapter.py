"""`GymAdapter`: a ``gymnasium.Env`` as a `PyEnvironment`.

Gymnasium's ``(obs, reward, terminated, truncated, info)`` becomes a `TimeStep`
by the discount table of DESIGN §2: ``terminated`` gives LAST with discount 0,
``truncated`` alone gives LAST with discount 1 (terminated wins when both are
true). The numeric scalar keys of ``info`` become ``env_info`` with a fixed spec,
found by probing the env once at construction; a key missing from a later
``info`` reads 0.
"""

from __future__ import annotations

import numbers
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils import EzPickle

from cadence.data.nest import Nest, flatten, is_nested, map_structure
from cadence.data.specs import CompositeSpec, Spec, TensorSpec, spec_from_space
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.env_state import UnsavableEnvStateError, loads_env_state, wrapper_layers
from cadence.envs.environment import PyEnvironment

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class GymAdapter(PyEnvironment):
    """Adapts one ``gymnasium.Env``; seeds it with ``seed`` on its first reset.

    Args:
        env: the Gymnasium environment (any registered id or the user's own class).
        env_id: this environment's index in its batch.
        seed: the seed of the first ``reset``; later resets continue its RNG.
        env_info_keys: the ``info`` keys to report; ``None`` probes the env for
            its numeric scalar keys (one reset and one random step).
    """

    def __init__(
        self,
        env: gym.Env,
        env_id: int = 0,
        seed: int | None = None,
        env_info_keys: list[str] | None = None,
    ):
        self._env = env
        self._env_id = env_id
        self._seed = seed
        self._spaces = spaces = GymSpaces(env.observation_space, env.action_space)
        self._observation_spec = spaces.observation_spec
        self._action_spec = spaces.action_spec
        self._scalar_discrete_action = isinstance(env.action_space, gym.spaces.Discrete)
        # Read by every step: a Box or an integer action goes to the env as it is, and a
        # plain Box observation (the common case) skips the nest walk.
        self._action_starts = spaces.action_starts
        self._plain_action = not (
            spaces.tuple_action or self._scalar_discrete_action or spaces.action_starts is not None
        )
        self._flat_obs_dtype = spaces.flat_obs_dtype
        if env_info_keys is None:
            env_info_keys = self._probe_info_keys()
        self._info_keys = tuple(env_info_keys)
        self._env_info_spec = CompositeSpec(
            {k: TensorSpec((), torch.float32) for k in self._info_keys}
        )
        self._zero_action = self._action_spec.numpy_zeros()
        self._needs_reset = True
        self._reset_options: dict[str, Any] | None = None
        if seed is not None:
            env.action_space.seed(seed)

    @property
    def gym_env(self) -> gym.Env:
        return self._env

    @property
    def observation_spec(self) -> Spec:
        return self._observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._env_info_spec

    def set_reset_options(self, options: dict[str, Any] | None) -> None:
        """Given to every later ``reset`` of the Gymnasium env as ``options``."""
        self._reset_options = options

    def reset(self) -> TimeStep:
        observation, info = self._env.reset(seed=self._seed, options=self._reset_options)
        self._seed = None
        self._needs_reset = False
        observation = self._spaces.observation(observation)
        info = self._info_values(info)
        return TimeStep(_FIRST, 0.0, 1.0, observation, self._zero_action, self._env_id, info)

    def step(self, action: Nest) -> TimeStep:
        # The hot path of every CPU back end: positional construction, no nest walks, and
        # the common cases (a Box or an integer action, a Box observation) inlined.
        if self._needs_reset:
            return self.reset()
        if self._plain_action or (isinstance(action, np.integer) and self._action_starts is None):
            gym_action = action
        else:
            gym_action = self._to_gym(action)
        observation, reward, terminated, truncated, info = self._env.step(gym_action)
        if terminated or truncated:
            step_type = _LAST
            self._needs_reset = True
        else:
            step_type = _MID
        if self._flat_obs_dtype is not None:
            observation = np.asarray(observation, self._flat_obs_dtype)
        else:
            observation = self._spaces.observation(observation)
        info = self._info_values(info) if self._info_keys else {}
        discount = 0.0 if terminated else 1.0
        return TimeStep(step_type, float(reward), discount, observation, action, self._env_id, info)

    def render(self) -> np.ndarray | None:
        return self._env.render()

    def close(self) -> None:
        self._env.close()

    def get_state(self) -> Any:
        """The pickled env and RNGs; raises if the env cannot be pickled.

        A MuJoCo or ALE env pickles as its constructor's arguments (Gymnasium's
        ``EzPickle``), which rebuild a fresh simulation or emulator: its state is saved
        beside it (`_SIMULATORS`). Any other env or wrapper pickled that way would come
        back fresh, so its state cannot be saved; nor can an env that does not pickle.

        Raises:
            UnsavableEnvStateError: either (a ``TypeError``, one line naming the env:
                expected of such envs, a run resumed from a checkpoint then starts new
                episodes).
        """
        env = self._env.unwrapped
        simulators = {
            kind: saved
            for kind, (save, _) in _SIMULATORS.items()
            if (saved := save(env)) is not None
        }
        fresh = [
            type(layer).__name__
            for layer in wrapper_layers(self._env)
            if isinstance(layer, EzPickle) and not (layer is env and simulators)
        ]
        if fresh:
            raise UnsavableEnvStateError(
                f"{self._label()} cannot save its state: {', '.join(fresh)} pickles as its "
                "constructor's arguments (Gymnasium's EzPickle) and would be restored as a "
                "fresh env; a run resumed from a checkpoint cuts its episodes and starts new ones"
            )
        state = {
            "env": self._env,
            "seed": self._seed,
            "needs_reset": self._needs_reset,
            "action_space_rng": self._env.action_space.np_random.bit_generator.state,
            **simulators,
        }
        try:
            return pickle.dumps(state)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise UnsavableEnvStateError(
                f"{self._label()} cannot save its state: it does not pickle ({error}); a run "
                "resumed from a checkpoint cuts its episodes and starts new ones"
            ) from error

    def _label(self) -> str:
        """``environment id 3 (LunarLander-v3)``: this env in messages."""
        spec = getattr(self._env, "spec", None)
        name = spec.id if spec is not None else type(self._env.unwrapped).__name__
        return f"environment id {self._env_id} ({name})"

    def set_state(self, state: Any) -> None:
        """Restores a `get_state`; only plain data and the env's own classes are loaded
        (see `cadence.envs.env_state`): a checkpoint's state cannot run other code."""
        state = loads_env_state(state, self._env)
        if type(state["env"]) is not type(self._env):
            raise TypeError(
                f"the state is of a {type(state['env']).__name__}, this env is a "
                f"{type(self._env).__name__}: it was saved for another env config"
            )
        self._env.close()
        self._env = state["env"]
        self._seed = state["seed"]
        self._needs_reset = state["needs_reset"]
        self._env.action_space.np_random.bit_generator.state = state["action_space_rng"]
        for kind, (_, restore) in _SIMULATORS.items():
            if kind in state:
                restore(self._env.unwrapped, state[kind])

    def _to_gym(self, action: Nest) -> Any:
        if self._scalar_discrete_action and self._action_starts is None:
            # numpy integers are what `Discrete.sample` gives, so every env takes them, and
            # `Discrete.contains` checks them much faster than Python ints.
            return action if isinstance(action, np.integer) else int(action)
        return self._spaces.action(action)

    def _info_values(self, info: dict[str, Any]) -> dict[str, float]:
        # A key the env leaves out, or sets to None (Shimmy's "discount" on reset), reads 0.
        return {k: float(info.get(k) if info.get(k) is not None else 0.0) for k in self._info_keys}

    def _probe_info_keys(self) -> list[str]:
        _, reset_info = self._env.reset(seed=self._seed)
        _, _, _, _, step_info = self._env.step(self._env.action_space.sample())
        keys: dict[str, None] = {}
        for info in (reset_info, step_info):
            for key, value in info.items():
                if is_numeric_scalar(value):
                    keys[key] = None
        return list(keys)


class GymSpaces:
    """A Gymnasium observation and action space as cadence's specs, and the conversions
    between their values, for one env (`GymAdapter`) or a batch (`VectorEnvironment`: every
    conversion is element-wise, so a leading batch dimension passes through).

    - Specs come from `spec_from_space`; a ``Tuple`` space (at any depth) is a dict keyed
      ``"0"``, ``"1"``...
    - A Discrete or MultiDiscrete space whose ``start`` is not 0 (an entry of a Dict or
      Tuple included) is counted from 0 in its spec: actions are shifted up on their way
      to the env, observations down.
    - Observations take their spec's numpy dtype.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_spec = spec_from_space(observation_space)
        self.action_spec = spec_from_space(action_space)
        self.observation_space, self.action_space = observation_space, action_space
        self.tuple_obs = _holds_tuple(observation_space)
        self.tuple_action = _holds_tuple(action_space)
        self.action_starts = _starts(action_space)
        """The action's starts (the space's, or a nest of a Dict's or Tuple's entries'),
        None where every one is 0."""
        self.obs_starts = _starts(observation_space)
        self.obs_dtypes = map_structure(lambda s: s.numpy_dtype, self.observation_spec)
        plain_obs = not is_nested(self.obs_dtypes) and self.obs_starts is None
        self.flat_obs_dtype: np.dtype | None = self.obs_dtypes if plain_obs else None
        """The dtype of a plain Box observation (the common case), None for any other."""

    def observation(self, observation: Any) -> Nest:
        """An env's observation as its spec's numpy nest (leaves may share the env's
        memory: the back ends copy them into their buffers)."""
        if self.flat_obs_dtype is not None:
            return np.asarray(observation, self.flat_obs_dtype)
        if self.tuple_obs:
            observation = _keyed_tuples(observation, self.observation_space)
        if self.obs_starts is not None:
            return map_structure(_from_start, observation, self.obs_dtypes, self.obs_starts)
        return map_structure(np.asarray, observation, self.obs_dtypes)

    def action(self, action: Nest) -> Any:
        """A numpy action nest as the env takes it."""
        if self.action_starts is not None:
            action = map_structure(_to_start, action, self.action_starts)
        if self.tuple_action:
            return _tuples(action, self.action_space)
        return action


def _mujoco_state(env: gym.Env) -> dict[str, Any] | None:
    """A MuJoCo env's simulation and RNG (``None`` for other envs).

    Every array of its ``MjData``, not only MuJoCo's integration state: an env also
    reads what the last step computed (Ant, before stepping, its torso's position),
    and with all of them a restored env steps exactly as the saved one would.
    """
    data = getattr(env, "data", None)
    if data is None or type(data).__module__.partition(".")[0] != "mujoco":
        return None
    arrays = {}
    for name in dir(data):
        if name.startswith("_"):
            continue
        value = getattr(data, name)
        if isinstance(value, np.ndarray):
            arrays[name] = value.copy()
    # The env's own arrays and numbers outside the simulation (a robotics env's goal),
    # which the fresh env that EzPickle rebuilds would not have.
    attributes = {
        name: value.copy() if isinstance(value, np.ndarray) else value
        for name, value in vars(env).items()
        if isinstance(value, np.ndarray | np.generic | float)
    }
    return {
        "arrays": arrays,
        "time": data.time,
        "np_random": env.np_random.bit_generator.state,
        "attributes": attributes,
    }


def _set_mujoco_state(env: gym.Env, state: dict[str, Any]) -> None:
    """Puts a `_mujoco_state` back into ``env`` (built from the same constructor arguments)."""
    data = env.data
    for name, array in state["arrays"].items():
        target = None if name.startswith("_") else getattr(data, name, None)
        # Per-contact and per-constraint arrays change size from step to step; the next
        # step recomputes them from the rest.
        if isinstance(target, np.ndarray) and target.shape == np.shape(array):
            target[...] = array
    data.time = state["time"]
    env.np_random.bit_generator.state = state["np_random"]
    for name, value in state.get("attributes", {}).items():  # older checkpoints have none
        target = getattr(env, name, None)
        if isinstance(target, np.ndarray) and target.shape == np.shape(value):
            target[...] = value  # in place: it may be a view of the simulation's memory
        else:
            setattr(env, name, value)


def _ale_state(env: gym.Env) -> dict[str, Any] | None:
    """An Atari env's emulator, with the RNG of its sticky actions, and its own RNG (the
    no-op starts of ``AtariPreprocessing`` draw from it); ``None`` for other envs."""
    ale = getattr(env, "ale", None)
    if ale is None or type(ale).__module__.partition(".")[0] != "ale_py":
        return None
    return {
        "emulator": ale.cloneState(include_rng=True).serialize(),
        "np_random": env.np_random.bit_generator.state,
    }


def _set_ale_state(env: gym.Env, state: dict[str, Any]) -> None:
    """Puts an `_ale_state` back into ``env`` (built from the same constructor arguments)."""
    from ale_py import ALEState  # loaded already: ``env`` is an ALE env

    env.ale.restoreState(ALEState(state["emulator"]))
    env.np_random.bit_generator.state = state["np_random"]


# The simulators whose envs pickle as their constructor's arguments, by their key in a
# saved state: what saves one (None for other envs) and what puts it back.
_SIMULATORS = {
    "mujoco": (_mujoco_state, _set_mujoco_state),
    "ale": (_ale_state, _set_ale_state),
}


def _nonzero_start(space: gym.Space) -> np.ndarray | None:
    """The ``start`` of a Discrete or MultiDiscrete space, or None where it is 0 (or the
    space has none)."""
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        start = np.asarray(space.start, np.int64)
        return start if start.any() else None
    return None


def _starts(space: gym.Space) -> Nest:
    """`_nonzero_start` of every leaf of a space, as a nest shaped like its spec (0 where a
    leaf starts at 0); None where every leaf does."""
    starts = _leaf_starts(space)
    return None if all(isinstance(start, int) for start in flatten(starts)) else starts


def _leaf_starts(space: gym.Space) -> Nest:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space)
        return {str(key): _leaf_starts(sub) for key, sub in items}
    start = _nonzero_start(space)
    return 0 if start is None else start


def _holds_tuple(space: gym.Space) -> bool:
    """Whether ``space`` is a Tuple or holds one at any depth."""
    if isinstance(space, gym.spaces.Tuple):
        return True
    return isinstance(space, gym.spaces.Dict) and any(map(_holds_tuple, space.spaces.values()))


def _keyed_tuples(value: Any, space: gym.Space) -> Any:
    """A Gymnasium value as cadence's nest: every Tuple's entries keyed ``"0"``, ``"1"``..."""
    if isinstance(space, gym.spaces.Tuple):
        return {
            str(i): _keyed_tuples(v, sub)
            for i, (v, sub) in enumerate(zip(value, space, strict=True))
        }
    if isinstance(space, gym.spaces.Dict):
        return {key: _keyed_tuples(value[key], sub) for key, sub in space.spaces.items()}
    return value


def _tuples(value: Any, space: gym.Space) -> Any:
    """`_keyed_tuples` undone: every Tuple space's entries back in a tuple."""
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_tuples(value[str(i)], sub) for i, sub in enumerate(space))
    if isinstance(space, gym.spaces.Dict):
        return {key: _tuples(value[key], sub) for key, sub in space.spaces.items()}
    return value


def _to_start(action: Any, start: Any) -> Any:
    """An action leaf counted from its space's ``start`` (0: as it is)."""
    return action if isinstance(start, int) else np.asarray(action, np.int64) + start


def _from_start(observation: Any, dtype: np.dtype, start: Any) -> np.ndarray:
    """An observation leaf as its spec's dtype, counted from 0."""
    return np.asarray(np.asarray(observation) - start, dtype)


def is_numeric_scalar(value: Any) -> bool:
    if isinstance(value, (bool, numbers.Number, np.bool_)):
        return True
    return isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "biuf"
