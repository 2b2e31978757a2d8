"""The two environment contracts.

- `PyEnvironment`: one environment, numpy in and out, unbatched. `GymAdapter`
  turns a ``gymnasium.Env`` into one; TimeStep wrappers (`TimeLimit`) wrap one.
- `Environment`: a batch of environments, torch in and out, batched along dim 0.
  Back ends (serial, thread, process-parallel) hold ``PyEnvironment`` s and do the
  numpy <-> torch conversion; tensor-native environments implement it directly.

Both follow the auto-reset rule of DESIGN §2: the step after a LAST is a FIRST
produced by reset, and the action passed with it is ignored.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import torch

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec, TensorSpec
from cadence.data.time_step import TimeStep
from cadence.envs.errors import EnvStateMismatchError

REWARD_SPEC = TensorSpec((), torch.float32)


class PyEnvironment(abc.ABC):
    """One environment with numpy ``TimeStep`` s whose leaves have no batch dim.

    Scalars (``step_type``, ``reward``, ``discount``, ``env_id`` and the
    ``env_info`` values) are Python numbers; observations and actions are arrays
    (or nests of them) matching the specs.
    """

    @property
    @abc.abstractmethod
    def observation_spec(self) -> Spec: ...

    @property
    @abc.abstractmethod
    def action_spec(self) -> Spec: ...

    @property
    def env_info_spec(self) -> CompositeSpec:
        """Scalar float32 specs of the numeric ``info`` keys this env reports."""
        return CompositeSpec()

    @abc.abstractmethod
    def reset(self) -> TimeStep:
        """Starts a new episode and returns its FIRST step."""

    @abc.abstractmethod
    def step(self, action: Nest) -> TimeStep:
        """Executes ``action``; after a LAST, resets instead (ignoring ``action``)."""

    def set_reset_options(self, options: dict[str, Any] | None) -> None:  # noqa: B027
        """Options for every later `reset`, until changed (``None``: none).

        The `Batcher` gives each slot's ``{"env_info": {key: value}}`` here, so that a
        multi-task env can pick its task. A Gymnasium env (`GymAdapter`) receives them as
        ``reset(options=options)``; an env of another kind takes no options and ignores
        them (an optional hook).
        """

    def render(self) -> np.ndarray | None:
        """An RGB frame ``[H, W, 3]`` of the current state, if the env renders."""
        return None

    def close(self) -> None:  # noqa: B027 - an optional hook: most envs hold nothing to release
        """Releases the env's resources."""

    def get_state(self) -> Any:
        """A picklable snapshot of the whole env (in-progress episode included)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its state")

    def set_state(self, state: Any) -> None:
        """Restores a snapshot taken by `get_state`."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore a state")


class PyEnvironmentWrapper(PyEnvironment):
    """Forwards everything to the wrapped env; subclasses override what they change."""

    def __init__(self, env: PyEnvironment):
        self._env = env

    @property
    def observation_spec(self) -> Spec:
        return self._env.observation_spec

    @property
    def action_spec(self) -> Spec:
        return self._env.action_spec

    @property
    def env_info_spec(self) -> CompositeSpec:
        return self._env.env_info_spec

    def reset(self) -> TimeStep:
        return self._env.reset()

    def step(self, action: Nest) -> TimeStep:
        return self._env.step(action)

    def set_reset_options(self, options: dict[str, Any] | None) -> None:
        self._env.set_reset_options(options)

    def render(self) -> np.ndarray | None:
        return self._env.render()

    def close(self) -> None:  # noqa: B027 - an optional hook: most envs hold nothing to release
        self._env.close()

    def get_state(self) -> Any:
        return {"inner": self._env.get_state(), "own": self._own_state()}

    def set_state(self, state: Any) -> None:
        if not isinstance(state, dict) or set(state) != {"inner", "own"}:
            raise EnvStateMismatchError(
                f"the env state was not saved by a {type(self).__name__}: it was saved by an "
                "env stack of other layers (e.g. without env.max_episode_steps)"
            )
        self._env.set_state(state["inner"])
        self._set_own_state(state["own"])

    def _own_state(self) -> Any:
        return None

    def _set_own_state(self, state: Any) -> None:
        pass


class Environment(abc.ABC):
    """A batch of ``batch_size`` environments exchanging torch tensors on ``device``.

    ``step(action)`` takes a nest of ``[B, *action_shape]`` tensors matching
    ``action_spec`` and returns a `TimeStep` batched along dim 0. Use as a
    context manager, or call `close`.

    >>> with make_env("CartPole-v1", num_envs=4, seed=0) as env:  # doctest: +SKIP
    ...     time_step = env.reset()
    ...     time_step = env.step(env.action_spec.sample((env.batch_size,)))
    """

    @property
    @abc.abstractmethod
    def batch_size(self) -> int: ...

    @property
    @abc.abstractmethod
    def observation_spec(self) -> Spec: ...

    @property
    @abc.abstractmethod
    def action_spec(self) -> Spec: ...

    @property
    def reward_spec(self) -> TensorSpec:
        return REWARD_SPEC

    @property
    def env_info_spec(self) -> CompositeSpec:
        return CompositeSpec()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    uniform_time_steps: bool = False
    """Whether every time step `step` returns holds new, contiguous tensors of one layout
    (the specs' shapes and dtypes, on `device`), as those of cadence's Gymnasium back ends
    do. A compiled acting step then works out its inputs' signature once per unroll, not
    once per step (`cadence.collect.Collector`); an env that claims it and breaks it would
    feed the compiled policy inputs it was not compiled for."""

    @abc.abstractmethod
    def reset(self) -> TimeStep:
        """Resets every environment of the batch; all rows are FIRST."""

    @abc.abstractmethod
    def step(self, action: Nest) -> TimeStep:
        """Steps every environment; rows whose last step was LAST reset instead."""

    def render(self, env_index: int = 0) -> np.ndarray | None:
        """An RGB frame of environment ``env_index``, if it renders."""
        return None

    def close(self) -> None:  # noqa: B027 - an optional hook: most envs hold nothing to release
        """Releases workers, threads and other resources; idempotent."""

    def get_state(self) -> Any:
        """A picklable snapshot of every environment (in-progress episodes included)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its state")

    def set_state(self, state: Any) -> None:
        """Restores a snapshot taken by `get_state`; the next `step` continues from it."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore a state")

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down modules
            pass
