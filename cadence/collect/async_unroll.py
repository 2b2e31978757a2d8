"""Unrolling in an environment that steps asynchronously (`ParallelEnvironment`'s
``async_batch_size``): each env contributes exactly ``unroll_length`` steps per unroll.

Each `recv` returns the envs that are ready first; the policy acts on those rows alone
(their recurrent state and ``agent_info`` gathered by env id, the new state scattered
back), and their actions are sent while the other envs still step. Each returned row is
written at its env's own next time index, so the unroll comes out as lockstep's does:
``[T + 1, N]`` time steps, ``[T, N]`` actions, infos and states, column ``i`` env ``i``'s
steps in its own order. Returns, advantages, replay rings and episode statistics then run
along each env's own time axis unchanged.

An env that has made its ``unroll_length`` steps waits (no action is sent to it) until
every env has: the unroll ends with no step in flight, so the carried time step, the env
states and a checkpoint are those of lockstep's boundary. (The other choice, ragged
per-env sequences masked in the update, keeps no env waiting but changes every consumer
of an unroll; docs/backends.md measures what the wait costs.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from cadence.algorithms.algorithm import AlgStep, reset_state
from cadence.data.nest import Nest, map_structure
from cadence.data.time_step import TimeStep


class AsyncEnvironment(Protocol):
    """What the asynchronous unroll needs of an env (`ParallelEnvironment` in that mode)."""

    batch_size: int

    def send(self, action: Nest, env_ids: list[int]) -> None: ...

    def recv(self) -> TimeStep: ...


def is_async(env: Any) -> bool:
    """Whether ``env`` steps asynchronously (returns fewer envs per step than its batch)."""
    return getattr(env, "async_batch_size", env.batch_size) < env.batch_size


def run_async_steps(
    act: Callable[[TimeStep, Nest, Nest], AlgStep],
    env: AsyncEnvironment,
    received: Callable[[TimeStep], TimeStep],
    time_step: TimeStep,
    state: Nest,
    agent_info: Nest,
    initial_state: Nest,
    length: int,
    stateful: bool,
) -> tuple[TimeStep, Nest, Nest, Nest, TimeStep, Nest]:
    """`cadence.collect.unroll.run_steps` for an asynchronous env: ``length`` steps of every
    env, each env's rows at its own time indices.

    The policy acts on each received batch as it comes (no gather of a carried copy); the
    batches and the policy's outputs are kept with the flat ``t * N + env`` position of
    each row (counted on the CPU) and put in place once, at the end, with one
    ``index_copy_`` per leaf; every env's last time step is the unroll's last row.

    Args:
        act: the policy (``rollout_step``'s signature), called on the ready rows.
        env: the env, between unrolls (no step in flight).
        received: what becomes of each received batch before it is stored (moved to the
            acting device, transformed); it keeps its rows.
        time_step: ``[N]`` every env's current time step (carried from the last unroll).
        state: ``[N]`` recurrent state (``()`` when not ``stateful``).
        agent_info: ``[N]`` per-env parameters of ``act`` (``()``: none).
        initial_state: ``[N]`` the state a FIRST step starts from.
        length: steps per env.
        stateful: whether the policy keeps a recurrent state.

    Returns:
        The stacked time steps ``[T + 1, N]`` (the given one first), actions, infos and
        states ``[T, N]`` (``()`` when not ``stateful``), then the last time step and state.
    """
    num_envs = env.batch_size
    device = time_step.step_type.device
    counts = np.zeros(num_envs, dtype=np.int64)  # steps each env has made
    state = map_structure(torch.clone, state)
    # Each batch's rows with their flat [T, N] positions (t * N + env), put in place at the end.
    arrivals: list[tuple[np.ndarray, list[torch.Tensor]]] = [
        (np.arange(num_envs), _ts_leaves(time_step))
    ]
    outputs: list[tuple[np.ndarray, list[torch.Tensor]]] = []  # actions, infos, states
    first_outputs: tuple[Nest, ...] = ()
    ids, acting, in_flight = np.arange(num_envs), time_step, 0
    while True:
        if len(ids):
            rows = torch.from_numpy(ids).to(device)
            step_state = _rows(state, rows)
            if stateful:
                step_state = reset_state(acting.step_type, step_state, _rows(initial_state, rows))
            step = act(acting, step_state, _rows(agent_info, rows))
            output = (step.output, step.info, step_state if stateful else ())
            first_outputs = first_outputs or output
            outputs.append((counts[ids] * num_envs + ids, _leaves(output)))
            if stateful:
                _put(_leaves(state), rows, _leaves(step.state))
            env.send(step.output, ids.tolist())
            in_flight += len(ids)
        if in_flight == 0:
            break
        raw = env.recv()
        arrived = received(raw)
        got = raw.env_id.cpu().numpy()
        in_flight -= len(got)
        counts[got] += 1
        arrivals.append((counts[got] * num_envs + got, _ts_leaves(arrived)))
        going_on = counts[got] < length  # the envs that still step in this unroll
        ids, acting = got, arrived
        if not going_on.all():
            ids = got[going_on]
            acting = arrived[torch.from_numpy(np.flatnonzero(going_on)).to(device)]
    time_steps = time_step.map(lambda x: x.new_empty((length + 1, *x.shape)))
    _place(_ts_leaves(time_steps), arrivals, device)
    recorded = [_empty(nest, length, num_envs) for nest in first_outputs]
    _place(_leaves(recorded), outputs, device)
    actions, infos, states = recorded
    last = time_steps.map(lambda x: x[length].clone())
    return time_steps, actions, infos, states, last, state


def _rows(nest: Nest, rows: torch.Tensor) -> Nest:
    return map_structure(lambda x: x.index_select(0, rows), nest)


def _empty(nest: Nest, length: int, num_envs: int) -> Nest:
    """``[length, num_envs, ...]`` buffers for the leaves of a ``[M, ...]`` nest."""
    return map_structure(lambda x: x.new_zeros((length, num_envs, *x.shape[1:])), nest)


def _place(
    targets: list[torch.Tensor],
    parts: list[tuple[np.ndarray, list[torch.Tensor]]],
    device: torch.device,
) -> None:
    """Fills each ``[T, N, ...]`` target from ``parts``: rows of ``[M, ...]`` leaves, each
    part with the flat ``t * N + env`` position of each row (one ``index_copy_`` a leaf)."""
    index = torch.from_numpy(np.concatenate([at for at, _ in parts])).to(device)
    for leaf, target in enumerate(targets):
        values = torch.cat([leaves[leaf] for _, leaves in parts])
        flat = target.view(-1, *target.shape[2:])
        # `=` casts a policy output in another dtype than its first step's: so does this.
        flat.index_copy_(0, index, values.to(target.dtype))


def _put(targets: list[torch.Tensor], index: torch.Tensor, values: list[torch.Tensor]) -> None:
    """``target[index] = value`` for each leaf (rows of dim 0)."""
    for target, value in zip(targets, values, strict=True):
        target[index] = value


def _leaves(nest: Nest) -> list[Any]:
    """`cadence.data.nest.flatten` without the paths (its order), for the per-step loop."""
    if isinstance(nest, dict):
        return [leaf for value in nest.values() for leaf in _leaves(value)]
    if isinstance(nest, (tuple, list)):
        return [leaf for value in nest for leaf in _leaves(value)]
    return [nest]


def _ts_leaves(time_step: TimeStep) -> list[Any]:
    """A time step's leaves in `TimeStep.to_dict`'s order, those of ``untransformed`` last."""
    t = time_step
    leaves = [t.step_type, t.reward, t.discount, *_leaves(t.observation)]
    leaves += [*_leaves(t.prev_action), t.env_id, *_leaves(t.env_info)]
    if t.untransformed is not None:
        leaves += _ts_leaves(t.untransformed)
    return leaves
