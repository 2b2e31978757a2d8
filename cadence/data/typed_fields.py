"""Checks and converts plain config values against the type annotations of config fields.

Config files and command-line overrides produce YAML scalars and lists; the
attrs config classes want exact Python types. `coerce` bridges the two with a
small set of lossless conversions (an int for a float, an integral float for an
int, a list for a tuple) and refuses everything else.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import attrs

from cadence.data.names import similar_names


class Mismatch(Exception):
    """A value that does not fit an annotation; ``str()`` says what was expected."""


def coerce(value: Any, annotation: Any) -> Any:
    """``value`` converted to the type ``annotation`` describes.

    Args:
        value: a plain value (``None``, bool, int, float, str, list, dict).
        annotation: ``bool``, ``int``, ``float``, ``str``, ``Any``, ``Literal[...]``,
            a union such as ``float | None``, ``tuple[int, ...]``, ``tuple[int, int]``,
            ``list[X]`` or ``dict[str, X]``.

    Returns:
        The converted value (a tuple for tuple annotations, a float for float ones).

    Raises:
        Mismatch: ``value`` does not fit; the message names the expected type.
    """
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return _coerce_literal(value, typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return _coerce_union(value, annotation)
    if origin in (tuple, list):
        return _coerce_sequence(value, annotation)
    if origin is dict:
        return _coerce_dict(value, annotation)
    if annotation in _SCALARS:
        return _SCALARS[annotation](value)
    raise TypeError(f"config fields cannot be annotated {annotation!r}")


def check_assignment(instance: Any, attribute: attrs.Attribute, value: Any) -> Any:
    """An attrs ``on_setattr`` hook: ``value`` converted to the field's annotated type.

    Runs before the field's validators, so ``config.trainer.num_env_steps = "1000"``
    names the field and the type instead of failing inside ``ge(1)``. Sections (attrs
    classes) and annotations `coerce` does not know are left to the validators.

    Raises:
        TypeError: naming ``Class.field``, the expected type and the value.
    """
    annotation = _field_types(type(instance)).get(attribute.name, Any)
    try:
        return coerce(value, annotation)
    except Mismatch as mismatch:
        raise TypeError(
            f"{type(instance).__name__}.{attribute.name} = {value!r}: {mismatch}"
        ) from None
    except TypeError:  # a section or an annotation coerce does not know
        return value


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except NameError:  # an annotation imported for type checkers only: check nothing
        return {}


CHECKED_SETATTR = attrs.setters.pipe(
    attrs.setters.convert, check_assignment, attrs.setters.validate
)
"""The ``on_setattr`` of mutable config classes: attrs' default (convert, then validate)
with the type check of `check_assignment` between them."""


def type_name(annotation: Any) -> str:
    """A short readable name of ``annotation``: ``int``, ``float | None``, ``{'a', 'b'}``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "{" + ", ".join(repr(arg) for arg in args) + "}"
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is not None:
        inner = ", ".join("..." if arg is Ellipsis else type_name(arg) for arg in args)
        return f"{origin.__name__}[{inner}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", repr(annotation))


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise Mismatch(f"expected bool (true or false), got {_kind(value)}")


def _coerce_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    # Hydra reads 1e6 as a float; a budget written that way is still a whole number.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise Mismatch(f"expected int, got {_kind(value)}")


def _coerce_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise Mismatch(f"expected float, got {_kind(value)}")


def _coerce_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise Mismatch(f"expected str, got {_kind(value)}")


def _coerce_none(value: Any) -> None:
    if value is None:
        return None
    raise Mismatch(f"expected null, got {_kind(value)}")


_SCALARS = {
    bool: _coerce_bool,
    int: _coerce_int,
    float: _coerce_float,
    str: _coerce_str,
    type(None): _coerce_none,
}


def _coerce_literal(value: Any, choices: tuple[Any, ...]) -> Any:
    # 1 == True in Python, so compare types too: `true` is not the choice 1.
    for choice in choices:
        if type(value) is type(choice) and value == choice:
            return choice
    expected = ", ".join(repr(choice) for choice in choices)
    names = [choice for choice in choices if isinstance(choice, str)]
    matches = similar_names(value, names, limit=1) if isinstance(value, str) else []
    hint = f"; did you mean {matches[0]!r}?" if matches else ""
    raise Mismatch(f"expected one of {expected}{hint}")


def _coerce_union(value: Any, annotation: Any) -> Any:
    members = typing.get_args(annotation)
    for member in members:
        try:
            return coerce(value, member)
        except Mismatch:
            continue
    raise Mismatch(f"expected {type_name(annotation)}, got {_kind(value)}")


def _coerce_sequence(value: Any, annotation: Any) -> tuple[Any, ...] | list[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise Mismatch(f"expected {type_name(annotation)} (a list), got {_kind(value)}")
    items = []
    for index, (item, member) in enumerate(zip(value, _item_types(annotation, value), strict=True)):
        try:
            items.append(coerce(item, member))
        except Mismatch as mismatch:
            raise Mismatch(f"item {index}: {mismatch}") from None
    return tuple(items) if typing.get_origin(annotation) is tuple else items


def _item_types(annotation: Any, value: Sequence[Any]) -> list[Any]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list or (len(args) == 2 and args[1] is Ellipsis):
        return [args[0] if args else Any] * len(value)
    if len(args) != len(value):
        raise Mismatch(
            f"expected {type_name(annotation)} ({len(args)} items), got {len(value)} items"
        )
    return list(args)


def _coerce_dict(value: Any, annotation: Any) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise Mismatch(f"expected {type_name(annotation)} (a mapping), got {_kind(value)}")
    key_type, value_type = typing.get_args(annotation) or (Any, Any)
    return {coerce(k, key_type): coerce(v, value_type) for k, v in value.items()}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
