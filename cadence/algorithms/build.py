"""`build_algorithm`: an algorithm from its config and the environment's specs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cadence.algorithms.a2c import make_a2c
from cadence.algorithms.algorithm import Algorithm
from cadence.algorithms.ddpg import make_ddpg
from cadence.algorithms.dqn import make_dqn
from cadence.algorithms.ppo import make_ppo
from cadence.algorithms.sac import make_sac
from cadence.algorithms.td3 import make_td3
from cadence.data.specs import Spec

ALGORITHM_BUILDERS: dict[str, Callable[..., Algorithm]] = {
    "ppo": make_ppo,
    "a2c": make_a2c,
    "td3": make_td3,
    "ddpg": make_ddpg,
    "dqn": make_dqn,
    "sac": make_sac,
}


def build_algorithm(
    config: Any, observation_spec: Spec, action_spec: Spec, network_config: Any
) -> Algorithm:
    """Builds the algorithm named by ``config.name``.

    Raises:
        ValueError: no algorithm of that name.
    """
    try:
        builder = ALGORITHM_BUILDERS[config.name]
    except KeyError:
        raise ValueError(
            f"Unknown algorithm {config.name!r}; known: {', '.join(sorted(ALGORITHM_BUILDERS))}"
        ) from None
    return builder(config, observation_spec, action_spec, network_config)
