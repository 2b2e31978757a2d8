"""`GymEnvFactory`: the sendable recipe of one Gymnasium env, with the ids a script registered."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym

from cadence.envs.backend_choice import refuse_vector_only
from cadence.envs.environment import PyEnvironment
from cadence.envs.errors import UnknownEnvironmentError
from cadence.envs.gym_adapter import GymAdapter
from cadence.envs.ids import check_env_id
from cadence.envs.mujoco_setup import is_mujoco_env, prepare_for_mujoco
from cadence.envs.time_limit import TimeLimit


class GymEnvFactory:
    """Builds environment ``env_id`` of a batch: a picklable recipe for worker processes.

    Args:
        name: a Gymnasium id, or a callable returning a ``gymnasium.Env``.
        env_id: the environment's index in its batch.
        seed: the batch's seed; this environment is seeded ``seed + env_id``.
        max_episode_steps: wraps the env in cadence's `TimeLimit` when set.
        gym_wrappers: callables applied in order to the ``gymnasium.Env``.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        env_info_keys: the ``info`` keys to report (``None`` probes the env).

    An id's registration travels with the recipe: a worker process starts with
    Gymnasium's own ids and cadence's, not those the user's script or notebook
    registered (workers never run it: `cadence.envs.main_module`), so the recipe keeps
    this process's ``EnvSpec`` of the id and registers it where the id is missing. An
    entry point the script defines travels by value with the rest of what the script
    defines; `make_env` refuses, saying what to do, a registration that cannot travel
    (`check_sendable_spec`).
    """

    def __init__(
        self,
        name: str | Callable[..., gym.Env],
        env_id: int,
        seed: int,
        max_episode_steps: int | None = None,
        gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
        env_kwargs: dict[str, Any] | None = None,
        env_info_keys: list[str] | None = None,
    ):
        self.name = name
        self.env_id = env_id
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.gym_wrappers = tuple(gym_wrappers)
        self.env_kwargs = dict(env_kwargs or {})
        self.env_info_keys = env_info_keys
        self.spec = _user_spec(name)

    def make_gym(self) -> gym.Env:
        if callable(self.name):
            env = self.name(**self.env_kwargs)
        else:
            self._register()
            refuse_vector_only(self.name)  # e.g. a Batcher's `make_gym_env`
            if is_mujoco_env(self.name):
                prepare_for_mujoco(self.env_kwargs.get("render_mode"))
            env = gym.make(self.name, **self.env_kwargs)
        if "mujoco" in sys.modules:  # this env or an earlier one uses MuJoCo
            prepare_for_mujoco(getattr(env, "render_mode", None))
        for wrapper in self.gym_wrappers:
            env = wrapper(env)
        return env

    def _register(self) -> None:
        """Makes sure this process knows the id (see `register_missing`)."""
        if self.spec is None:
            check_env_id(self.name)
        else:
            register_missing([self.spec])

    def __call__(self) -> PyEnvironment:
        env: PyEnvironment = GymAdapter(
            self.make_gym(), self.env_id, self.seed + self.env_id, self.env_info_keys
        )
        if self.max_episode_steps is not None:
            env = TimeLimit(env, self.max_episode_steps)
        return env

    def with_seed_offset(self, offset: int) -> GymEnvFactory:
        """This recipe with the env seeded ``seed + env_id + offset`` (for a restarted worker)."""
        clone = copy.copy(self)
        clone.seed = self.seed + offset
        return clone


def env_registrations(values: Iterable[object]) -> tuple[gym.envs.registration.EnvSpec, ...]:
    """This process's registrations of the env ids among ``values`` (a `Batcher`'s
    ``env_args``: each string that is a registered id), for worker processes, which never
    run the user's script and so lack the ids it registered (see `register_missing`)."""
    return tuple(spec for value in values if (spec := _user_spec(value)) is not None)


def register_missing(specs: Iterable[gym.envs.registration.EnvSpec]) -> None:
    """Makes sure this process knows each id of ``specs``: a worker process starts with
    Gymnasium's registry only; `check_env_id` registers cadence's own ids (cadence/...)
    and those of the packages it knows, and the parent's registration covers the user's."""
    for spec in specs:
        try:
            check_env_id(spec.id)
        except UnknownEnvironmentError:
            gym.registry[spec.id] = spec


def _user_spec(name: object) -> gym.envs.registration.EnvSpec | None:
    """This process's registration of id ``name``, for a worker that lacks it; None for a
    callable, a ``"module:Id"`` (the worker imports the module, which registers it) or an
    id not registered (yet: `check_env_id` then reports it or finds its package)."""
    if not isinstance(name, str) or ":" in name:
        return None
    return gym.registry.get(name)


def check_sendable_spec(factory: GymEnvFactory) -> None:
    """Raises ValueError, saying what to do, where the registration of the factory's id
    cannot be sent to worker processes (its entry point or kwargs do not pickle, even by
    value: a closure over a lock, an open file, a live simulator)."""
    if factory.spec is None:
        return
    try:
        cloudpickle.dumps(factory.spec)
    except Exception as error:  # noqa: BLE001 - pickling raises TypeError, PicklingError, ...
        raise ValueError(
            f"Environment {factory.spec.id!r} is registered in this process only, and its "
            f"registration (entry point {factory.spec.entry_point!r}, kwargs "
            f"{sorted(factory.spec.kwargs)}) cannot be sent to the worker processes of "
            f"backend 'parallel': {type(error).__name__}: {error}. Register it with an "
            "entry point string 'module:EnvClass' of a module the workers can import (a .py "
            "file beside your script or notebook) and picklable kwargs, or register it in "
            "that module and pass 'module:EnvId'; or use backend 'serial' (env.backend=serial)."
        ) from error
