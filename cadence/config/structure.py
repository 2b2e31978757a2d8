"""`structure`: plain nested dicts to attrs config objects, checking everything first.

Two passes over the tree. The first checks keys and converts values against
the field annotations without building anything, so one run reports every
unknown key and wrong type at once. The second builds the attrs objects
bottom-up; each field's validator is first run on its own so that a range
error names its dotted key, then the class itself is built.

A field whose metadata holds a ``"registry"`` (a dict from name to attrs class,
like ``ALGORITHM_CONFIGS``) is a section whose class is chosen by its ``name``.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import attrs

from cadence.config.errors import ConfigError, Problem, unknown_key_problem
from cadence.data.typed_fields import Mismatch, coerce

T = TypeVar("T")


@attrs.define
class _Node:
    """An attrs class and its checked field values; nested sections are nodes too."""

    cls: type
    values: dict[str, Any]


def structure(cls: type[T], data: Any, source: str) -> T:
    """Builds the attrs config ``cls`` from plain nested ``data``.

    Args:
        cls: an attrs config class such as ``ExperimentConfig``.
        data: a mapping of plain values (from YAML or Hydra); missing keys take
            the class defaults.
        source: what ``data`` came from, for the first line of an error.

    Returns:
        The config object, every validator passed.

    Raises:
        ConfigError: listing every unknown key and wrong type, or else every
            value its validator refuses.
    """
    problems: list[Problem] = []
    node = _check(cls, data, "", problems)
    if problems:
        valid = list(field_keys(node))
        problems = [unknown_key_problem(p.key, valid) if _is_unknown(p) else p for p in problems]
        raise ConfigError(f"Invalid config {source}:", problems)
    config = _construct(node, "", problems)
    if problems:
        raise ConfigError(f"Invalid config {source}:", problems)
    return config


def section_class(field: attrs.Attribute, annotation: Any, value: Mapping[str, Any]) -> type | None:
    """The attrs class of section ``field`` holding ``value``; None for a plain field.

    Raises:
        Mismatch: a registry section whose ``name`` is missing or unknown.
    """
    registry = field.metadata.get("registry")
    if registry is None:
        return annotation if attrs.has(annotation) else None
    if "name" not in value:  # no name: the class of the field's default
        return type(_default(field))
    name = value["name"]
    if name not in registry:
        expected = f"expected one of {', '.join(map(repr, registry))}"
        hint = field.metadata.get("unknown_hint")  # how to add a name to the registry
        raise Mismatch(f"{expected}; {hint}" if hint else expected)
    return registry[name]


def field_keys(node: _Node, prefix: str = "") -> Iterator[str]:
    """Every dotted leaf key of the tree checked into ``node``."""
    for field in attrs.fields(node.cls):
        value = node.values.get(field.name)
        if isinstance(value, _Node):
            yield from field_keys(value, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}"


def _check(cls: type, data: Any, prefix: str, problems: list[Problem]) -> _Node:
    if not isinstance(data, Mapping):
        problems.append(Problem(prefix.rstrip("."), "expected a mapping of keys", value=data))
        data = {}
    fields = {name: field for name, field in attrs.fields_dict(cls).items() if field.init}
    hints = typing.get_type_hints(cls)
    node = _Node(cls, {})
    for key, value in data.items():
        if key in fields:
            node.values[key] = _check_field(fields[key], hints[key], value, prefix, problems)
        else:
            problems.append(Problem(f"{prefix}{key}", _UNKNOWN))
    for name, field in fields.items():
        if name not in data:
            _fill_missing(node, field, hints[name], prefix, problems)
    return node


def _check_field(
    field: attrs.Attribute, annotation: Any, value: Any, prefix: str, problems: list[Problem]
) -> Any:
    key = f"{prefix}{field.name}"
    if "registry" in field.metadata or attrs.has(annotation):
        return _check_section(field, annotation, value, key, problems)
    try:
        return coerce(value, annotation)
    except Mismatch as mismatch:
        problems.append(Problem(key, str(mismatch), value=value))
        return value


def _check_section(
    field: attrs.Attribute, annotation: Any, value: Any, key: str, problems: list[Problem]
) -> Any:
    if not isinstance(value, Mapping):
        problems.append(Problem(key, "expected a mapping of keys", value=value))
        return value
    try:
        section = section_class(field, annotation, value)
    except Mismatch as mismatch:
        problems.append(Problem(f"{key}.name", str(mismatch), value=value.get("name")))
        return value
    return _check(section, value, f"{key}.", problems)


def _fill_missing(
    node: _Node, field: attrs.Attribute, annotation: Any, prefix: str, problems: list[Problem]
) -> None:
    """Records a missing required key, or checks a missing section as its default."""
    if field.default is attrs.NOTHING:
        problems.append(Problem(f"{prefix}{field.name}", "missing (it has no default)"))
        return
    default = _default(field)
    if attrs.has(type(default)):
        # A section left out takes its default; checking it as {} keeps its keys known.
        node.values[field.name] = _check(type(default), {}, f"{prefix}{field.name}.", problems)


def _default(field: attrs.Attribute) -> Any:
    return field.default.factory() if isinstance(field.default, attrs.Factory) else field.default


def _construct(node: _Node, prefix: str, problems: list[Problem]) -> Any:
    kwargs = {}
    for name, value in node.values.items():
        kwargs[name] = (
            _construct(value, f"{prefix}{name}.", problems) if isinstance(value, _Node) else value
        )
    before = len(problems)
    if any(value is _FAILED for value in kwargs.values()):
        return _FAILED
    fields = attrs.fields_dict(node.cls)
    for name, value in kwargs.items():
        _validate_field(fields[name], value, prefix, problems)
    if len(problems) > before:
        return _FAILED
    try:
        return node.cls(**kwargs)
    except (ValueError, TypeError) as error:  # a validator that compares several fields
        problems.append(Problem(prefix.rstrip(".") or "(top level)", _reason(error)))
        return _FAILED


def _validate_field(
    field: attrs.Attribute, value: Any, prefix: str, problems: list[Problem]
) -> None:
    # A converter or validator that reads the instance cannot run before there
    # is one; __init__ runs it, and `_construct` reports its error on the section.
    if field.validator is None or isinstance(field.converter, attrs.Converter):
        return
    try:
        converted = field.converter(value) if field.converter is not None else value
        field.validator(None, field, converted)
    except (ValueError, TypeError) as error:
        problems.append(
            Problem(f"{prefix}{field.name}", _reason(error, field.name, value), value=value)
        )
    except AttributeError:  # the validator reads the instance
        pass


def _reason(error: Exception, name: str | None = None, value: Any = None) -> str:
    """The validator's message without the field name and value the key already shows."""
    message = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    if name is not None:
        message = message.removeprefix(f"'{name}' ")
        for suffix in (f": {value!r}", f" (got {value!r})"):
            message = message.removesuffix(suffix)
    return message


def _is_unknown(problem: Problem) -> bool:
    return problem.message == _UNKNOWN


_UNKNOWN = "unknown key"
_FAILED = object()
