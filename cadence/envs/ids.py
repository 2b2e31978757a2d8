"""Env ids: checking that one is registered, importing the package that registers it, and
install hints for what is missing."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable

import gymnasium as gym
from torch.torch_version import TorchVersion

from cadence.envs.errors import EnvBuildError, UnknownEnvironmentError

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


def build_failure(label: str, error: Exception) -> str:
    """What `check_env` reports for env ``label`` that raised ``error`` while built or reset:
    the missing package, or the error with an install hint where one is known."""
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


def registered_spec(name: str | Callable[..., gym.Env]) -> gym.envs.registration.EnvSpec | None:
    """The registration of id ``name`` (``Id`` for ``"module:Id"``), checked with
    `check_env_id`; None for a callable."""
    if not isinstance(name, str):
        return None
    check_env_id(name)
    return gym.registry.get(bare_id(name))


def bare_id(name: str) -> str:
    """The registered id of ``name``: ``Id`` for ``"module:Id"``."""
    return name.partition(":")[2] if ":" in name else name
