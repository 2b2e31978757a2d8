"""The algorithm registry: each algorithm is one registration, its config class and builder.

A registration names both by import path (``"package.module:attribute"``), so reading
the registry imports nothing: ``cadence list`` and ``cadence train NAME --help`` never
import torch, and an algorithm's modules load only when a config names it.

Three places register algorithms, looked up in this order:

1. `BUILTIN_ALGORITHMS`, cadence's own (below);
2. `register_algorithm`, from Python (a script, a notebook, a test);
3. the ``cadence.algorithms`` entry-point group of installed packages, so the ``cadence``
   command finds a user's algorithm with no code of cadence changed::

       # pyproject.toml of the user's package
       [project.entry-points."cadence.algorithms"]
       my_pg = "my_package.my_pg:REGISTRATION"   # an AlgorithmRegistration

A registered config class is an attrs class whose ``name`` field defaults to the
registered name; the builder is called as ``builder(config, observation_spec,
action_spec, network_config)`` and returns a `cadence.algorithms.Algorithm`. A config
with an ``off_policy`` field (an `OffPolicyConfig`) trains with the off-policy scheme,
any other with the on-policy one.

>>> sorted(algorithm_names())[:3]
['a2c', 'ddpg', 'dqn']
>>> algorithm_config_class("ppo").__name__
'PPOConfig'
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

AlgorithmConfig = Any
"""The attrs config of a registered algorithm (its class is chosen by ``name``)."""

ENTRY_POINT_GROUP = "cadence.algorithms"


class AlgorithmRegistration(NamedTuple):
    """An algorithm's config class and builder, each an object or an import path.

    Attributes:
        config: the attrs config class, or ``"module:ClassName"``.
        builder: ``(config, observation_spec, action_spec, network_config) -> Algorithm``,
            or ``"module:function_name"``.
    """

    config: type | str
    builder: Callable[..., Any] | str


def _builtin(package: str, config: str, builder: str) -> AlgorithmRegistration:
    module = f"cadence.algorithms.{package}"
    return AlgorithmRegistration(f"{module}.config:{config}", f"{module}.build:{builder}")


BUILTIN_ALGORITHMS: dict[str, AlgorithmRegistration] = {
    "ppo": _builtin("ppo", "PPOConfig", "make_ppo"),
    "a2c": _builtin("a2c", "A2CConfig", "make_a2c"),
    "dqn": _builtin("dqn", "DQNConfig", "make_dqn"),
    "sac": _builtin("sac", "SACConfig", "make_sac"),
    "td3": _builtin("td3", "TD3Config", "make_td3"),
    "ddpg": _builtin("ddpg", "DDPGConfig", "make_ddpg"),
    # The model-based family (cadence.mbrl): one builder, three sets of defaults.
    **{
        name: AlgorithmRegistration(
            f"cadence.mbrl.config:{config}", "cadence.mbrl.build:make_model_based"
        )
        for name, config in (
            ("dreamer", "DreamerConfig"),
            ("denoised_mdp", "DenoisedMDPConfig"),
            ("sac_latent", "SACLatentConfig"),
        )
    },
}
"""cadence's own algorithms."""

RECURRENT_NETWORK_ALGORITHMS = frozenset({"ppo", "a2c"})
"""Those of cadence's own algorithms whose networks take a recurrent core
(``network.recurrent``); the config refuses one for the others. An algorithm registered
from outside gets the network config and decides for itself."""

_registered: dict[str, AlgorithmRegistration] = {}


def register_algorithm(
    name: str, config: type | str, builder: Callable[..., Any] | str
) -> AlgorithmRegistration:
    """Registers algorithm ``name`` for this process (see the module docstring).

    Args:
        name: the value of ``algorithm.name`` that selects it (also ``algorithm=NAME``).
        config: its attrs config class, or an import path ``"module:ClassName"``.
        builder: its builder, or an import path ``"module:function_name"``.

    Raises:
        ValueError: ``name`` is one of cadence's own algorithms.
    """
    if name in BUILTIN_ALGORITHMS:
        raise ValueError(f"{name!r} is one of cadence's own algorithms; choose another name")
    registration = AlgorithmRegistration(config, builder)
    _registered[name] = registration
    return registration


def unregister_algorithm(name: str) -> None:
    """Removes a registration made with `register_algorithm` (tests use it to clean up)."""
    _registered.pop(name, None)


def algorithm_names() -> list[str]:
    """Every registered name, cadence's own first; importing no algorithm."""
    names = [*BUILTIN_ALGORITHMS, *_registered]
    names += [entry.name for entry in _entry_points() if entry.name not in names]
    return names


def algorithm_registration(name: str) -> AlgorithmRegistration:
    """The registration of ``name``.

    Raises:
        KeyError: no algorithm of that name (the message lists the known ones).
    """
    if name in BUILTIN_ALGORITHMS:
        return BUILTIN_ALGORITHMS[name]
    if name in _registered:
        return _registered[name]
    for entry in _entry_points():
        if entry.name == name:
            registration = entry.load()
            if not isinstance(registration, tuple) or len(registration) != 2:
                raise TypeError(
                    f"entry point {entry.value!r} ({ENTRY_POINT_GROUP}: {name}) must name an "
                    f"AlgorithmRegistration(config, builder), got {registration!r}"
                )
            return AlgorithmRegistration(*registration)
    raise KeyError(f"Unknown algorithm {name!r}; known: {', '.join(algorithm_names())}")


def algorithm_config_class(name: str) -> type:
    """The config class of algorithm ``name`` (imported now)."""
    return _resolve(algorithm_registration(name).config)


def algorithm_builder(name: str) -> Callable[..., Any]:
    """The builder of algorithm ``name`` (imported now)."""
    return _resolve(algorithm_registration(name).builder)


class AlgorithmConfigClasses(Mapping[str, type]):
    """Name -> config class of every registered algorithm, each imported when looked up.

    The ``algorithm`` section of the experiment config is chosen through it.
    """

    def __getitem__(self, name: str) -> type:
        try:
            return algorithm_config_class(name)
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in algorithm_names()

    def __iter__(self) -> Iterator[str]:
        return iter(algorithm_names())

    def __len__(self) -> int:
        return len(algorithm_names())


def _resolve(target: Any) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"{target!r} is not an import path of the form 'module:attribute'")
    return getattr(importlib.import_module(module), attribute)


def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
