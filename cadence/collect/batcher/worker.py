"""The worker side of the `Batcher`: one process running an agent over its slice of the envs.

A worker builds ``n_envs`` environments (env ``k`` seeded ``seed + start + k``) and
one agent, runs the agent once on a blank observation to learn the shapes of its
actions and state, and reports them; then it attaches to the trajectory block
(see `cadence.collect.batcher.shared`) and serves the parent's requests until "close":

- ``("reset", (agent_info, env_info))``: every env starts an episode (a Gymnasium env
  is given its slot's ``env_info`` as ``reset(options={"env_info": ...})``, at this
  reset and at every later one until the next), every slot the agent's initial state;
- ``("execute", (agent_info, weights))``: loads the weights version named (if new),
  then acquires up to ``n_timesteps`` steps of every running slot, writing each
  step into its rows of the trajectory block, and answers with the slots still
  running. In episodic mode a slot whose episode ended stops there (until the
  next reset); in continuing mode its env starts the next episode at once.

Requests and answers go through the worker's pipe (`cadence.envs.channel`); an
exception in env or agent code is answered with its traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from cadence.algorithms.agent import Agent
from cadence.collect.batcher.shared import Specs, TrajectoryBlock, WeightsBlock, row_fields
from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.buffer import TimeStepBuffer, action_row, action_to_numpy
from cadence.envs.channel import Channel
from cadence.envs.environment import PyEnvironment
from cadence.envs.gym_factory import register_missing
from cadence.envs.main_module import MainFree

_FIRST, _LAST = int(StepType.FIRST), int(StepType.LAST)
_CPU = torch.device("cpu")
_STEP_ROOTS = ("observation", "action", "_observation")

Reply = tuple[str, Any]


@dataclasses.dataclass
class WorkerRecipe:
    """What a worker builds its envs and agent from (picklable; see `Batcher`)."""

    create_env: Callable[..., PyEnvironment]
    env_args: dict[str, Any]
    create_agent: Callable[..., Agent]
    agent_args: dict[str, Any]
    n_envs: int
    n_timesteps: int
    seed: int
    agent_seeds: list[int]  # one per worker: what its agent's `Agent.seed` is given
    agent_info: dict[str, torch.Tensor]  # the example, any number of rows
    episodic: bool
    # The parent's registrations of the env ids env_args names (`env_registrations`).
    registrations: tuple[gym.envs.registration.EnvSpec, ...] = ()


def worker_main(
    conn: Connection,
    worker: int,
    start: int,
    recipe: WorkerRecipe | MainFree,
    seed_offset: int,
) -> None:
    """A worker's life: build, report the specs, then serve requests until "close".

    Args:
        conn: the worker's end of its pipe.
        worker: the worker's index.
        start: the index of its first env in the whole batch.
        recipe: its envs and agent (in a `MainFree` when they use the user's script).
        seed_offset: added to every seed (a replacement for a dead worker does not
            replay the first one's episodes).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent alone decides when workers stop
    torch.set_num_threads(1)
    channel = Channel(conn)
    acquirer: Acquirer | None = None
    try:
        reply, acquirer = attempt(lambda: Acquirer(unpack_recipe(recipe), start, seed_offset))
        channel.send(("ok", acquirer.specs) if acquirer is not None else reply)
        if acquirer is None:
            return
        while True:
            command, arg = channel.receive_message()
            if command == "close":
                return
            reply, _ = attempt(functools.partial(acquirer.handle, command, arg))
            channel.send(reply)
    except (EOFError, OSError):
        pass  # the parent went away: nobody is left to report to
    finally:
        if acquirer is not None:
            acquirer.close()


class Acquirer:
    """A worker's envs and agent, and the acquisition loop over them.

    Args:
        recipe: what to build.
        start: the index of the first env in the whole batch.
        seed_offset: added to every seed.
    """

    def __init__(self, recipe: WorkerRecipe, start: int, seed_offset: int):
        self.recipe = recipe
        n = recipe.n_envs
        seed = recipe.seed + seed_offset
        self.envs: list[PyEnvironment] = []
        register_missing(recipe.registrations)  # ids the user's script registered
        for k in range(n):
            self.envs.append(recipe.create_env(seed=seed + start + k, **recipe.env_args))
        # Every worker builds the same agent, whatever its process had drawn before (a
        # Ray worker process may have served others): weights it initializes agree.
        torch.manual_seed(seed)
        self.agent = recipe.create_agent(**recipe.agent_args)
        first = self.envs[0]
        self._steps = TimeStepBuffer(
            first.observation_spec, first.action_spec, first.env_info_spec, n
        )
        self.env_ids = torch.arange(start, start + n)
        self.start = start
        # Seeded before the probe calls it (an agent may build its generator in `seed`),
        # and again after, so that the probe's draws shift none of the acquisitions'.
        agent_seed = recipe.agent_seeds[start // n] + seed_offset
        self.agent.seed(agent_seed)
        self.specs = self._probe(recipe.agent_info)
        self.agent.seed(agent_seed)
        torch.manual_seed(seed + start)  # for agents that draw from torch's own generator
        self.block: TrajectoryBlock | None = None
        self.views: dict[str, np.ndarray] = {}  # this worker's rows of the block
        self.weights: WeightsBlock | None = None
        self.weights_version = -1
        self.running = np.zeros(0, dtype=np.int64)  # local indices of the running slots
        self.agent_info = DictTensor({}, batch_size=n)
        self.state = DictTensor({}, batch_size=0)
        self.observation: DictTensor | None = None

    def handle(self, command: str, arg: Any) -> Any:
        if command == "attach":
            return self._attach(*arg)
        if command == "reset":
            return self._reset(arg)
        if command == "execute":
            return self._execute(*arg)
        raise ValueError(f"unknown batcher worker command {command!r}")

    def close(self) -> None:
        if self.block is not None:
            self.block.close()
        if self.weights is not None:
            self.weights.close()
        self.agent.close()
        for env in self.envs:
            env.close()

    # -- requests ------------------------------------------------------------------------------

    def _attach(self, name: str | None, fields: list[Any]) -> None:
        """Attaches to the shared block ``name`` (its rows of the whole batch), or with
        ``None`` makes a private block of its own ``n_envs`` rows (`rows_written` reads it)."""
        if name is None:
            self.block = TrajectoryBlock(fields, shared=False)
            rows = slice(None)
        else:
            self.block = TrajectoryBlock(fields, name)
            rows = slice(self.start, self.start + self.recipe.n_envs)
        self.views = {key: array[rows] for key, array in self.block.arrays.items()}

    def rows_written(self) -> dict[str, np.ndarray]:
        """This worker's rows of the last acquisition, ``[n_envs, T', ...]`` per step key
        (``T'`` the longest segment), ``[n_envs, ...]`` for the state and ``progress``."""
        longest = int(self.views["progress"].max(initial=0))
        return {
            key: view[:, :longest] if key.split("/")[0] in _STEP_ROOTS else view.copy()
            for key, view in self.views.items()
        }

    def _reset(
        self, infos: tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]
    ) -> None:
        agent_info, env_info = infos
        n = self.recipe.n_envs
        if env_info:
            for k, env in enumerate(self.envs):
                env.set_reset_options({"env_info": {key: v[k] for key, v in env_info.items()}})
        self._steps.write_rows(0, [env.reset() for env in self.envs])
        self.agent_info = _dict_tensor(agent_info, n)
        with torch.no_grad():
            self.state = _sized(self.agent.initial_state(self.agent_info, n), n)
        self.running = np.arange(n)
        self.observation = self._observe(self.running)

    def _execute(
        self, agent_info: dict[str, torch.Tensor] | None, weights: tuple[Any, ...] | None
    ) -> list[int]:
        if weights is not None:
            self._load_weights(*weights)
        if agent_info is not None:
            self.agent_info = _dict_tensor(agent_info, self.recipe.n_envs)
        with torch.no_grad():
            self._acquire()
        return self.running.tolist()

    def _load_weights(self, name: str, fields: list[Any], copy: int, version: int) -> None:
        if version == self.weights_version:
            return
        if self.weights is None or self.weights.name != name:
            if self.weights is not None:
                self.weights.close()
            self.weights = WeightsBlock(fields, name)
        self.agent.update(self.weights.read(copy, version))
        self.weights_version = version

    # -- the acquisition -----------------------------------------------------------------------

    def _acquire(self) -> None:
        """Up to ``n_timesteps`` steps of the running slots, written into the block."""
        views, rows = self.views, self.running
        views["progress"][:] = 0
        state, observation = self.state, self.observation
        agent_info = _rows(self.agent_info, rows, self.recipe.n_envs)
        _write(views, "agent_state/", rows, None, state)
        for t in range(self.recipe.n_timesteps):
            history = self._history(rows, t) if self.agent.require_history() else None
            action, new_state = self.agent(state, observation, agent_info, history)
            _write(views, "observation/", rows, t, observation)
            _write(views, "action/", rows, t, action)
            self._step(rows, action)
            after = self._observe(rows)
            _write(views, "_observation/", rows, t, after)
            views["progress"][rows] = t + 1
            ended = after["done"].numpy()
            observation, state = after, _sized(new_state, rows.size)
            if not ended.any():
                continue
            if self.recipe.episodic:
                keep = torch.from_numpy(~ended)
                rows, state, agent_info = rows[~ended], state[keep], agent_info[keep]
                observation = observation[keep]
                if rows.size == 0:
                    break
            else:
                for row in rows[ended]:
                    self._steps.write(int(row), self.envs[row].reset())
                observation = self._observe(rows)
        self.running, self.state, self.observation = rows, state, observation

    def _step(self, rows: np.ndarray, action: DictTensor) -> None:
        """Steps the envs of ``rows`` with ``action["action"]`` ``[len(rows), ...]``."""
        executed = action["action"]
        nest = executed.td.to_dict() if isinstance(executed, DictTensor) else executed
        nest = action_to_numpy(nest)
        if rows.size == len(self.envs):
            steps = [env.step(action_row(nest, i)) for i, env in enumerate(self.envs)]
            self._steps.write_rows(0, steps)
            return
        for i, row in enumerate(rows):
            self._steps.write(int(row), self.envs[row].step(action_row(nest, i)))

    def _observe(self, rows: np.ndarray) -> DictTensor:
        """The latest time step of the envs of ``rows``, as the agent sees it."""
        observation = observation_of(self._steps.read(), self.env_ids)
        if rows.size == len(self.envs):
            return observation
        return observation[torch.from_numpy(rows)]

    def _history(self, rows: np.ndarray, t: int) -> TemporalDictTensor:
        keys = [k for k in self.views if k.split("/")[0] in _STEP_ROOTS]
        values = {k: torch.from_numpy(self.views[k][rows, :t]) for k in keys}
        return TemporalDictTensor(values, torch.full((rows.size,), t, dtype=torch.int64))

    def _probe(self, example_agent_info: dict[str, torch.Tensor]) -> Specs:
        """Runs the agent once on a blank observation; the fields of what it reads and returns."""
        n = self.recipe.n_envs
        agent_info = DictTensor(
            {k: v[:1].expand(n, *v.shape[1:]).clone() for k, v in example_agent_info.items()},
            batch_size=n,
        )
        observation = observation_of(self._steps.read(), self.env_ids)  # zeros: a FIRST step
        with torch.no_grad():
            state = self.agent.initial_state(agent_info, n)
            history = None
            if self.agent.require_history():
                blank = {
                    f"observation/{k}": v[:, None][:, :0] for k, v in observation.to_dict().items()
                }
                history = TemporalDictTensor(blank, torch.zeros(n, dtype=torch.int64))
            action, new_state = self.agent(state, observation, agent_info, history)
        _check_outputs(action, state, new_state, n)
        return {
            "observation": row_fields(observation.to_dict()),
            "action": row_fields(action.to_dict()),
            "agent_state": row_fields(state.to_dict()),
        }


def observation_of(time_step: TimeStep, env_ids: torch.Tensor) -> DictTensor:
    """A batch of time steps as an agent's observation (the keys of `Agent`)."""
    values: dict[str, Any] = {
        "frame": time_step.observation,
        "reward": time_step.reward,
        "done": time_step.step_type == _LAST,
        "initial_state": time_step.step_type == _FIRST,
        "last_action": time_step.prev_action,
        "step_type": time_step.step_type,
        "discount": time_step.discount,
        "env_id": env_ids,
    }
    if time_step.env_info:
        values["info"] = time_step.env_info
    if _plain(values):
        # The per-step hot path: a TensorDict of these (still checked for batch sizes)
        # costs a fifth of a DictTensor's key-by-key validation, which a nest of str keys
        # without "/" and tensor leaves does not need (it nests exactly as DictTensor would).
        return DictTensor._wrap(TensorDict(values, batch_size=env_ids.shape, device=_CPU))
    return DictTensor(values)


def _plain(values: Mapping[str, Any]) -> bool:
    """Whether ``values`` is a nest of dicts with str keys free of ``/`` and tensor leaves."""
    for key, value in values.items():
        if not isinstance(key, str) or "/" in key:
            return False
        if isinstance(value, Mapping):
            if not value or not _plain(value):
                return False
        elif not isinstance(value, torch.Tensor):
            return False
    return True


def _check_outputs(action: Any, state: DictTensor, new_state: Any, n: int) -> None:
    if not isinstance(action, DictTensor) or "action" not in action:
        raise TypeError(
            "an Agent returns (action, new_state), two DictTensors, and action['action'] is "
            f"what the env executes; got a {type(action).__name__}"
            + (f" with keys {action.keys()}" if isinstance(action, DictTensor) else "")
        )
    if action.n_elems() != n:
        raise ValueError(f"the agent returned {action.n_elems()} actions for {n} slots")
    if not isinstance(new_state, DictTensor) or row_fields(new_state.to_dict()) != row_fields(
        state.to_dict()
    ):
        raise ValueError(
            "the state an Agent returns must have the keys, shapes and dtypes of its "
            f"initial_state: {row_fields(state.to_dict())}, got "
            + (
                str(row_fields(new_state.to_dict()))
                if isinstance(new_state, DictTensor)
                else type(new_state).__name__
            )
        )


def _write(
    views: dict[str, np.ndarray], prefix: str, rows: np.ndarray, t: int | None, values: DictTensor
) -> None:
    """Writes ``values`` ``[len(rows), ...]`` into rows ``rows`` (at step ``t``) of the block."""
    index = slice(None) if rows.size == len(views["progress"]) else rows
    for key, value in values.to_dict().items():
        array = views[prefix + key]
        if t is None:
            array[index] = value.numpy()
        else:
            array[index, t] = value.numpy()


def _sized(state: DictTensor, n: int) -> DictTensor:
    """``state`` with ``n`` rows: rlstructures' stateless agents give ``DictTensor({})``,
    which has none, and the episodic loop selects the rows of the slots still running."""
    if state.empty() and state.n_elems() != n:
        return DictTensor({}, batch_size=n)
    return state


def _rows(values: DictTensor, rows: np.ndarray, n: int) -> DictTensor:
    return values if rows.size == n else values[torch.from_numpy(rows)]


def _dict_tensor(values: dict[str, torch.Tensor] | None, n: int) -> DictTensor:
    return DictTensor(values or {}, batch_size=n)


def unpack_recipe(recipe: WorkerRecipe | MainFree) -> WorkerRecipe:
    """The recipe a worker was sent (what the user's script defines travels by value)."""
    return recipe.unpack() if isinstance(recipe, MainFree) else recipe


def attempt(fn: Callable[[], Any]) -> tuple[Reply, Any]:
    """Runs ``fn``: ``(("ok", result), result)``, or ``(("error", (text, traceback)), None)``."""
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - every failure is the parent's to raise
        text = f"{type(exc).__name__}: {exc}"
        return ("error", (text, "".join(traceback.format_exception(exc)))), None
    return ("ok", result), result
