"""Choosing a back end: tensor-native, vector, serial or parallel, by the env, the batch and
the env's step cost on this machine."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import torch

from cadence.envs.ids import registered_spec

if TYPE_CHECKING:
    from cadence.envs.gym_factory import GymEnvFactory

Backend = Literal["serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto"]
BACKENDS = ("serial", "thread", "parallel", "vector", "tensor", "prefer_tensor", "auto")

# On a CPU a tensor-native env costs about the same per batch step at any batch size (a few
# dozen small torch ops), so it beats stepping Gymnasium envs one by one only in large
# batches: CartPole-v1 on 2 cores, serial is 2.5x faster at 8 envs and about even at 32
# (benchmarks/env_throughput.py). On an accelerator it always wins.
_TENSOR_MIN_CPU_ENVS = 32


# What a `ParallelEnvironment` step costs beyond its envs' own work (seconds): signalling
# the workers, waiting for them to wake, copying the batch out of shared memory. Spreading
# the envs over the workers must save more than this for "auto" to pick it.
_PARALLEL_OVERHEAD_S = 100e-6


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
    spec = registered_spec(name)
    return spec is not None and spec.vector_entry_point is not None


def is_vector_only(name: str | Callable[..., gym.Env]) -> bool:
    """Whether ``name`` is an id registered with a ``vector_entry_point`` and no single-env
    ``entry_point``: every back end but ``"vector"`` would fail to build it."""
    spec = registered_spec(name)
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


def check_async_batch(
    backend: Backend, num_envs: int, async_batch_size: int | None, reproducible: bool
) -> Backend:
    """The back end for an asynchronous batch (``async_batch_size`` below ``num_envs``):
    "parallel", the one back end that steps so; ``backend`` unchanged for a lockstep one.

    "auto" never picks it for a run that promises same-seed reproducibility: which envs
    come back together depends on timing and is not recorded.

    Raises:
        ValueError: another back end is asked for, or "auto" in a ``reproducible`` run.
    """
    if async_batch_size is None or async_batch_size >= num_envs:
        return backend
    if backend == "parallel":
        return backend
    if backend not in ("auto", "prefer_tensor"):
        raise ValueError(
            f"env.async_batch_size={async_batch_size} steps the 'parallel' back end "
            f"asynchronously; env.backend={backend!r} cannot: use backend 'parallel' (or "
            "leave async_batch_size unset)"
        )
    if reproducible:
        raise ValueError(
            f"env.async_batch_size={async_batch_size} with env.backend={backend!r} in a run "
            "that promises same-seed results (trainer.deterministic=true): the order in "
            "which envs come back depends on timing and is not recorded, so 'auto' does not "
            "pick asynchronous stepping; set trainer.deterministic=false, or env.backend="
            "'parallel' to accept it"
        )
    return "parallel"


def pick_cpu_backend(
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
