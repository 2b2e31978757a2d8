"""Helpers for nests: arbitrarily nested dicts, tuples and lists of leaves.

A leaf is anything that is not a ``dict``, ``tuple`` or ``list`` (a tensor, an
array, a number, ``None``). Nests let an observation be a single tensor or a
``Dict``/``Tuple`` of tensors without the code that moves it around caring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

Nest: TypeAlias = Any
"""A leaf, or a ``dict``/``tuple``/``list`` whose values are nests."""


def is_nested(x: Any) -> bool:
    return isinstance(x, (dict, tuple, list))


def map_structure(fn: Callable[..., Any], *nests: Nest) -> Nest:
    """Applies ``fn`` leaf-wise to nests of identical structure.

    >>> map_structure(lambda a, b: a + b, {"x": 1, "y": (2, 3)}, {"x": 10, "y": (20, 30)})
    {'x': 11, 'y': (22, 33)}
    """
    first = nests[0]
    if isinstance(first, dict):
        return {k: map_structure(fn, *(n[k] for n in nests)) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(map_structure(fn, *items) for items in zip(*nests, strict=True))
    return fn(*nests)


def flatten(nest: Nest) -> list[Any]:
    """The leaves of ``nest`` in a fixed order (dict insertion order)."""
    return [leaf for _, leaf in flatten_with_paths(nest)]


def flatten_with_paths(nest: Nest, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yields ``(path, leaf)`` pairs; paths join keys and indices with ``/``."""
    if isinstance(nest, dict):
        for key, value in nest.items():
            yield from flatten_with_paths(value, f"{prefix}{key}/")
    elif isinstance(nest, (tuple, list)):
        for index, value in enumerate(nest):
            yield from flatten_with_paths(value, f"{prefix}{index}/")
    else:
        yield prefix.rstrip("/"), nest


def pack_sequence_as(structure: Nest, leaves: list[Any]) -> Nest:
    """Rebuilds a nest shaped like ``structure`` from ``leaves`` (the inverse of `flatten`)."""
    iterator = iter(leaves)
    packed = map_structure(lambda _: next(iterator), structure)
    if next(iterator, _SENTINEL) is not _SENTINEL:
        raise ValueError("more leaves than the structure has places for")
    return packed


_SENTINEL = object()
