"""`AlgorithmAgent`: an algorithm's policy as an rlstructures `Agent` (DESIGN §5).

PPO, A2C and SAC offer it through ``as_agent()`` (their registrations declare
``agent_view``), so that their policies collect through the `cadence.collect.Batcher`,
in worker processes or on a Ray cluster. Each step of the agent is one `rollout_step` of the algorithm on the Batcher's
observation seen as a `TimeStep`: the same action for the same inputs (and, where
the policy samples, the same draws of torch's generator). A recurrent algorithm's
state travels as the agent's state (``agent_state/*`` in the trajectories' info),
its nest flattened to ``/``-joined keys, and is reset where an episode starts as
the trainer's collector resets it.

``agent_info["deterministic"]`` (``[B]`` bool, optional) makes those slots act with
the policy's mode rather than a sample, so one batch holds both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cadence.algorithms.agent import Agent, reset_where
from cadence.algorithms.algorithm import Algorithm
from cadence.data.dict_tensor import DictTensor
from cadence.data.nest import Nest, flatten, flatten_with_paths, pack_sequence_as
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.time_step import TimeStep


class AlgorithmAgent(Agent):
    """An algorithm's `rollout_step` as an `Agent`.

    The action it returns holds ``action`` (what the env executes: the algorithm's
    output) and ``info/*``, the step's info (e.g. PPO's unclipped ``info/action`` and
    ``info/log_prob``).

    Args:
        algorithm: the algorithm whose policy acts (its weights are the agent's).

    >>> from cadence.algorithms.a2c import A2CConfig, make_a2c  # doctest: +SKIP
    >>> agent = make_a2c(A2CConfig(), obs_spec, action_spec, network).as_agent()  # doctest: +SKIP
    """

    def __init__(self, algorithm: Algorithm):
        self.algorithm = algorithm
        self._state_structure: Nest = algorithm.initial_state(1)

    def initial_state(self, agent_info: DictTensor, n_elems: int) -> DictTensor:
        """The algorithm's initial state of ``n_elems`` slots, flattened (empty if none)."""
        return _flat(self.algorithm.initial_state(n_elems), n_elems)

    def __call__(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        state = reset_where(state, self.initial_state(agent_info, n), observation["initial_state"])
        options: Mapping[str, Any] = ()
        if agent_info is not None and "deterministic" in agent_info:
            options = {"deterministic": agent_info["deterministic"]}
        step = self.algorithm.rollout_step(time_step_of(observation), self._nest(state), options)
        action: dict[str, Any] = {"action": step.output}
        if step.info:
            action["info"] = dict(flatten_with_paths(step.info))
        return DictTensor(action, batch_size=n), _flat(step.state, n)

    def update(self, info: Mapping[str, torch.Tensor]) -> None:
        """Loads ``info``, the algorithm's ``state_dict()`` (or any subset of it)."""
        self.algorithm.load_state_dict(dict(info), strict=False)

    def _nest(self, state: DictTensor) -> Nest:
        if not flatten(self._state_structure):
            return self._state_structure
        values = state.to_dict()
        leaves = [values[path] for path, _ in flatten_with_paths(self._state_structure)]
        return pack_sequence_as(self._state_structure, leaves)


def time_step_of(observation: DictTensor) -> TimeStep:
    """The `TimeStep` ``[B]`` that an agent's observation (the Batcher's keys) stands for."""
    info = _tensors(observation["info"]) if "info" in observation else {}
    return TimeStep(
        step_type=observation["step_type"],
        reward=observation["reward"],
        discount=observation["discount"],
        observation=_tensors(observation["frame"]),
        prev_action=_tensors(observation["last_action"]),
        env_id=observation["env_id"],
        env_info=info,
    )


def _tensors(value: Any) -> Any:
    """A nested `DictTensor` as the plain nest of tensors an algorithm reads."""
    return value.td.to_dict() if isinstance(value, DictTensor) else value


def _flat(state: Nest, n: int) -> DictTensor:
    return DictTensor(dict(flatten_with_paths(state)), batch_size=n)
