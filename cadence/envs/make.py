"""`make_env`: the whole environment stack from a name, a batch size and a seed."""

from __future__ import annotations

import copy
import difflib
import functools
import importlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import cloudpickle
import gymnasium as gym
import torch
from torch.torch_version import TorchVersion

from cadence.envs.environment import Environment, PyEnvironment
from cadence.envs.errors import EnvBuildError, UnknownEnvironmentError
from cadence.envs.gym_adapter import GymAdapter
from cadence.envs.mujoco_setup import is_mujoco_env, prepare_for_mujoco
from cadence.envs.time_limit import TimeLimit

Backend = Literal["serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto"]
BACKENDS = ("serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto")

# On a CPU a tensor-native env costs about the same per batch step at any batch size (a few
# dozen small torch ops), so it beats stepping Gymnasium envs one by one only in large
# batches: CartPole-v1 on 2 cores, serial is 2.5x faster at 8 envs and about even at 32
# (benchmarks/env_throughput.py). On an accelerator it always wins.
_TENSOR_MIN_CPU_ENVS = 32

# Packages that register a namespace of Gymnasium ids when imported, and how to install
# them: Gymnasium 1.x loads no plugins, so `check_env_id` imports the package of an id in
# one of these namespaces itself, and "ALE/Pong-v5" works as it is, in workers too.
_NAMESPACE_PACKAGES = {"ALE": ("ale_py", "pip install ale-py (or cadence's 'atari' extra)")}

# Packages that register ids when imported as the module of a "module:Id" name, and how to
# install them (with what else their envs need): e.g. sac_her_fetchreach's
# "gymnasium_robotics:FetchReach-v4".
_MODULE_PACKAGES = {
    "gymnasium_robotics": "pip install 'cadence[robotics]' (gymnasium-robotics and the MuJoCo "
    "version its Fetch envs work with)",
}

# What a `ParallelEnvironment` step costs beyond its envs' own work (seconds): signalling
# the workers, waiting for them to wake, copying the batch out of shared memory. Spreading
# the envs over the workers must save more than this for "auto" to pick it.
_PARALLEL_OVERHEAD_S = 100e-6


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
    (`_check_sendable_spec`).
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


def _check_sendable_spec(factory: GymEnvFactory) -> None:
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


def picks_tensor(
    name: str | Callable[..., gym.Env],
    num_envs: int,
    backend: Backend,
    device: Any = "cpu",
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
) -> bool:
    """Whether `make_env` builds cadence's tensor-native implementation of ``name`` for these
    arguments: asked for (``"tensor"``, or ``"prefer_tensor"`` where there is one), or
    picked by ``"auto"`` for an accelerator or a large batch."""
    from cadence.envs import tensor

    tensor_ok = isinstance(name, str) and tensor.has_tensor_env(name) and not gym_wrappers
    tensor_pays = num_envs >= _TENSOR_MIN_CPU_ENVS or torch.device(device).type != "cpu"
    if backend == "prefer_tensor":
        return tensor_ok
    return backend == "tensor" or (backend == "auto" and tensor_ok and tensor_pays)


def picks_vector(
    name: str | Callable[..., gym.Env],
    backend: Backend,
    device: Any = "cpu",
    gym_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
) -> bool:
    """Whether `make_env` steps ``name`` as one Gymnasium vector env (`VectorEnvironment`),
    unless `picks_tensor` (checked first): asked for (``"vector"``), or picked by ``"auto"``
    (and by ``"prefer_tensor"``, which is ``"auto"`` where `picks_tensor` declined) for an id
    registered with a ``vector_entry_point`` and no ``gym_wrappers``, on a CPU or where the
    id has no single-env ``entry_point`` at all.

    A vector env steps its batch in one call: CartPole-v1's NumPy one steps 32 envs about
    4x faster than a serial batch (benchmarks/env_throughput.py), and a user registers
    theirs to be fast. Where cadence has a tensor-native env that `picks_tensor` takes
    (large batches, accelerators), that one runs in the collector's compiled unroll, faster
    still.

    The choice depends on the id alone, never on a measurement or the batch size, though a
    few CartPoles step faster one by one (at 1-4 envs a step of Gymnasium's vector CartPole
    costs 2-3x a serial batch's; it pays from about 8): an id's vector env need not be its
    single env (ALE's has the frame preprocessing built in), so training, evaluation and
    `play`, whatever their batch sizes and on any machine, must all get the same one."""
    if backend == "vector":
        return True
    if backend not in ("auto", "prefer_tensor") or gym_wrappers or not has_vector_env(name):
        return False
    return torch.device(device).type == "cpu" or is_vector_only(name)


def has_vector_env(name: str | Callable[..., gym.Env]) -> bool:
    """Whether ``name`` is a Gymnasium id registered with a ``vector_entry_point``."""
    spec = _registered_spec(name)
    return spec is not None and spec.vector_entry_point is not None


def is_vector_only(name: str | Callable[..., gym.Env]) -> bool:
    """Whether ``name`` is an id registered with a ``vector_entry_point`` and no single-env
    ``entry_point``: every back end but ``"vector"`` would fail to build it."""
    spec = _registered_spec(name)
    return spec is not None and spec.vector_entry_point is not None and spec.entry_point is None


def refuse_vector_only(name: str | Callable[..., gym.Env]) -> None:
    """Raises ValueError for an id `is_vector_only`, where its envs would be built one by
    one (the serial, thread and parallel back ends; a `Batcher`'s `make_gym_env`)."""
    if is_vector_only(name):
        raise ValueError(
            f"{name!r} is registered as a vector env alone (a vector_entry_point, no "
            "entry_point), which cannot be built one env at a time (the serial, thread and "
            "parallel back ends, a Batcher's envs); use env.backend 'vector' or 'auto' "
            "(from Python, make_env(..., backend='vector'))"
        )


def _registered_spec(name: str | Callable[..., gym.Env]) -> gym.envs.registration.EnvSpec | None:
    if not isinstance(name, str):
        return None
    check_env_id(name)
    return gym.registry.get(_bare_id(name))


def _bare_id(name: str) -> str:
    """The registered id of ``name``: ``Id`` for ``"module:Id"``."""
    return name.partition(":")[2] if ":" in name else name


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
            _bare_id(name),
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
            `_recorded_step_cost`).
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

    Raises:
        UnknownEnvironmentError: ``name`` is not a registered id (close ids are suggested).
        EnvBuildError: the module of a ``"module:Id"`` name does not import.
        ValueError: an unknown ``backend``, ``"tensor"`` for an env without a
            tensor-native implementation, or ``"vector"`` for one without a vector env
            or with ``gym_wrappers``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if isinstance(name, str):
        check_env_id(name)
    from cadence.envs import tensor

    if picks_tensor(name, num_envs, backend, device, gym_wrappers):
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
    if backend == "prefer_tensor":
        backend = "auto"  # which, for a Gymnasium env, picks vector, serial or parallel
    if picks_vector(name, backend, device, gym_wrappers):
        if gym_wrappers:
            raise ValueError(
                "env.backend='vector' steps a Gymnasium vector env, which cannot apply "
                "Gymnasium wrappers (env.wrappers, action_repeat > 1); use 'auto', 'serial' "
                "or 'parallel'"
            )
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
        backend = _pick_cpu_backend(factories[0], num_envs, num_workers)
    if backend == "serial":
        from cadence.envs.serial import SerialEnvironment

        return SerialEnvironment(factories, device=device)
    if backend == "thread":
        from cadence.envs.thread import ThreadEnvironment

        return ThreadEnvironment(factories, device=device)
    from cadence.envs.parallel import ParallelEnvironment

    _check_sendable_spec(factories[0])
    return ParallelEnvironment(
        factories,
        num_workers=num_workers,
        device=device,
        max_worker_restarts=max_worker_restarts,
        spin_us=spin_us,
        pin_workers=pin_workers,
        step_timeout_s=step_timeout_s,
        build_timeout_s=build_timeout_s,
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
        raise EnvBuildError(_build_failure(label, error)) from error


def _build_failure(label: str, error: Exception) -> str:
    if isinstance(error, gym.error.DependencyNotInstalled):
        return f"Environment {label!r} needs a package that is not installed: {error}"
    message = f"Environment {label!r} could not be built: {type(error).__name__}: {error}"
    if isinstance(error, AssertionError) and _robotics_on_a_newer_mujoco(error):
        message += (
            " Gymnasium-Robotics 1.4 fails this assertion on MuJoCo 3.12 or later (its Fetch "
            "envs compare MuJoCo enums with numpy integers). Run pip install 'mujoco<3.12', "
            "as cadence's robotics extra does."
        )
    return message


def _robotics_on_a_newer_mujoco(error: AssertionError) -> bool:
    """Whether ``error`` was raised inside Gymnasium-Robotics while MuJoCo is 3.12 or later."""
    last = error.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    module = last.tb_frame.f_globals.get("__name__", "") if last is not None else ""
    mujoco = sys.modules.get("mujoco")
    if not module.startswith("gymnasium_robotics.") or mujoco is None:
        return False
    return TorchVersion(mujoco.__version__) >= (3, 12)  # packaging's rules, as torch's own


def check_env_id(name: str) -> None:
    """Raises `UnknownEnvironmentError` naming ``name`` and the closest registered ids.

    For ``"module:Id"`` the module is imported first (it registers ``Id``).

    Raises:
        UnknownEnvironmentError: ``name`` (or its ``Id``) is not registered.
        EnvBuildError: the module of a ``"module:Id"`` does not import.
    """
    if ":" in name:
        module, _, env_id = name.partition(":")
        _import_env_module(module, name)
        name = env_id
    if name in gym.registry:
        return
    _import_namespace_package(name)
    if name in gym.registry:
        return
    from cadence.envs import suites  # noqa: F401 - registers cadence's own envs

    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownEnvironmentError(
        f"Unknown environment id {name!r}.{hint} (Ids come from gymnasium.registry; "
        "import the package that registers yours, or pass 'module:EnvId'.)"
    )


def _import_namespace_package(name: str) -> None:
    """Imports the package that registers ``name``'s namespace (`_NAMESPACE_PACKAGES`), if
    it is one of those.

    Raises:
        UnknownEnvironmentError: that package is not installed (the message says how to).
    """
    namespace, slash, _ = name.partition("/")
    if not slash or namespace not in _NAMESPACE_PACKAGES:
        return
    module, install = _NAMESPACE_PACKAGES[namespace]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise UnknownEnvironmentError(
            f"Environment {name!r} is registered by the package {module!r}, which cannot "
            f"be imported ({error}): {install}."
        ) from error


def _import_env_module(module: str, name: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        install = _MODULE_PACKAGES.get(module.partition(".")[0])
        if install is None:
            raise _unimportable_env_module(module, name, error) from error
        raise EnvBuildError(
            f"Environment {name!r} is registered by the package {module!r}, which cannot be "
            f"imported ({error}): {install}."
        ) from error
    except Exception as error:  # noqa: BLE001 - a module may raise anything on import
        raise _unimportable_env_module(module, name, error) from error


def _unimportable_env_module(module: str, name: str, error: Exception) -> EnvBuildError:
    return EnvBuildError(
        f"Environment {name!r}: its module {module!r} cannot be imported "
        f"({type(error).__name__}: {error}); it must be an installed package or a "
        "module in the working directory."
    )


def _pick_cpu_backend(
    factory: GymEnvFactory, num_envs: int, num_workers: int | None = None
) -> Backend:
    """Picks "parallel" where spreading the batch over worker processes saves more than it
    costs, by the env's step cost on this machine (`_recorded_step_cost`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(num_workers or cores or 1, num_envs)
    if workers < 2:
        return "serial"
    saved = num_envs * _recorded_step_cost(factory) * (1 - 1 / workers)
    return "parallel" if saved > _PARALLEL_OVERHEAD_S else "serial"


STEP_COST_RECORD = "env_step_cost.json"
"""Envs' step costs (`_step_cost`) by machine and env, in the compile cache folder."""


def _recorded_step_cost(factory: GymEnvFactory) -> float:
    """The env's step cost as first measured on this machine (`cadence.machine_record`), or
    measured now for an env that has no name across processes (a lambda, a function
    defined in another, keyword arguments without a stable ``repr``).

    The choice it decides, "parallel" or "serial", also decides a run's numbers: workers
    get the cores, and the learner trains on fewer torch threads, whose multiplies round
    differently. Hopper's steps cost 80-100 us here, where 2 envs' choice turns: measured
    in every run, two runs of one seed and config took each side by the machine's load
    and ended apart.
    """
    from cadence.machine_record import machine_key, recorded

    label = _env_label(factory)
    if label is None:
        return _step_cost(factory)
    return recorded(
        STEP_COST_RECORD, f"{machine_key()} gymnasium {gym.__version__} {label}",
        lambda: _step_cost(factory),
        usable=lambda cost: isinstance(cost, float),
    )  # fmt: skip


def _env_label(factory: GymEnvFactory) -> str | None:
    """The env as the step-cost record keys it: its id or its callable's qualified name, its
    Gymnasium wrappers' and its keyword arguments; None where one has no stable name."""
    parts = [factory.name if isinstance(factory.name, str) else _qualified_name(factory.name)]
    parts += [_qualified_name(wrapper) for wrapper in factory.gym_wrappers]
    if factory.env_kwargs:
        parts.append(repr(sorted(factory.env_kwargs.items())))
    if any(part is None or " at 0x" in part for part in parts):
        return None
    return " ".join(parts)


def _qualified_name(function: Callable[..., Any]) -> str | None:
    """``module.qualname`` (a script's file for ``__main__``), with a ``functools.partial``'s
    arguments (a wrapper from the config's ``env.wrappers``); None for a lambda, a function
    defined in another, or a notebook's."""
    if isinstance(function, functools.partial):
        name = _qualified_name(function.func)
        arguments = repr((function.args, sorted(function.keywords.items())))
        return None if name is None else f"{name}{arguments}"
    qualname = getattr(function, "__qualname__", None)
    if qualname is None or "<" in qualname:
        return None
    module = getattr(function, "__module__", None)
    if module == "__main__":  # a script's: named by its file (a notebook's have none)
        module = getattr(sys.modules["__main__"], "__file__", None)
    return None if module is None else f"{module}.{qualname}"


def _step_cost(factory: GymEnvFactory, num_steps: int = 50, warm_up: int = 5) -> float:
    """CPU seconds per step of one env, measured on a throwaway instance.

    CPU time rather than wall time, so that other busy processes do not make the
    env look expensive; the first steps (Gymnasium's env checker) are not timed.
    """
    env = factory.make_gym()
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(num_steps + warm_up)]
        for i, action in enumerate(actions):
            if i == warm_up:
                start = time.thread_time()
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return (time.thread_time() - start) / num_steps
    finally:
        env.close()
