"""`make_env`: the whole environment stack from a name, a batch size and a seed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from cadence.envs.backend_choice import (
    BACKENDS,
    Backend,
    check_async_batch,
    has_vector_env,
    pick_cpu_backend,
    picks_tensor,
    picks_vector,
    refuse_vector_only,
)
from cadence.envs.environment import Environment
from cadence.envs.errors import EnvBuildError
from cadence.envs.gym_factory import GymEnvFactory, check_sendable_spec
from cadence.envs.ids import bare_id, build_failure, check_env_id

__all__ = [
    "BACKENDS",
    "Backend",
    "GymEnvFactory",
    "check_env",
    "check_env_id",
    "has_vector_env",
    "make_env",
    "make_vector_env",
    "picks_tensor",
    "picks_vector",
    "refuse_vector_only",
]


def make_vector_env(
    name: str | Callable[..., gym.vector.VectorEnv],
    num_envs: int,
    seed: int,
    *,
    device: Any = "cpu",
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    env_info_keys: list[str] | None = None,
) -> Environment:
    """``name``'s vector env of ``num_envs`` envs as a `VectorEnvironment`.

    ``name`` is an id registered with a ``vector_entry_point`` (built with
    ``gymnasium.make_vec``) or a callable taking ``num_envs`` and ``env_kwargs`` that
    returns a ``gymnasium.vector.VectorEnv``. ``max_episode_steps``, when set, is passed
    to the vector env's constructor, as ``gymnasium.make_vec`` passes the registered limit.

    Raises:
        ValueError: ``name`` is an id without a ``vector_entry_point``.
    """
    from cadence.envs.vector import VectorEnvironment

    kwargs = dict(env_kwargs or {})
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    if callable(name):
        build = functools.partial(name, num_envs=num_envs, **kwargs)
    elif has_vector_env(name):
        build = functools.partial(
            gym.make_vec,
            bare_id(name),
            num_envs,
            vectorization_mode="vector_entry_point",
            **kwargs,
        )
    else:
        raise ValueError(
            f"env.backend='vector' steps a Gymnasium vector env, and {name!r} is not "
            "registered with a vector_entry_point; use 'auto', 'serial' or 'parallel' "
            "(they step its envs one by one)"
        )
    return VectorEnvironment(build, seed, device, env_info_keys)


def make_env(
    name: str | Callable[..., gym.Env],
    num_envs: int = 1,
    backend: Backend = "auto",
    seed: int = 0,
    *,
    device: Any = "cpu",
    max_episode_steps: int | None = None,
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    env_kwargs: dict[str, Any] | None = None,
    env_info_keys: list[str] | None = None,
    num_workers: int | None = None,
    max_worker_restarts: int = 3,
    spin_us: float = 1000.0,
    pin_workers: bool | None = None,
    step_timeout_s: float | None = 60.0,
    build_timeout_s: float | None = 300.0,
    async_batch_size: int | None = None,
    reproducible: bool = True,
) -> Environment:
    """Builds a batch of ``num_envs`` environments; environment ``i`` is seeded ``seed + i``.

    Args:
        name: a Gymnasium id (``"CartPole-v1"``, ``"Hopper-v5"``, ``"module:Id"``) or a
            callable returning a ``gymnasium.Env`` (the user's own class).
        num_envs: the batch size.
        backend: ``"serial"`` (in-process), ``"thread"`` (one env thread),
            ``"parallel"`` (worker processes on shared memory), ``"vector"`` (a Gymnasium
            vector env stepping the whole batch in one call: `make_vector_env`), ``"tensor"``
            (cadence's tensor-native implementation of ``name``), ``"prefer_tensor"``
            (``"tensor"`` where cadence has a tensor-native ``name`` and there are no
            ``gym_wrappers``, else what ``"auto"`` picks for a Gymnasium env: vector,
            serial or parallel; which one it is depends on ``name`` and the wrappers alone, so a
            resumed run gets the kind it started with), or ``"auto"`` (the fastest for
            this env and machine: on a CPU the id's vector env where it has one
            (`picks_vector`); tensor-native on an accelerator or for large batches; else
            serial or parallel by the env's step cost, measured once per machine:
            `pick_cpu_backend`).
        seed: the batch's seed.
        device: where time steps are delivered (and tensor-native envs run).
        max_episode_steps: an episode limit applied with cadence's `TimeLimit`.
        gym_wrappers: Gymnasium wrappers applied in order to each env.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        env_info_keys: the numeric ``info`` keys to report (default: probed).
        num_workers: worker processes for ``"parallel"`` (default: one per core).
        max_worker_restarts: how often a ``"parallel"`` worker that dies is restarted
            (within `ParallelEnvironment`'s window) before the error is raised; 0 never.
        spin_us: how long ``"parallel"``'s parent and workers poll shared memory for
            each other before sleeping (see `ParallelEnvironment`); 0 always sleeps.
        pin_workers: whether ``"parallel"`` pins each worker to a core of its own
            (``None``: when there is one worker per core; see `ParallelEnvironment`).
        step_timeout_s: how long a ``"parallel"`` worker may take to answer a step or
            reset before it counts as hung and is killed and restarted like a dead one
            (``None``: wait for ever).
        build_timeout_s: how long ``"parallel"`` workers may take to build their envs
            before that is an error (``None``: wait for ever).
        async_batch_size: step ``"parallel"`` asynchronously, returning this many envs
            per step (`cadence.envs.async_batch`); ``"auto"`` takes it only where not
            ``reproducible`` (`check_async_batch`).
        reproducible: whether the caller promises same-seed results.

    Raises:
        UnknownEnvironmentError: ``name`` is not a registered id (close ids are suggested).
        EnvBuildError: the module of a ``"module:Id"`` name does not import.
        ValueError: an unknown ``backend``, ``"tensor"`` for an env without a
            tensor-native implementation, or ``"vector"`` for one without a vector env
            or with ``gym_wrappers``.
    """
    _check_arguments(name, num_envs, backend)
    backend = check_async_batch(backend, num_envs, async_batch_size, reproducible)
    if picks_tensor(name, num_envs, backend, device, gym_wrappers):
        return _make_tensor_env(
            name, num_envs, seed, device, max_episode_steps, gym_wrappers, env_kwargs
        )
    if backend == "prefer_tensor":
        backend = "auto"  # which, for a Gymnasium env, picks vector, serial or parallel
    if picks_vector(name, backend, device, gym_wrappers):
        _refuse_vector_wrappers(gym_wrappers)
        return make_vector_env(
            name,
            num_envs,
            seed,
            device=device,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
            env_info_keys=env_info_keys,
        )
    refuse_vector_only(name)  # before any worker starts
    factories = [
        GymEnvFactory(name, i, seed, max_episode_steps, gym_wrappers, env_kwargs, env_info_keys)
        for i in range(num_envs)
    ]
    if backend == "auto":
        backend = pick_cpu_backend(factories[0], num_envs, num_workers)
    return _gym_env_batch(
        factories,
        backend,
        device,
        num_workers=num_workers,
        max_worker_restarts=max_worker_restarts,
        spin_us=spin_us,
        pin_workers=pin_workers,
        step_timeout_s=step_timeout_s,
        build_timeout_s=build_timeout_s,
        async_batch_size=async_batch_size,
    )


def _check_arguments(name: str | Callable[..., gym.Env], num_envs: int, backend: Backend) -> None:
    """Raises ValueError for a batch size or back end `make_env` cannot build, and
    `check_env_id`'s errors for an id that is not registered."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if isinstance(name, str):
        check_env_id(name)


def _make_tensor_env(
    name: str | Callable[..., gym.Env],
    num_envs: int,
    seed: int,
    device: Any,
    max_episode_steps: int | None,
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]],
    env_kwargs: dict[str, Any] | None,
) -> Environment:
    """Cadence's tensor-native implementation of ``name``; ValueError, saying what there is,
    where it has none or ``gym_wrappers`` are given."""
    from cadence.envs import tensor

    tensor_ok = isinstance(name, str) and tensor.has_tensor_env(name) and not gym_wrappers
    if not tensor_ok:
        raise ValueError(tensor.no_tensor_env_message(name, bool(gym_wrappers)))
    return tensor.make_tensor_env(
        name,
        num_envs,
        seed=seed,
        device=device,
        max_episode_steps=max_episode_steps,
        **(env_kwargs or {}),
    )


def _refuse_vector_wrappers(gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]]) -> None:
    """Raises ValueError where a Gymnasium vector env would have to apply ``gym_wrappers``."""
    if gym_wrappers:
        raise ValueError(
            "env.backend='vector' steps a Gymnasium vector env, which cannot apply "
            "Gymnasium wrappers (env.wrappers, action_repeat > 1); use 'auto', 'serial' "
            "or 'parallel'"
        )


def _gym_env_batch(
    factories: list[GymEnvFactory],
    backend: Backend,
    device: Any,
    *,
    num_workers: int | None,
    max_worker_restarts: int,
    spin_us: float,
    pin_workers: bool | None,
    step_timeout_s: float | None,
    build_timeout_s: float | None,
    async_batch_size: int | None = None,
) -> Environment:
    """The batch of ``factories``' envs on back end ``backend``: "serial", "thread" or
    (anything else) "parallel", whose options are `make_env`'s."""
    if backend == "serial":
        from cadence.envs.serial import SerialEnvironment

        return SerialEnvironment(factories, device=device)
    if backend == "thread":
        from cadence.envs.thread import ThreadEnvironment

        return ThreadEnvironment(factories, device=device)
    from cadence.envs.parallel import ParallelEnvironment

    check_sendable_spec(factories[0])
    return ParallelEnvironment(
        factories,
        num_workers=num_workers,
        device=device,
        max_worker_restarts=max_worker_restarts,
        spin_us=spin_us,
        pin_workers=pin_workers,
        step_timeout_s=step_timeout_s,
        build_timeout_s=build_timeout_s,
        async_batch_size=async_batch_size,
    )


def check_env(
    name: str | Callable[..., gym.Env],
    backend: Backend = "auto",
    *,
    max_episode_steps: int | None = None,
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    env_kwargs: dict[str, Any] | None = None,
) -> None:
    """Builds and resets one env as `make_env` would, then closes it: a check to run before
    anything of an experiment is written.

    A Gymnasium env is built in this process (``"serial"``, or ``"vector"`` for its vector
    env) whatever ``backend`` says, so that its error is its own rather than a worker's report.

    Raises:
        EnvBuildError: the id is unknown (`UnknownEnvironmentError`, close ids suggested),
            a ``"module:Id"``'s module does not import, an optional dependency is missing
            (Gymnasium's install hint is kept), the env raised while built or reset, or
            ``"tensor"`` (``"vector"``) names an env without a tensor-native (vector)
            implementation.
    """
    label = name if isinstance(name, str) else getattr(name, "__name__", repr(name))
    if isinstance(name, str):
        check_env_id(name)
    if backend not in ("tensor", "prefer_tensor"):
        backend = "vector" if picks_vector(name, backend, gym_wrappers=gym_wrappers) else "serial"
    from cadence.envs import tensor

    if backend == "tensor" and not (isinstance(name, str) and tensor.has_tensor_env(name)):
        raise EnvBuildError(tensor.no_tensor_env_message(label))
    try:
        env = make_env(
            name,
            1,
            backend,
            max_episode_steps=max_episode_steps,
            gym_wrappers=gym_wrappers,
            env_kwargs=env_kwargs,
        )
        try:
            env.reset()
        finally:
            env.close()
    except EnvBuildError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever an env raises, it cannot be built
        raise EnvBuildError(build_failure(label, error)) from error
