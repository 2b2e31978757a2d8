"""Which observation leaves a transformer acts on, and mapping just those.

Observations are nests (a tensor, or a Dict of tensors); a leaf is named by its
``/``-joined path (``"pixels"``, ``"robot/joints"``), and a plain tensor
observation by the empty path ``""``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from cadence.data.nest import Nest, flatten_with_paths, pack_sequence_as
from cadence.data.specs import CompositeSpec, Spec, TensorSpec

OBSERVATION_KEY = "time_step/observation"
"""The storage key prefix of the observation in a replay row (see `cadence.replay.rows`)."""


def select_leaves(
    spec: Spec,
    keys: Sequence[str],
    eligible: Callable[[TensorSpec], bool],
    owner: str,
    what: str,
) -> tuple[str, ...]:
    """The paths of the observation leaves ``owner`` acts on.

    Args:
        spec: the observation spec.
        keys: the paths asked for; empty means every leaf that is ``eligible``.
        eligible: whether a leaf spec is one ``owner`` can act on.
        owner: the transformer's name, for errors.
        what: what an eligible leaf is (e.g. ``"a float tensor"``), for errors.

    Returns:
        The chosen paths, in spec order.

    Raises:
        ValueError: a key names no leaf or an ineligible one, or nothing is eligible.
    """
    leaves = dict(flatten_with_paths(spec))
    for key in keys:
        if key not in leaves:
            raise ValueError(
                f"{owner}: the observation has no key {key!r}; its keys are {_describe(leaves)}"
            )
        if not eligible(leaves[key]):
            raise ValueError(f"{owner}: observation {key!r} is {leaves[key]}, not {what}")
    chosen = tuple(keys) if keys else tuple(p for p, s in leaves.items() if eligible(s))
    if not chosen:
        raise ValueError(
            f"{owner}: no observation leaf is {what} (the observation is {_describe(leaves)}); "
            "remove the transformer or change the observation"
        )
    return chosen


def map_leaves(nest: Nest, paths: Collection[str], fn: Callable[[str, Any], Any]) -> Nest:
    """``nest`` with ``fn(path, leaf)`` applied to the leaves at ``paths`` (others kept)."""
    if "" in paths:
        return fn("", nest)
    leaves = [fn(p, x) if p in paths else x for p, x in flatten_with_paths(nest)]
    return pack_sequence_as(nest, leaves)


def map_spec_leaves(spec: Spec, paths: Collection[str], fn: Callable[[TensorSpec], Spec]) -> Spec:
    """``spec`` with ``fn`` applied to the leaf specs at ``paths``; Dicts stay `CompositeSpec`."""
    return _map_spec(spec, frozenset(paths), fn, "")


def leaf(nest: Nest, path: str) -> Any:
    """The leaf of ``nest`` at ``path``."""
    for key in path.split("/") if path else ():
        nest = nest[key]
    return nest


def storage_key(path: str) -> str:
    """The replay storage key of observation leaf ``path``."""
    return f"{OBSERVATION_KEY}/{path}" if path else OBSERVATION_KEY


def _map_spec(spec: Spec, paths: frozenset[str], fn: Callable[[TensorSpec], Spec], prefix: str):
    if isinstance(spec, CompositeSpec):
        return CompositeSpec({k: _map_spec(s, paths, fn, f"{prefix}{k}/") for k, s in spec.items()})
    return fn(spec) if prefix.rstrip("/") in paths else spec


def _describe(leaves: dict[str, Any]) -> str:
    if list(leaves) == [""]:
        return f"a single tensor ({leaves['']}), named ''"
    return ", ".join(repr(k) for k in leaves)
