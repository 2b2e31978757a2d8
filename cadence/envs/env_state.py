"""Loading a pickled Gymnasium env's state without running code that the state names.

`GymAdapter.get_state` pickles the whole env: the one way that captures any env's
state. A plain ``pickle.loads`` of it would call whatever the bytes name, and the
state travels in checkpoints, which load without running code (DESIGN §8). So
`loads_env_state` resolves only:

- plain data: numpy arrays, scalars, dtypes and random generators, and a few
  builtin containers;
- the classes of the env being restored: those of its wrappers and of the env
  itself, with every class their modules define (an env's helper classes), found in
  modules this process has already imported (the env was built from the config:
  no module is imported because a state names it);
- Gymnasium's spaces and env specs.

Anything else (``os.system``, ``builtins.eval``, another module's class) is refused
with an error naming it. A class may still be constructed with arguments the
state chooses: that runs the env's own code, as building it from the config does.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

import gymnasium as gym

from cadence.envs.errors import EnvStateMismatchError

# Module-level objects a state may use, by (module, name): numpy's reconstructors.
_PLAIN_DATA = frozenset(
    [
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        *(
            (module, name)
            for module in ("numpy._core.multiarray", "numpy.core.multiarray")
            for name in ("_reconstruct", "scalar")
        ),
        *(
            ("numpy.random._pickle", name)
            for name in ("__bit_generator_ctor", "__generator_ctor", "__randomstate_ctor")
        ),
        ("numpy.random.bit_generator", "SeedSequence"),
        ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._pcg64", "PCG64DXSM"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._philox", "Philox"),
        ("numpy.random._sfc64", "SFC64"),
        ("numpy.random.mtrand", "RandomState"),
        ("collections", "OrderedDict"),
        ("collections", "deque"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "slice"),
        ("builtins", "complex"),
        ("builtins", "range"),
        ("builtins", "bytearray"),
        ("builtins", "object"),
        ("copyreg", "_reconstructor"),
        ("gymnasium.envs.registration", "EnvSpec"),
    ]
)
# Modules whose classes are every env's (and far more): never allowed wholesale.
_SHARED_MODULES = frozenset(["builtins", "abc", "typing", "typing_extensions"])


class UnsavableEnvStateError(TypeError):
    """An env's state cannot be saved (it does not pickle, or would come back fresh).

    Expected of some envs (Box2D's, which pickle as their constructor's arguments),
    so reported as one line naming the env, without a traceback: a checkpoint then
    holds no env state, and a run resumed from it starts new episodes.
    """


class UnsafeEnvStateError(pickle.UnpicklingError):
    """An env state names something that is neither plain data nor a class of the env."""


def loads_env_state(data: bytes, env: gym.Env) -> Any:
    """Unpickles ``data`` (a `GymAdapter` state) for ``env``, built from the same config.

    Raises:
        UnsafeEnvStateError: the state names a function or class it may not use.
        EnvStateMismatchError: ``data`` is not a pickled state (it was saved by a
            tensor-native env, or by an env stack of other layers).
    """
    if not isinstance(data, bytes | bytearray):
        raise EnvStateMismatchError(
            f"the env state is a {type(data).__name__}, not a Gymnasium env's pickled state "
            "(it was saved by a tensor-native env, or by an env stack of other layers, "
            "e.g. with env.max_episode_steps)"
        )
    return _EnvStateUnpickler(io.BytesIO(data), env_classes(env)).load()


def env_classes(env: gym.Env) -> frozenset[type]:
    """The classes of ``env``'s wrappers and of the env, with every class their modules define."""
    classes: set[type] = set()
    for layer in wrapper_layers(env):
        for cls in type(layer).__mro__:
            if cls.__module__ in _SHARED_MODULES:
                continue
            classes.add(cls)
            # Defined there, not imported there: a module may import anything (`Popen`).
            module = sys.modules.get(cls.__module__)
            if module is not None:
                classes.update(
                    v
                    for v in vars(module).values()
                    if isinstance(v, type) and v.__module__ == cls.__module__
                )
    return frozenset(classes)


def wrapper_layers(env: gym.Env) -> list[gym.Env]:
    """The wrappers of ``env`` from the outside in, then the env they wrap."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


class _EnvStateUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, classes: frozenset[type]):
        super().__init__(file)
        self._classes = classes

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN_DATA:
            return super().find_class(module, name)
        found = _lookup(module, name)
        if isinstance(found, type) and (
            found in self._classes or issubclass(found, gym.spaces.Space)
        ):
            return found
        raise UnsafeEnvStateError(
            f"the environment state names {module}.{name}, which is neither plain data nor "
            "a class of this environment: loading it could run any code, so it was not "
            "loaded. A state saved by cadence for the same env config names neither; if "
            "your env keeps objects of another module, give it get_state/set_state "
            "returning plain data (see cadence.envs.environment.PyEnvironment)"
        )


def _lookup(module: str, name: str) -> Any:
    """``module.name`` if the module is already imported (nothing is imported here)."""
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found
