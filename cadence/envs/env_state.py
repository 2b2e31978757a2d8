"""Loading a pickled Gymnasium env's state without running code that the state names.

`GymAdapter.get_state` pickles the whole env: the one way that captures any env's
state. A plain ``pickle.loads`` of it would call whatever the bytes name, and the
state travels in checkpoints, which load without running code (DESIGN §8). So
`loads_env_state` resolves only:

- plain data: numpy arrays, scalars, dtypes and random generators, and a few
  builtin containers;
- the classes of the env being restored, taken from the env that the same config
  builds (DESIGN §3):
  - its wrappers and the env itself, with their base classes and every class their
    modules define (an env's helper classes);
  - the exact class of every object reachable from it through attributes and
    containers (an env holding another env, as cadence's suites and users' composed
    envs do): a walk over instances only, bounded in size. Functions, modules and
    classes held as values are not instances and add nothing, and an object of
    another module adds its own class, not that module's other names;
- Gymnasium's spaces and env specs.

Every class comes from a module this process has already imported (the env was built
from the config): no module is imported because a state names it. Anything else
(``os.system``, ``builtins.eval``, another module's class) is refused with an error
naming it. A class may still be constructed with arguments the state chooses: that
runs the env's own code, as building it from the config does.
"""

from __future__ import annotations

import collections
import io
import itertools
import pickle
import sys
import types
from typing import Any

import gymnasium as gym
import numpy as np

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
# The walk over an env's objects stops after this many: an env's own objects are far
# fewer, a simulator's internals can be many more (and hold nothing a state names).
_MAX_OBJECTS = 20_000
# Values that hold no objects the walk must see (and whose classes pickle as plain data).
_LEAVES = (
    str,
    bytes,
    bytearray,
    int,
    float,
    complex,
    bool,
    type(None),
    range,
    slice,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.CodeType,
    types.FrameType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
)


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
    """The classes a state of ``env`` may name (see the module docstring).

    Those of its wrapper layers, with their base classes and the classes their modules
    define, and the exact class of every instance reachable from ``env``.
    """
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
    classes.update(cls for cls in reachable_classes(env) if cls.__module__ not in _SHARED_MODULES)
    return frozenset(classes)


def reachable_classes(root: object, max_objects: int = _MAX_OBJECTS) -> set[type]:
    """The classes of the instances reachable from ``root`` through instance attributes
    (``__dict__`` and ``__slots__``) and builtin containers, ``root``'s own included.

    Breadth first, each object once, at most ``max_objects`` objects: the env's own
    attributes come first, a simulator's deep internals last. Functions, methods,
    modules and classes are leaves that add nothing (their class is not an object's).
    Numpy arrays are not entered (their items are plain data).
    """
    classes: set[type] = set()
    seen: set[int] = set()
    queue: collections.deque[object] = collections.deque([root])
    while queue and len(seen) < max_objects:
        obj = queue.popleft()
        if id(obj) in seen or isinstance(obj, _LEAVES):
            continue
        seen.add(id(obj))
        classes.add(type(obj))
        queue.extend(_children(obj))
    return classes


def _children(obj: object) -> list[object]:
    """The objects ``obj`` holds directly, read without running its code (no properties,
    no ``__getattr__``, no iteration protocol other than the builtin containers')."""
    # The builtin containers' own methods: a subclass's overrides are not run.
    if isinstance(obj, dict):
        return [*dict.keys(obj), *dict.values(obj)]
    for container in (list, tuple, set, frozenset, collections.deque):
        if isinstance(obj, container):
            return list(itertools.islice(container.__iter__(obj), _MAX_OBJECTS))
    if isinstance(obj, np.ndarray):
        return list(obj.ravel()[:_MAX_OBJECTS]) if obj.dtype == object else []
    children: list[object] = []
    instance_dict = _instance_dict(obj)
    if instance_dict is not None:
        children.extend(instance_dict.values())
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            descriptor = cls.__dict__.get(slot)
            if isinstance(descriptor, types.MemberDescriptorType):
                try:
                    children.append(descriptor.__get__(obj, cls))
                except AttributeError:  # an unset slot
                    pass
    return children


def _instance_dict(obj: object) -> dict | None:
    """``obj.__dict__`` if it has a plain one (not a property or ``__getattr__``)."""
    for cls in type(obj).__mro__:
        descriptor = cls.__dict__.get("__dict__")
        if descriptor is not None:
            if not isinstance(descriptor, types.GetSetDescriptorType):
                return None  # a class that computes its __dict__: not entered
            instance_dict = descriptor.__get__(obj, cls)
            return instance_dict if isinstance(instance_dict, dict) else None
    return None


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
        if found is not None and not isinstance(found, type):
            raise UnsafeEnvStateError(
                f"the environment state names {module}.{name}, which is not a class: an env "
                "state may name plain data and the classes of the objects the env holds, "
                "never a function (loading it could run any code), so it was not loaded. An "
                "env that keeps a function as an attribute cannot save its state this way: "
                "give it get_state/set_state returning plain data (see "
                "cadence.envs.environment.PyEnvironment)"
            )
        raise UnsafeEnvStateError(
            f"the environment state names {module}.{name}, which is neither plain data nor "
            "the class of an object that this environment holds (the env built from the "
            "same config, searched through its attributes): loading it could run any code, "
            "so it was not loaded. A state names it when it was saved for another env "
            "config or by other code: resume with the env config and code the run was "
            "started with. If the env is one of your own that creates such an object only "
            "after it is built, create it in __init__, or give the env "
            "get_state/set_state returning plain data (see "
            "cadence.envs.environment.PyEnvironment)"
        )


def _lookup(module: str, name: str) -> Any:
    """``module.name`` if the module is already imported (nothing is imported here)."""
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found
