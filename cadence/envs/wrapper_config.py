"""`env.wrappers`: Gymnasium wrappers named in a config, as picklable recipes for `make_env`.

Each item names a wrapper and gives its keyword arguments; they are applied in
order to every Gymnasium env, innermost first::

    env:
      wrappers:
        - {name: FrameSkip, skip: 4}
        - {name: ObservationMask, keep: [0, 2]}

A name is, in this order: a wrapper of `cadence.envs.wrappers` (``EnvFrameStack``,
``FrameSkip``, ``ObservationMask``, ...), a class of ``gymnasium.wrappers``
(``TimeAwareObservation``), or ``module:Class`` (the user's own, importable in the
worker processes too). Gymnasium is imported only when there is a name to resolve,
so that a config without wrappers, and ``cadence list``, import nothing heavy.

>>> recipes = gym_wrappers([{"name": "FrameSkip", "skip": 4}])
>>> recipes[0].func.__name__, recipes[0].keywords
('FrameSkip', {'skip': 4})
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

WrapperItem = Mapping[str, Any]
"""``{"name": NAME, **kwargs}``: one wrapper of ``env.wrappers``."""


def gym_wrappers(items: Sequence[WrapperItem]) -> list[functools.partial]:
    """The recipes `make_env` takes as ``gym_wrappers``: ``functools.partial(cls, **kwargs)``.

    Partials of classes pickle by reference, so worker processes build the same wrappers.

    Raises:
        ValueError: an item `check_wrappers` refuses.
    """
    recipes = []
    for index, item in enumerate(items):
        cls, kwargs = _resolve_item(index, item)
        recipes.append(functools.partial(cls, **kwargs))
    return recipes


def check_wrappers(instance: Any, attribute: Any, items: Sequence[WrapperItem]) -> None:
    """attrs validator of ``env.wrappers``: each name resolves and takes the item's arguments.

    Raises:
        ValueError: naming the first bad item, and what is wrong with it.
    """
    for index, item in enumerate(items):
        _resolve_item(index, item)


def resolve_wrapper(name: str) -> type:
    """The wrapper class ``name`` stands for (see the module docstring for the order).

    Raises:
        ValueError: no wrapper has that name (close names are suggested), or
            ``module:Class`` cannot be imported or is not a ``gymnasium.Wrapper``.
    """
    import gymnasium
    import gymnasium.wrappers

    from cadence.envs import wrappers

    if ":" in name:
        return _import_wrapper(name, gymnasium.Wrapper)
    if name in wrappers.__all__:
        return getattr(wrappers, name)
    gym_names = _gymnasium_wrapper_names()
    if name in gym_names:
        return getattr(gymnasium.wrappers, name)
    close = difflib.get_close_matches(name, [*wrappers.__all__, *gym_names], n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise ValueError(
        f"unknown wrapper {name!r}{hint} (a name is a wrapper of cadence.envs.wrappers, "
        f"a class of gymnasium.wrappers, or 'module:Class')"
    )


def _resolve_item(index: int, item: Any) -> tuple[type, dict[str, Any]]:
    """The class and keyword arguments of item ``index``; ValueError naming it if bad."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise ValueError(f"item {index} ({item!r}): expected a mapping {{name: WRAPPER, ...}}")
    kwargs = {key: value for key, value in item.items() if key != "name"}
    try:
        cls = resolve_wrapper(item["name"])
        _check_arguments(cls, kwargs)
    except ValueError as error:
        raise ValueError(f"item {index} ({dict(item)!r}): {error}") from None
    return cls, kwargs


def _check_arguments(cls: type, kwargs: dict[str, Any]) -> None:
    """Refuses keyword arguments ``cls`` does not take, and required ones left out."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # no signature to check against (a C extension)
        return
    parameters = list(signature.parameters.values())[1:]  # the first is the env
    takes = f"(it takes: {', '.join(p.name for p in parameters) or 'no arguments'})"
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        known = {p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY}
        unknown = [key for key in kwargs if key not in known]
        if unknown:
            raise ValueError(f"{cls.__name__} takes no argument {unknown[0]!r} {takes}")
    try:
        signature.bind(None, **kwargs)  # None stands for the env
    except TypeError as error:
        raise ValueError(f"{cls.__name__}: {error} {takes}") from None


def _import_wrapper(path: str, base: type) -> type:
    module_name, _, qualname = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import {path!r} ({type(error).__name__}: {error})") from None
    if not (isinstance(target, type) and issubclass(target, base)):
        raise ValueError(f"{path!r} is not a gymnasium.Wrapper subclass (got {target!r})")
    return target


def _gymnasium_wrapper_names() -> list[str]:
    """The ``gymnasium.Wrapper`` classes ``gymnasium.wrappers`` exports."""
    import gymnasium
    import gymnasium.wrappers

    names = getattr(gymnasium.wrappers, "__all__", None) or dir(gymnasium.wrappers)
    found = []
    for name in names:
        try:
            value = getattr(gymnasium.wrappers, name)
        except Exception:  # a wrapper whose optional dependency is missing
            continue
        if isinstance(value, type) and issubclass(value, gymnasium.Wrapper):
            found.append(name)
    return found
