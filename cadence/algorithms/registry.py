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

A run remembers an algorithm registered from Python: `record_registration` writes its
import paths, and the folder its modules were imported from, to the run directory's
``algorithm.json``; `register_recorded` registers them again in another process
(``cadence eval``, ``cadence play``, a resume), importing only the modules that file
names, as the run recorded them. An algorithm defined in a script's ``__main__`` has no
import path another process could use: the run records none and warns.

A registered config class is an attrs class whose ``name`` field defaults to the
registered name; the builder is called as ``builder(config, observation_spec,
action_spec, network_config)`` and returns a `cadence.algorithms.Algorithm`.

What the rest of cadence needs to know of an algorithm before building it is declared in
its registration, as `AlgorithmCapabilities`, never probed from its objects:

- ``scheme``: ``"on_policy"`` (each unroll is cut into minibatches and dropped) or
  ``"off_policy"`` (experience goes to a replay buffer; the config must then have an
  ``off_policy`` field holding an `OffPolicyConfig`, which sets the replay). Left
  undeclared (None), the config decides: off-policy exactly when it has such a field.
- ``recurrent_network``: whether the algorithm's network may take a recurrent core
  (``network.recurrent``); the config check refuses one where this is False.
- ``previous_action``: whether the policy's acting steps read the action it gave at the
  previous step (a world model's belief update does): an export then feeds that action
  back, and folds no action wrapper into the policy, so the action stays in its units.
- ``agent_view``: whether the built algorithm offers its policy as an rlstructures agent
  (`Algorithm.as_agent`, an `cadence.algorithms.AlgorithmAgent`) for the
  `cadence.collect.Batcher`; where it is False, ``as_agent()`` fails naming the
  algorithms that declare one (`agent_view_algorithms`).

The one-line form, ``register_algorithm(name, config, builder)``, declares nothing and
gets the defaults: the scheme by the config, a recurrent core allowed (the builder gets
the network config and decides for itself), no previous action, no agent view.

>>> sorted(algorithm_names())[:3]
['a2c', 'ddpg', 'denoised_mdp']
>>> algorithm_config_class("ppo").__name__
'PPOConfig'
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

logger = logging.getLogger(__name__)

AlgorithmConfig = Any
"""The attrs config of a registered algorithm (its class is chosen by ``name``)."""

ENTRY_POINT_GROUP = "cadence.algorithms"

RECORD_FILE = "algorithm.json"
"""A run's record of an algorithm registered from Python (`record_registration`)."""

REGISTER_HINT = (
    "register yours in Python with cadence.algorithms.register_algorithm(NAME, "
    "'module:ConfigClass', 'module:make_algorithm') before training, or for the cadence "
    "command with a 'cadence.algorithms' entry point of an installed package "
    "(docs/adding-an-algorithm.md)"
)
"""How to make an unknown algorithm name known, for the messages that refuse one."""


Scheme = Literal["on_policy", "off_policy"]
"""How an algorithm trains: on each unroll once, or from a replay buffer."""

SCHEMES: tuple[str, ...] = ("on_policy", "off_policy")


@dataclasses.dataclass(frozen=True)
class AlgorithmCapabilities:
    """What an algorithm declares at registration (the module docstring says what each
    means); the defaults are those of the one-line `register_algorithm` form.

    Attributes:
        scheme: ``"on_policy"``, ``"off_policy"``, or None: by the config (off-policy
            exactly when it has an ``off_policy`` field holding an `OffPolicyConfig`).
        recurrent_network: its network may take a recurrent core (``network.recurrent``).
        previous_action: its acting steps read the action given at the previous step.
        agent_view: it offers its policy as an agent (`Algorithm.as_agent`).
    """

    scheme: Scheme | None = None
    recurrent_network: bool = True
    previous_action: bool = False
    agent_view: bool = False

    def __post_init__(self) -> None:
        if self.scheme is not None and self.scheme not in SCHEMES:
            raise ValueError(
                f"scheme={self.scheme!r} is not one of {', '.join(SCHEMES)}; or leave it "
                "None to let the config decide"
            )


class AlgorithmRegistration(NamedTuple):
    """An algorithm's config class and builder, each an object or an import path, and
    its declared capabilities.

    Attributes:
        config: the attrs config class, or ``"module:ClassName"``.
        builder: ``(config, observation_spec, action_spec, network_config) -> Algorithm``,
            or ``"module:function_name"``.
        capabilities: what it declares (`AlgorithmCapabilities`; the defaults if omitted).
    """

    config: type | str
    builder: Callable[..., Any] | str
    capabilities: AlgorithmCapabilities = AlgorithmCapabilities()


def _builtin(
    package: str, config: str, builder: str, capabilities: AlgorithmCapabilities
) -> AlgorithmRegistration:
    module = f"cadence.algorithms.{package}"
    return AlgorithmRegistration(
        f"{module}.config:{config}", f"{module}.build:{builder}", capabilities
    )


_ON_POLICY = AlgorithmCapabilities(scheme="on_policy", recurrent_network=True, agent_view=True)
_OFF_POLICY = AlgorithmCapabilities(scheme="off_policy", recurrent_network=False)
_SAC = dataclasses.replace(_OFF_POLICY, agent_view=True)
_MODEL_BASED = AlgorithmCapabilities(
    scheme="off_policy", recurrent_network=False, previous_action=True
)

BUILTIN_ALGORITHMS: dict[str, AlgorithmRegistration] = {
    "ppo": _builtin("ppo", "PPOConfig", "make_ppo", _ON_POLICY),
    "a2c": _builtin("a2c", "A2CConfig", "make_a2c", _ON_POLICY),
    "dqn": _builtin("dqn", "DQNConfig", "make_dqn", _OFF_POLICY),
    "sac": _builtin("sac", "SACConfig", "make_sac", _SAC),
    "td3": _builtin("td3", "TD3Config", "make_td3", _OFF_POLICY),
    "ddpg": _builtin("ddpg", "DDPGConfig", "make_ddpg", _OFF_POLICY),
    # The model-based family (cadence.mbrl): one builder, three sets of defaults; its
    # world model's belief update reads the previous action.
    **{
        name: AlgorithmRegistration(
            f"cadence.mbrl.config:{config}", "cadence.mbrl.build:make_model_based", _MODEL_BASED
        )
        for name, config in (
            ("dreamer", "DreamerConfig"),
            ("denoised_mdp", "DenoisedMDPConfig"),
            ("sac_latent", "SACLatentConfig"),
        )
    },
}
"""cadence's own algorithms."""

_registered: dict[str, AlgorithmRegistration] = {}


def register_algorithm(
    name: str,
    config: type | str,
    builder: Callable[..., Any] | str,
    *,
    scheme: Scheme | None = None,
    recurrent_network: bool = True,
    previous_action: bool = False,
    agent_view: bool = False,
) -> AlgorithmRegistration:
    """Registers algorithm ``name`` for this process (see the module docstring).

    Args:
        name: the value of ``algorithm.name`` that selects it (also ``algorithm=NAME``).
        config: its attrs config class, or an import path ``"module:ClassName"``.
        builder: its builder, or an import path ``"module:function_name"``.
        scheme: ``"on_policy"`` or ``"off_policy"``; None lets the config decide.
        recurrent_network: its network may take a recurrent core (``network.recurrent``).
        previous_action: its acting steps read the action given at the previous step.
        agent_view: its algorithm's ``as_agent()`` returns its policy as an agent.

    Raises:
        ValueError: ``name`` is one of cadence's own algorithms, or ``scheme`` is none of
            the two.
    """
    if name in BUILTIN_ALGORITHMS:
        raise ValueError(f"{name!r} is one of cadence's own algorithms; choose another name")
    capabilities = AlgorithmCapabilities(scheme, recurrent_network, previous_action, agent_view)
    registration = AlgorithmRegistration(config, builder, capabilities)
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
            if not isinstance(registration, tuple) or len(registration) not in (2, 3):
                raise TypeError(
                    f"entry point {entry.value!r} ({ENTRY_POINT_GROUP}: {name}) must name an "
                    f"AlgorithmRegistration(config, builder[, capabilities]), got "
                    f"{registration!r}"
                )
            return AlgorithmRegistration(*registration)
    raise KeyError(
        f"Unknown algorithm {name!r}; known: {', '.join(algorithm_names())}; {REGISTER_HINT}"
    )


def algorithm_config_class(name: str) -> type:
    """The config class of algorithm ``name`` (imported now)."""
    return _resolve(algorithm_registration(name).config)


def algorithm_builder(name: str) -> Callable[..., Any]:
    """The builder of algorithm ``name`` (imported now)."""
    return _resolve(algorithm_registration(name).builder)


def algorithm_capabilities(name: str) -> AlgorithmCapabilities:
    """What algorithm ``name`` declared at registration (importing none of its modules).

    >>> algorithm_capabilities("ppo").recurrent_network
    True
    """
    return algorithm_registration(name).capabilities


def agent_view_algorithms() -> list[str]:
    """The registered algorithms that declare an agent view (``agent_view``), in
    `algorithm_names` order.

    >>> agent_view_algorithms()[:3]
    ['ppo', 'a2c', 'sac']
    """
    return [name for name in algorithm_names() if algorithm_capabilities(name).agent_view]


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


def record_registration(run_dir: str | Path, name: str) -> None:
    """Writes the run's ``algorithm.json`` when ``name`` was registered with
    `register_algorithm` (cadence's own and entry points need no record): its config
    class's and builder's import paths, and the ``sys.path`` folder of each module, so
    that `register_recorded` finds them from any working directory.

    A part defined in the main script (``__main__``) has no import path that another
    process could use; nothing is recorded and a warning says how to make the run
    reopenable.
    """
    registration = _registered.get(name)
    if registration is None:
        return
    parts = {
        "config": _import_path(registration.config),
        "builder": _import_path(registration.builder),
    }
    if any(path.startswith("__main__:") for path in parts.values()):
        logger.warning(
            "algorithm %r is defined in the main script, which cadence eval, play and a "
            "resume from the cadence command cannot import; move it to a module beside the "
            "script and register it with import paths ('module:ConfigClass', "
            "'module:make_algorithm') to reopen this run",
            name,
        )
        return
    record = {"name": name, **parts}
    record["capabilities"] = dataclasses.asdict(registration.capabilities)
    record["sys_path"] = sorted({_import_root(path) for path in parts.values()} - {None})
    (Path(run_dir) / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")


def register_recorded(run_dir: str | Path) -> str | None:
    """Registers the algorithm a run recorded (`record_registration`), if any and not
    registered yet; returns its name.

    The recorded folders are appended to ``sys.path`` (installed packages come first) and
    nothing is imported until the config or builder is looked up, and then only the
    modules the record names.
    """
    path = Path(run_dir) / RECORD_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    name = record["name"]
    if name in algorithm_names():
        return name
    for folder in record.get("sys_path", []):
        if folder not in sys.path:
            sys.path.append(folder)
    logger.info(
        "algorithm %r is the run's own (%s): registering %s and %s as it recorded them",
        name, path, record["config"], record["builder"],
    )  # fmt: skip
    capabilities = record.get("capabilities", {})  # a record older than capabilities has none
    register_algorithm(name, record["config"], record["builder"], **capabilities)
    return name


def _import_path(target: Any) -> str:
    """``target`` as ``"module:qualname"`` (an import path is kept as it is)."""
    if isinstance(target, str):
        return target
    return f"{target.__module__}:{target.__qualname__}"


def _import_root(path: str) -> str | None:
    """The ``sys.path`` folder that the module of import path ``path`` was imported from
    (None for a module not imported from a file, or not imported at all)."""
    module_name = path.partition(":")[0]
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    file = getattr(module, "__file__", None)
    if file is None:
        return None
    root = Path(file).resolve().parent
    depth = module_name.count(".") + (Path(file).stem == "__init__")
    for _ in range(depth):
        root = root.parent
    return str(root)


def _resolve(target: Any) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"{target!r} is not an import path of the form 'module:attribute'")
    return getattr(importlib.import_module(module), attribute)


def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
