"""`Agent`: a policy with explicit state, as rlstructures writes it, and replaying one.

Follows the ``RL_Agent`` of rlstructures (Denoyer et al., 2021,
https://arxiv.org/abs/2102.01010). An agent maps a batch of observations to a
batch of actions, one row per slot: what it remembers between steps is the
``state`` it is given and returns (never an attribute of its own), and what tells
the slots apart is ``agent_info``, one row of parameters per slot (an exploration
level, whether to act greedily), so one agent runs several policies side by side.
The `Batcher` runs agents over environments in worker processes; `replay_agent`
runs one again over what they collected, to recompute its outputs for a loss.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import torch

from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.trajectories import Trajectories


class Agent(abc.ABC):
    """A batched policy: ``(state, observation, agent_info) -> (action, new_state)``.

    The observation a `Batcher` gives holds ``frame`` (the env's observation),
    ``reward``, ``done``, ``initial_state`` (a new episode starts here, so the
    state must start again: see `reset_where`), ``last_action``, ``step_type``,
    ``discount``, ``env_id`` (the slot's index in the whole batch: key its random
    stream with it, see `SlotRandom`) and ``info/*`` (the env's numeric ``info``).

    >>> class Uniform(Agent):
    ...     def __call__(self, state, observation, agent_info, history=None):
    ...         n = observation.n_elems()
    ...         return DictTensor({"action": torch.randint(2, (n,))}), state
    >>> agent = Uniform()
    >>> observation = DictTensor({"frame": torch.zeros(3, 4)})
    >>> action, state = agent(agent.initial_state(DictTensor({}, 3), 3), observation, None)
    >>> action["action"].shape
    torch.Size([3])
    """

    def require_history(self) -> bool:
        """Whether `__call__` needs ``history``, the slot's steps so far (default False)."""
        return False

    def initial_state(self, agent_info: DictTensor, n_elems: int) -> DictTensor:
        """The state ``[B, ...]`` of ``n_elems`` slots starting afresh (default: no state).

        Args:
            agent_info: ``[B, ...]`` per-slot parameters (may be empty).
            n_elems: ``B``.
        """
        return DictTensor({}, batch_size=n_elems)

    @abc.abstractmethod
    def __call__(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """One step of every slot.

        Args:
            state: ``[B, ...]`` what the slots remembered after their last step (the
                `initial_state` at first; rows where ``observation["initial_state"]``
                is True start a new episode: replace them, see `reset_where`).
            observation: ``[B, ...]`` what the env shows (keys in the class docstring).
            agent_info: ``[B, ...]`` per-slot parameters (may be empty).
            history: with `require_history`, ``[B, t, ...]`` the slot's steps of this
                acquisition before this one (``observation/*``, ``action/*``,
                ``_observation/*``); else None.

        Returns:
            ``action`` ``[B, ...]``: ``"action"`` is what the env executes; any other key
            (log-probabilities, values) is stored with it. And the new state ``[B, ...]``,
            with the keys of `initial_state`.
        """

    def update(self, info: Mapping[str, torch.Tensor]) -> None:
        """Takes new weights (what the learner passed to `Batcher.update`, e.g. a
        ``state_dict``); the tensors are the agent's to keep."""
        raise NotImplementedError(
            f"{type(self).__name__} takes no new weights: override Agent.update(info)"
        )

    def seed(self, seed: int) -> None:  # noqa: B027 - an optional hook: most agents draw nothing
        """Seeds the agent's random streams (the `Batcher` calls it in each worker)."""

    def call_replay(
        self, trajectories: Trajectories, t: int, state: DictTensor | None
    ) -> tuple[DictTensor, DictTensor]:
        """Step ``t`` of a replay in rlstructures' protocol (``replay_agent(...,
        replay_method_name="call_replay")``): the agent on ``trajectories``' step ``t``,
        from ``state`` (``None`` at ``t = 0``: the stored ``agent_state/*``).

        Returns:
            The step's outputs ``[B, ...]`` and the state after it.
        """
        info = trajectories.info
        if state is None:
            state = info.truncate_key("agent_state/")
        agent_info = info.truncate_key("agent_info/")
        observation = trajectories.trajectories.temporal_index(t).truncate_key("observation/")
        history = _history(trajectories.trajectories, t) if self.require_history() else None
        return self(state, observation, agent_info, history)

    def close(self) -> None:  # noqa: B027 - an optional hook: most agents hold nothing to release
        """Releases what the agent holds."""


def reset_where(state: DictTensor, initial_state: DictTensor, mask: torch.Tensor) -> DictTensor:
    """``state`` with the rows where ``mask`` ``[B]`` is True taken from ``initial_state``.

    An agent calls it first, with ``observation["initial_state"]`` as the mask, so
    that a slot whose episode starts again forgets the last one. Nothing is
    broadcast: a one-row mask or initial state would reset, or overwrite, every slot.

    Raises:
        ValueError: the two states have different keys, a key's shape or dtype
            differs between them, or ``mask`` is not a ``[B]`` bool tensor.

    >>> state = DictTensor({"h": torch.ones(3, 2)})
    >>> reset_where(state, DictTensor({"h": torch.zeros(3, 2)}), torch.tensor([False, True, False]))["h"][:, 0]
    tensor([1., 0., 1.])
    """
    _check_reset(state, initial_state, mask)
    values = {}
    for key, value in state.to_dict().items():
        where = mask.reshape(-1, *([1] * (value.dim() - 1)))
        values[key] = torch.where(where, initial_state[key], value)
    return DictTensor(values, batch_size=state.n_elems(), device=state.device())


def _check_reset(state: DictTensor, initial_state: DictTensor, mask: torch.Tensor) -> None:
    if set(state.keys()) != set(initial_state.keys()):
        raise ValueError(
            f"the state has keys {sorted(state.keys())} but the initial state "
            f"{sorted(initial_state.keys())}: __call__ must return the keys of initial_state"
        )
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 1:
        got = f"{mask.dtype}{list(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask)
        raise ValueError(
            f"the mask must be a [B] bool tensor (observation['initial_state']), got {got}"
        )
    if state.empty():
        return
    if len(mask) != state.n_elems():
        raise ValueError(f"the mask has {len(mask)} rows but the state {state.n_elems()}")
    for key, value in state.to_dict().items():
        initial = initial_state[key]
        if initial.shape != value.shape or initial.dtype != value.dtype:
            raise ValueError(
                f"the initial state's {key!r} is {initial.dtype}{list(initial.shape)} but the "
                f"state's {value.dtype}{list(value.shape)}: initial_state(agent_info, B) must "
                "give B rows of the shapes and dtypes __call__ returns"
            )


def replay_agent(
    agent: Agent, trajectories: Trajectories, replay_method_name: str | None = None
) -> TemporalDictTensor:
    """Runs ``agent`` again over ``trajectories`` to recompute its outputs, with gradients.

    The state starts from each segment's stored ``agent_state/*`` and is threaded
    through the steps as during acquisition (the agent resets it where a step is
    an ``initial_state``), with each segment's ``agent_info/*``. This is how a loss
    gets log-probabilities and values of the current weights.

    A stateless agent (its initial state has no keys, and it needs no ``history``) is
    replayed in one call over all ``B * T`` steps: its outputs equal the step-by-step
    loop's within float rounding (a batch of another size may round otherwise), but an
    agent that draws random numbers draws them in another order. An agent with state is
    run step by step, each step batched over the ``B`` segments.

    Args:
        agent: the agent (usually the learner's copy of the one that acquired).
        trajectories: what a `Batcher` returned, ``[B, T]``.
        replay_method_name: rlstructures' protocol instead: the agent's method of this
            name is called as ``method(trajectories, t, state) -> (output, state)`` for
            ``t = 0 .. lengths.max() - 1``, with ``state=None`` at ``t = 0`` (see
            `Agent.call_replay`).

    Returns:
        ``[B, T, ...]`` by output key (``"action"`` and the agent's other outputs), with
        the lengths of ``trajectories``; steps past a segment's length are padding.

    Raises:
        ValueError: ``trajectories`` have no steps.
    """
    steps = trajectories.trajectories
    if steps.n_steps() == 0:
        raise ValueError("the trajectories have no steps (T = 0): nothing to replay")
    if replay_method_name is not None:
        return _replay_by_method(getattr(agent, replay_method_name), trajectories)
    state = trajectories.info.truncate_key("agent_state/")
    agent_info = trajectories.info.truncate_key("agent_info/")
    observations = steps.td.get("observation")
    stateless = state.empty() and not agent.require_history()
    if stateless and agent.initial_state(agent_info, state.n_elems()).empty():
        return _replay_at_once(agent, steps, observations, agent_info)
    outputs: list[dict[str, torch.Tensor]] = []
    for t, observation in enumerate(observations.unbind(1)):
        history = None
        if agent.require_history():
            history = _history(steps, t)
        action, state = agent(state, DictTensor._wrap(observation), agent_info, history)
        outputs.append(action.to_dict())
    stacked = {k: torch.stack([o[k] for o in outputs], dim=1) for k in outputs[0]}
    return TemporalDictTensor(stacked, steps.lengths)


def _replay_at_once(
    agent: Agent, steps: TemporalDictTensor, observations: Any, agent_info: DictTensor
) -> TemporalDictTensor:
    """One call of a stateless agent over the ``B * T`` steps, each with its row's info."""
    n_elems, n_steps = steps.n_elems(), steps.n_steps()
    info = {k: v.repeat_interleave(n_steps, 0) for k, v in agent_info.to_dict().items()}
    rows = n_elems * n_steps
    observation = DictTensor._wrap(observations.reshape(rows))
    empty = DictTensor({}, batch_size=rows, device=steps.device())
    info_rows = DictTensor(info, batch_size=rows, device=agent_info.device())
    action, _ = agent(empty, observation, info_rows, None)
    outputs = {k: v.reshape(n_elems, n_steps, *v.shape[1:]) for k, v in action.to_dict().items()}
    return TemporalDictTensor(outputs, steps.lengths)


def _replay_by_method(method: Any, trajectories: Trajectories) -> TemporalDictTensor:
    """rlstructures' replay: ``method(trajectories, t, state)`` for every step up to the
    longest segment, from ``state=None``."""
    n_steps = int(trajectories.trajectories.lengths.max())
    outputs, state = [], None
    for t in range(n_steps):
        output, state = method(trajectories, t, state)
        outputs.append(output.to_dict())
    stacked = {k: torch.stack([o[k] for o in outputs], dim=1) for k in outputs[0]}
    return TemporalDictTensor(stacked, trajectories.trajectories.lengths)


def _history(steps: TemporalDictTensor, t: int) -> TemporalDictTensor:
    """The steps before ``t`` of every segment, as the agent saw them during acquisition."""
    keys = [k for k in steps.keys() if k.split("/")[0] in _HISTORY_ROOTS]
    return TemporalDictTensor({k: steps[k][:, :t] for k in keys}, steps.lengths.clamp(max=t))


_HISTORY_ROOTS = ("observation", "action", "_observation")
