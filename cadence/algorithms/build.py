"""`build_algorithm`: an algorithm from its config and the environment's specs."""

from __future__ import annotations

from typing import Any

from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.registry import algorithm_builder
from cadence.data.specs import Spec


def build_algorithm(
    config: Any, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> Algorithm:
    """Builds the algorithm named by ``config.name`` with its registered builder.

    Raises:
        ValueError: no algorithm of that name is registered.
    """
    try:
        builder = algorithm_builder(config.name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None
    return builder(config, observation_spec, action_spec, network_config)
