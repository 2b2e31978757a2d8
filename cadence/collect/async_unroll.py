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

import torch

from cadence.algorithms.algorithm import AlgStep, reset_state
from cadence.data.nest import Nest, flatten, map_structure
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
    counts = torch.zeros(num_envs, dtype=torch.long, device=device)
    carried = time_step.clone()
    state = map_structure(torch.clone, state)
    time_steps = time_step.map(lambda x: x.new_empty((length + 1, *x.shape)))
    _put(_ts_leaves(time_steps), 0, slice(None), _ts_leaves(time_step))
    recorded: list[Nest] = []  # actions, infos, states as [T, N] once the first step shows them
    rows = torch.arange(num_envs, device=device)
    in_flight = 0
    while True:
        if len(rows):
            step_state = _rows(state, rows)
            if stateful:
                step_state = reset_state(
                    carried.step_type[rows], step_state, _rows(initial_state, rows)
                )
            step = act(carried[rows], step_state, _rows(agent_info, rows))
            outputs = (step.output, step.info, step_state if stateful else ())
            if not recorded:
                recorded = [_empty(nest, length, num_envs) for nest in outputs]
            for buffer, value in zip(recorded, outputs, strict=True):
                _put(flatten(buffer), counts[rows], rows, flatten(value))
            if stateful:
                _put(flatten(state), None, rows, flatten(step.state))
            env.send(step.output, rows.tolist())
            in_flight += len(rows)
        if in_flight == 0:
            break
        arrived = received(env.recv())
        ids = arrived.env_id.to(device)
        in_flight -= len(ids)
        counts[ids] += 1
        _put(_ts_leaves(time_steps), counts[ids], ids, _ts_leaves(arrived))
        _put(_ts_leaves(carried), None, ids, _ts_leaves(arrived))
        rows = ids[counts[ids] < length]
    actions, infos, states = recorded
    return time_steps, actions, infos, states, carried, state


def _rows(nest: Nest, rows: torch.Tensor) -> Nest:
    return map_structure(lambda x: x[rows], nest)


def _empty(nest: Nest, length: int, num_envs: int) -> Nest:
    """``[length, num_envs, ...]`` buffers for the leaves of a ``[M, ...]`` nest."""
    return map_structure(lambda x: x.new_zeros((length, num_envs, *x.shape[1:])), nest)


def _put(
    targets: list[torch.Tensor],
    times: torch.Tensor | int | None,
    rows: torch.Tensor | slice,
    values: list[Any],
) -> None:
    """``target[times, rows] = value`` for each leaf (``times`` None: ``target[rows]``)."""
    for target, value in zip(targets, values, strict=True):
        if times is None:
            target[rows] = value
        else:
            target[times, rows] = value


def _ts_leaves(time_step: TimeStep) -> list[Any]:
    """A time step's leaves, those of ``untransformed`` last."""
    leaves = flatten(time_step.to_dict(untransformed=False))
    if time_step.untransformed is not None:
        leaves += _ts_leaves(time_step.untransformed)
    return leaves
