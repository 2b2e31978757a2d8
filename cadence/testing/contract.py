"""The contract suite every `Environment` must pass (DESIGN §2 and §3).

`check_environment` builds an environment twice from one seed, drives both with
the same random actions, and checks the recorded streams:

- every time step agrees with the specs: dtypes, ``[B, ...]`` shapes, bounds
  (``spec.contains``), the device, ``env_id == arange(B)``, the ``env_info`` keys;
- the discount table: FIRST and MID have discount 1, LAST has 0 or 1; where the
  env reports its Gymnasium flags as ``env_info`` keys ``terminated`` and
  ``truncated`` (the fakes of `cadence.testing.fakes` do), LAST has discount 0
  exactly when it terminated;
- auto-reset: ``reset`` gives all FIRST; afterwards a row is FIRST exactly when
  its previous step was LAST, with reward 0, discount 1 and a zero
  ``prev_action``; on the other rows ``prev_action`` is the action sent;
- the action sent with a resetting row is ignored (the second run sends
  different ones there);
- the same seed gives identical streams; rows of one batch start differently;
- time steps already returned never change afterwards; ``close`` is idempotent.

Each check raises ``AssertionError`` with a message naming the step, the row and
the field. The pieces (`check_time_step`, `check_stream`, ...) are public so a
test can apply them to a stream it recorded itself.

>>> from cadence.envs import make_env
>>> def make(seed):
...     return make_env("CartPole-v1", num_envs=2, backend="serial", seed=seed)
>>> check_environment(make).episodes > 0
True
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from cadence.data.devices import same_device
from cadence.data.nest import Nest, flatten_with_paths, map_structure
from cadence.data.specs import CompositeSpec, Spec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.environment import Environment

__all__ = [
    "ContractReport",
    "Stream",
    "check_distinct_env_ids",
    "check_environment",
    "check_identical_streams",
    "check_stream",
    "check_time_step",
    "record_stream",
]

MakeEnvironment = Callable[[int], Environment]
"""``seed -> a fresh Environment`` built from that seed."""

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


@dataclasses.dataclass
class Stream:
    """What one run recorded: ``time_steps[0]`` from ``reset``, then one per step.

    Attributes:
        time_steps: ``num_steps + 1`` batched time steps (clones of what the env returned).
        actions: ``actions[t]`` ``[B, ...]`` was sent to produce ``time_steps[t + 1]``.
        returned: the time steps exactly as returned (to check they never change).
    """

    time_steps: list[TimeStep]
    actions: list[Nest]
    returned: list[TimeStep]


@dataclasses.dataclass
class ContractReport:
    """What the checked stream covered, so a test can insist on enough of it.

    Attributes:
        batch_size: ``B``.
        num_steps: steps after the reset.
        episodes: LAST steps over all rows.
        terminations: LAST steps with discount 0.
        truncations: LAST steps with discount 1.
    """

    batch_size: int
    num_steps: int
    episodes: int
    terminations: int
    truncations: int


def check_environment(
    make: MakeEnvironment,
    *,
    seed: int = 0,
    num_steps: int = 200,
    distinct_env_ids: bool = True,
) -> ContractReport:
    """Runs the whole contract on environments built by ``make``.

    Args:
        make: builds a fresh environment from a seed; called twice with ``seed``.
        seed: the seed of both runs (the random actions are seeded from it too).
        num_steps: steps per run.
        distinct_env_ids: check that the rows of a batch start from different
            observations (turn off for envs whose reset is deterministic).

    Returns:
        What the stream covered (episodes, terminations, truncations).

    Raises:
        AssertionError: a clause of the contract is broken (the message says which).
    """
    env = make(seed)
    try:
        stream = record_stream(env, num_steps, seed)
        report = check_stream(env, stream)
    finally:
        _close_twice(env)
    if distinct_env_ids:
        check_distinct_env_ids(stream)
    replay_env = make(seed)
    try:
        replay = record_stream(replay_env, num_steps, seed, perturb_ignored_actions=True)
    finally:
        _close_twice(replay_env)
    check_identical_streams(stream, replay)
    return report


def record_stream(
    env: Environment, num_steps: int, seed: int = 0, *, perturb_ignored_actions: bool = False
) -> Stream:
    """Resets ``env`` and steps it ``num_steps`` times with seeded random actions.

    Args:
        env: the environment.
        num_steps: steps after the reset.
        seed: seeds the actions (drawn with ``action_spec.sample``).
        perturb_ignored_actions: send other random actions to the rows that are
            about to reset (their action must be ignored); the actions drawn for
            the other rows are the same as without it.

    Returns:
        The recorded `Stream`.
    """
    generator = torch.Generator().manual_seed(seed)
    other_generator = torch.Generator().manual_seed(seed + 1)
    outer = (env.batch_size,)
    time_step = env.reset()
    returned, clones, actions = [time_step], [time_step.clone()], []
    for _ in range(num_steps):
        action = env.action_spec.sample(outer, generator)
        if perturb_ignored_actions:
            other = env.action_spec.sample(outer, other_generator)
            resetting = clones[-1].is_last().cpu()
            action = map_structure(functools.partial(_where_rows, resetting), other, action)
        actions.append(action)
        returned.append(env.step(map_structure(lambda a: a.to(env.device), action)))
        clones.append(returned[-1].clone())  # now: later steps must not change what it holds
    return Stream(clones, actions, returned)


def check_stream(env: Environment, stream: Stream) -> ContractReport:
    """Checks specs, the discount table and auto-reset on every step of ``stream``.

    Raises:
        AssertionError: naming the step, row and field that break the contract.
    """
    steps = stream.time_steps
    for t, time_step in enumerate(steps):
        check_time_step(env, time_step, where=f"step {t}")
    first = steps[0]
    _expect(
        bool(first.is_first().all()),
        f"reset() gave step types {first.step_type.tolist()}, expected all FIRST",
    )
    _check_first_rows(first, torch.ones_like(first.is_first()), env.action_spec, "reset()")
    for t in range(1, len(steps)):
        _check_transition(env, steps[t - 1], stream.actions[t - 1], steps[t], f"step {t}")
    _check_unchanged(stream)
    return _report(env, stream)


def check_time_step(env: Environment, time_step: TimeStep, where: str = "") -> None:
    """Checks one batched time step against ``env``'s specs, batch size and device.

    Raises:
        AssertionError: a field's dtype, shape, bounds, device or value is wrong.
    """
    batch = env.batch_size
    scalar_specs = {
        "step_type": TensorSpec((), torch.int64),
        "reward": env.reward_spec,
        "discount": TensorSpec((), torch.float32),
        "env_id": TensorSpec((), torch.int64),
    }
    for name, spec in scalar_specs.items():
        _check_leaf(getattr(time_step, name), spec, batch, env.device, f"{where}: {name}")
    _check_values(time_step, batch, where)
    _check_nest(
        time_step.observation, env.observation_spec, batch, env.device, f"{where}: observation"
    )
    _check_nest(time_step.prev_action, env.action_spec, batch, env.device, f"{where}: prev_action")
    info_spec = CompositeSpec(env.env_info_spec)
    _expect(
        set(time_step.env_info) == set(info_spec),
        f"{where}: env_info keys {sorted(time_step.env_info)} differ from env_info_spec "
        f"keys {sorted(info_spec)}",
    )
    _check_nest(dict(time_step.env_info), info_spec, batch, env.device, f"{where}: env_info")


def check_identical_streams(first: Stream, second: Stream) -> None:
    """Checks that two runs recorded exactly the same time steps.

    Raises:
        AssertionError: naming the first step, field and rows that differ.
    """
    _expect(len(first.time_steps) == len(second.time_steps), "the streams differ in length")
    for t, (a, b) in enumerate(zip(first.time_steps, second.time_steps, strict=True)):
        for (path, x), (_, y) in zip(_fields(a), _fields(b), strict=True):
            if not torch.equal(x, y):
                rows = _differing_rows(x, y)
                raise AssertionError(
                    f"two runs with the same seed differ at step {t} in {path} (rows {rows}): "
                    "the environment is not deterministic given its seed"
                )


def check_distinct_env_ids(stream: Stream) -> None:
    """Checks that every two rows of the batch start from different observations.

    Raises:
        AssertionError: two rows' reset observations are equal (the envs of the
            batch were seeded alike).
    """
    leaves = [
        leaf.flatten(1) if leaf.dim() > 1 else leaf[:, None]
        for _, leaf in flatten_with_paths(stream.time_steps[0].observation)
    ]
    rows = torch.cat([leaf.to(torch.float64).cpu() for leaf in leaves], dim=1)
    for i in range(rows.shape[0]):
        for j in range(i + 1, rows.shape[0]):
            _expect(
                not torch.equal(rows[i], rows[j]),
                f"env {i} and env {j} of the batch reset to the same observation: each env of a "
                "batch must be seeded differently (env i with seed + i)",
            )


# -- the clauses ---------------------------------------------------------------------------


def _check_transition(
    env: Environment, previous: TimeStep, action: Nest, current: TimeStep, where: str
) -> None:
    previous_last = previous.is_last().cpu()
    first = current.is_first().cpu()
    for row in range(env.batch_size):
        _expect(
            bool(first[row]) == bool(previous_last[row]),
            f"{where}, env {row}: step type {StepType.name(int(current.step_type[row]))} after "
            f"{StepType.name(int(previous.step_type[row]))}; a step is FIRST exactly when the "
            "previous one was LAST (auto-reset)",
        )
    _check_first_rows(current, first, env.action_spec, where)
    _check_discounts(current, where)
    ongoing = ~first
    for path, sent in flatten_with_paths(action):
        received = _leaf_at(current.prev_action, path).cpu()
        sent = sent.to(received.dtype)
        _expect(
            torch.equal(received[ongoing], sent[ongoing]),
            f"{where}: prev_action{'/' + path if path else ''} is not the action sent to that "
            "row on the previous step",
        )


def _check_first_rows(
    time_step: TimeStep, first: torch.Tensor, action_spec: Spec, where: str
) -> None:
    first = first.cpu()  # the rows of time steps on any device, compared on the CPU
    if not bool(first.any()):
        return
    reward = time_step.reward.cpu()[first]
    discount = time_step.discount.cpu()[first]
    _expect(
        bool((reward == 0).all()), f"{where}: FIRST rows have reward {reward.tolist()}, expected 0"
    )
    _expect(
        bool((discount == 1).all()),
        f"{where}: FIRST rows have discount {discount.tolist()}, expected 1",
    )
    for path, leaf in flatten_with_paths(time_step.prev_action):
        _expect(
            bool((leaf.cpu()[first] == 0).all()),
            f"{where}: prev_action{'/' + path if path else ''} of FIRST rows is not zero",
        )


def _check_discounts(time_step: TimeStep, where: str) -> None:
    step_type = time_step.step_type.cpu()
    discount = time_step.discount.cpu()
    not_last = step_type != _LAST
    _expect(
        bool((discount[not_last] == 1).all()),
        f"{where}: FIRST/MID rows {torch.nonzero(not_last & (discount != 1)).flatten().tolist()} "
        "have a discount other than 1",
    )
    info = time_step.env_info
    if "terminated" not in info or "truncated" not in info:
        return
    terminated = info["terminated"].cpu() != 0
    truncated = info["truncated"].cpu() != 0
    for row in range(step_type.shape[0]):
        row_where = f"{where}, env {row}"
        if step_type[row] == _LAST:
            expected = 0.0 if terminated[row] else 1.0
            _expect(
                float(discount[row]) == expected,
                f"{row_where}: LAST with discount {float(discount[row])} but the env reported "
                f"terminated={bool(terminated[row])}, truncated={bool(truncated[row])}; "
                "termination gives discount 0, truncation alone discount 1 (DESIGN §2)",
            )
        else:
            _expect(
                not (terminated[row] or truncated[row]),
                f"{row_where}: the env reported the end of its episode but the step is "
                f"{StepType.name(int(step_type[row]))}, not LAST",
            )


def _check_unchanged(stream: Stream) -> None:
    for t, (kept, returned) in enumerate(zip(stream.time_steps, stream.returned, strict=True)):
        for (path, x), (_, y) in zip(_fields(kept), _fields(returned), strict=True):
            _expect(
                torch.equal(x, y),
                f"the time step returned at step {t} changed afterwards ({path}): the back end "
                "hands out views of memory it reuses; return fresh tensors",
            )


def _check_values(time_step: TimeStep, batch: int, where: str) -> None:
    step_type = time_step.step_type.cpu()
    _expect(
        bool(((step_type >= _FIRST) & (step_type <= _LAST)).all()),
        f"{where}: step_type {step_type.tolist()} has values outside FIRST/MID/LAST",
    )
    discount = time_step.discount.cpu()
    _expect(
        bool(((discount == 0) | (discount == 1)).all()),
        f"{where}: discount {discount.tolist()} has values other than 0 and 1",
    )
    _expect(bool(torch.isfinite(time_step.reward).all()), f"{where}: reward is not finite")
    env_id = time_step.env_id.cpu()
    _expect(
        torch.equal(env_id, torch.arange(batch)),
        f"{where}: env_id is {env_id.tolist()}, expected {list(range(batch))}",
    )


def _check_nest(value: Nest, spec: Spec, batch: int, device: torch.device, where: str) -> None:
    if isinstance(spec, CompositeSpec):
        _expect(
            isinstance(value, dict) and set(value) == set(spec),
            f"{where}: expected a dict with keys {sorted(spec)}, got "
            f"{sorted(value) if isinstance(value, dict) else type(value).__name__}",
        )
        for key, sub_spec in spec.items():
            _check_nest(value[key], sub_spec, batch, device, f"{where}/{key}")
        return
    _check_leaf(value, spec, batch, device, where)


def _check_leaf(value: Any, spec: TensorSpec, batch: int, device: torch.device, where: str) -> None:
    _expect(
        isinstance(value, torch.Tensor),
        f"{where}: expected a torch.Tensor, got {type(value).__name__}",
    )
    expected_shape = (batch, *spec.shape)
    _expect(
        tuple(value.shape) == expected_shape,
        f"{where}: shape {tuple(value.shape)}, expected {expected_shape} ([B, *spec.shape])",
    )
    _expect(value.dtype == spec.dtype, f"{where}: dtype {value.dtype}, expected {spec.dtype}")
    _expect(
        same_device(value.device, device),
        f"{where}: on {value.device}, expected the env's device {device}",
    )
    if not spec.contains(value):
        low, high = value.min().item(), value.max().item()
        raise AssertionError(f"{where}: values (min {low}, max {high}) lie outside {spec}")


def _report(env: Environment, stream: Stream) -> ContractReport:
    last = torch.stack([t.is_last().cpu() for t in stream.time_steps])
    discount = torch.stack([t.discount.cpu() for t in stream.time_steps])
    return ContractReport(
        batch_size=env.batch_size,
        num_steps=len(stream.actions),
        episodes=int(last.sum()),
        terminations=int((last & (discount == 0)).sum()),
        truncations=int((last & (discount == 1)).sum()),
    )


# -- helpers ---------------------------------------------------------------------------------


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _close_twice(env: Environment) -> None:
    env.close()
    env.close()  # `close` must be idempotent


def _fields(time_step: TimeStep) -> Iterator[tuple[str, torch.Tensor]]:
    for name in ("step_type", "reward", "discount", "env_id"):
        yield name, getattr(time_step, name)
    for prefix in ("observation", "prev_action"):
        for path, leaf in flatten_with_paths(getattr(time_step, prefix)):
            yield f"{prefix}/{path}" if path else prefix, leaf
    for key in sorted(time_step.env_info):
        yield f"env_info/{key}", time_step.env_info[key]


def _leaf_at(nest: Nest, path: str) -> Any:
    for key in path.split("/") if path else ():
        nest = nest[key]
    return nest


def _where_rows(rows: torch.Tensor, if_true: torch.Tensor, if_false: torch.Tensor) -> torch.Tensor:
    return torch.where(rows.view(-1, *([1] * (if_true.dim() - 1))), if_true, if_false)


def _differing_rows(x: torch.Tensor, y: torch.Tensor) -> list[int]:
    if x.shape != y.shape:
        return []
    differs = (x != y).reshape(x.shape[0], -1).any(dim=1)
    return torch.nonzero(differs.cpu()).flatten().tolist()
