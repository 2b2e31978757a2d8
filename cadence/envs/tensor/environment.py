"""`TensorEnvironment`: the `Environment` contract for a batch of envs stepped in torch.

An env family supplies only its physics as a `TensorDynamics` (dynamics, reward,
termination, reset distribution, specs, drawing); `TensorEnvironment` does the
episode bookkeeping that every family shares, as whole-batch tensor operations
with no host synchronisation and no per-env Python:

- auto-reset (DESIGN §2): a row whose previous step was LAST is reset and
  returned as FIRST with reward 0, discount 1 and a zero ``prev_action``; the
  action passed for it is ignored;
- termination gives LAST with discount 0; reaching ``max_episode_steps`` without
  terminating gives LAST with discount 1 (termination wins when both happen);
- seeding and `get_state`/`set_state` of everything, the episode counters included.

Seeding (DESIGN §3): env ``i`` of the batch is seeded ``seed + i``. Each env
counts the episodes it has started, and the reset state of its episode ``e``
is drawn from ``U[0, 1)`` numbers that are a pure function of ``(seed + i, e)``:
the outputs ``e * k`` .. ``e * k + k - 1`` of a SplitMix64 stream keyed by
``seed + i`` (``k = state_size``; see `cadence.envs.tensor.seeding`). So env
``i``'s episodes depend neither on the batch size nor on when the other rows
reset, env ``i`` of a batch seeded ``s`` replays env ``j`` of a batch seeded
``s + i - j``, and the same seed gives the same start states on every device.
`reset` starts a new episode in every row (it does not replay episode 0). The
numbers differ from those a Gymnasium env seeded ``seed + i`` draws (NumPy's
PCG64); the reset distribution is the same.

On the CPU only the rows that reset compute their start states, in NumPy (a
step resets a handful of rows, so the cost is per operation, and NumPy's are
cheaper than torch's); on an accelerator every row computes them every step in
torch and a ``where`` keeps the resetting rows', so that no step asks the
device how many rows reset. Both give the same numbers.

On the CPU, batches up to `SINGLE_THREAD_MAX_ENVS` step on the calling thread
alone: ATen forks its vectorised math (``sin``, ``cos``, ``exp``) into OpenMP
threads from 2048 elements on, and for rows this short the fork costs more than it
saves (35x slower CartPole steps at 4096 envs on a busy 2-core machine).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from cadence.data.specs import TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.environment import Environment
from cadence.envs.errors import EnvStateMismatchError
from cadence.envs.tensor import seeding

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
# ATen's grain size: below it, ordinary element-wise CPU ops never fork into threads either.
SINGLE_THREAD_MAX_ENVS = 32768


class TensorDynamics(Protocol):
    """The physics of one env family for a batch of physical states.

    States are component-major, ``[state_size, B]``, so that each component
    (``x``, ``theta``, ...) is a contiguous row and the element-wise physics runs
    on contiguous memory. Everything stays on the states' device; nothing here
    may synchronise with the host, except `render`.
    """

    @property
    def observation_spec(self) -> TensorSpec: ...

    @property
    def action_spec(self) -> TensorSpec: ...

    @property
    def state_size(self) -> int: ...

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the physical state."""

    @property
    def max_episode_steps(self) -> int:
        """Gymnasium's registered time limit for this family."""

    def initial_state(self, uniform: torch.Tensor) -> torch.Tensor:
        """Reset states ``[state_size, R]`` made from ``uniform`` ``[state_size, R]``.

        ``uniform`` holds independent ``U[0, 1)`` numbers in the dynamics' dtype, on
        the envs' device; a family whose reset needs another distribution derives
        it from them (e.g. by its inverse CDF). The result must be a fresh tensor.
        """

    def step(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Applies ``action`` ``[B, *action_shape]`` to ``state`` ``[state_size, B]``.

        Returns:
            ``(next_state [state_size, B], reward [B], terminated [B] bool)``, all fresh.
        """

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        """A fresh, contiguous ``[B, *obs_shape]`` float32 observation of ``state`` ``[state_size, B]``."""

    def render(self, state: np.ndarray) -> np.ndarray:
        """An RGB frame ``[H, W, 3]`` uint8 of one env's state ``[state_size]``."""


class TensorEnvironment(Environment):
    """A batch of ``num_envs`` envs of one `TensorDynamics`, all stepped at once on ``device``.

    Every returned tensor is freshly allocated, so callers may keep time steps.

    Args:
        dynamics: the env family's physics.
        num_envs: the batch size.
        seed: env ``i`` is seeded ``seed + i`` (see the module docstring).
        device: where the envs run and time steps are delivered.
        max_episode_steps: the time limit; ``None`` uses ``dynamics.max_episode_steps``.

    >>> from cadence.envs.tensor.cartpole import CartPoleDynamics
    >>> env = TensorEnvironment(CartPoleDynamics(), num_envs=8, seed=0)
    >>> env.step(env.action_spec.sample((8,))).observation.shape
    torch.Size([8, 4])
    """

    def __init__(
        self,
        dynamics: TensorDynamics,
        num_envs: int,
        seed: int = 0,
        device: Any = "cpu",
        max_episode_steps: int | None = None,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        limit = dynamics.max_episode_steps if max_episode_steps is None else max_episode_steps
        if limit < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {limit}")
        self._dynamics = dynamics
        self._num_envs = num_envs
        self._device = torch.device(device)
        self._max_episode_steps = int(limit)
        self._env_id = torch.arange(num_envs, device=self._device)
        self._streams = seeding.EpisodeStreams(
            self._env_id + seed, dynamics.state_size, dynamics.dtype
        )
        # Episodes each env has started: episode e of env i starts from uniforms (seed + i, e).
        self._episodes = torch.zeros(num_envs, dtype=torch.int64, device=self._device)
        self._reset_by_index = self._streams.supports_numpy
        self._action_shape = (num_envs, *dynamics.action_spec.shape)
        self._state = torch.zeros(
            dynamics.state_size, num_envs, dtype=dynamics.dtype, device=self._device
        )
        self._episode_steps = torch.zeros(num_envs, dtype=torch.int64, device=self._device)
        # Every row starts "after a LAST": a `step` before any `reset` resets them all.
        self._needs_reset = torch.ones(num_envs, dtype=torch.bool, device=self._device)
        self._single_thread = self._device.type == "cpu" and num_envs <= SINGLE_THREAD_MAX_ENVS

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self._dynamics).__name__}, num_envs={self._num_envs}, "
            f"max_episode_steps={self._max_episode_steps}, device={self._device})"
        )

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def observation_spec(self) -> TensorSpec:
        return self._dynamics.observation_spec

    @property
    def action_spec(self) -> TensorSpec:
        return self._dynamics.action_spec

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def dynamics(self) -> TensorDynamics:
        return self._dynamics

    @property
    def max_episode_steps(self) -> int:
        return self._max_episode_steps

    @property
    def physical_state(self) -> torch.Tensor:
        """A copy of the physical states ``[B, state_size]`` (in the dynamics' dtype)."""
        return self._state.T.clone(memory_format=torch.contiguous_format)

    def reset(self) -> TimeStep:
        self._state = self._initial_states(self._env_id)
        self._episodes.add_(1)
        self._episode_steps = torch.zeros_like(self._episode_steps)
        self._needs_reset = torch.zeros_like(self._needs_reset)
        first = torch.full((self._num_envs,), _FIRST, dtype=torch.int64, device=self._device)
        return TimeStep(
            step_type=first,
            reward=torch.zeros(self._num_envs, device=self._device),
            discount=torch.ones(self._num_envs, device=self._device),
            observation=self._dynamics.observe(self._state),
            prev_action=self.action_spec.zeros((self._num_envs,), self._device),
            env_id=self._env_id.clone(),
        )

    def step(self, action: torch.Tensor) -> TimeStep:
        """Steps every env with ``action`` ``[B, *action_shape]``; rows after a LAST reset.

        Raises:
            ValueError: ``action`` does not have shape ``[B, *action_spec.shape]``.
        """
        threads = torch.get_num_threads() if self._single_thread else 1
        if threads == 1:
            return self._step(action)
        # OpenMP keeps the count per thread, so threads already running torch keep theirs
        # (only one that runs its first torch op meanwhile would start from 1).
        torch.set_num_threads(1)
        try:
            return self._step(action)
        finally:
            torch.set_num_threads(threads)

    def step_in_graph(self, action: torch.Tensor) -> TimeStep:
        """`step` for a ``torch.compile`` graph (a compiled unroll step): the same numbers,
        the resets in torch ops (the NumPy path cannot be traced), the caller's threads."""
        return self._step(action)

    def graph_state(self) -> dict[str, torch.Tensor]:
        """The tensors a step reads and writes, themselves (not copies): the physical
        states and the step, reset and episode counters.

        A compiled unroll that replays as CUDA graphs takes them as inputs and returns
        the stepped ones, which `bind_graph_state` puts back: a replay runs on its own
        copies of the inputs and none of the Python that rebinds attributes, so the
        env's state must pass through the graph's inputs and outputs. (A plain compiled
        unroll reads and rebinds the attributes, which costs fewer inputs.)"""
        return {
            "state": self._state,
            "episode_steps": self._episode_steps,
            "needs_reset": self._needs_reset,
            "episodes": self._episodes,
        }

    def bind_graph_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Makes ``tensors`` (a `graph_state`, e.g. a compiled unroll's output) this env's
        state; they are used, not copied."""
        self._state = tensors["state"]
        self._episode_steps = tensors["episode_steps"]
        self._needs_reset = tensors["needs_reset"]
        self._episodes = tensors["episodes"]

    def _step(self, action: torch.Tensor) -> TimeStep:
        action = self._check_action(action)
        resetting = self._needs_reset
        next_state, reward, terminated = self._dynamics.step(self._state, action)
        self._state = self._reset_rows(next_state, resetting)
        # The counters are private (get_state copies them), so update them in place.
        self._episode_steps.add_(1).masked_fill_(resetting, 0)
        terminated.masked_fill_(resetting, False)
        last = terminated | (self._episode_steps >= self._max_episode_steps)
        self._needs_reset = last
        return TimeStep(
            step_type=_step_types(resetting, last),
            reward=reward.masked_fill_(resetting, 0.0).to(torch.float32),
            discount=(~terminated).to(torch.float32),
            observation=self._dynamics.observe(self._state),
            prev_action=action.masked_fill(_expand_rows(resetting, action), 0),
            env_id=self._env_id.clone(),
        )

    def _reset_rows(self, state: torch.Tensor, resetting: torch.Tensor) -> torch.Tensor:
        """``state`` ``[state_size, B]`` with the ``resetting`` rows ``[B]`` in fresh episodes."""
        if not self._reset_by_index or torch.compiler.is_compiling():
            state = torch.where(resetting, self._initial_states(self._env_id), state)
            self._episodes.add_(resetting)
            return state
        # The CPU path, in NumPy: each op here is on a handful of rows, so its cost is
        # per operation, and a NumPy operation costs a fraction of a torch one.
        rows = np.flatnonzero(resetting.numpy())
        if rows.size:
            episodes = self._episodes.numpy()  # a view: the counters advance in place
            uniform = self._streams.uniforms_numpy(rows, episodes[rows])
            episodes[rows] += 1
            fresh = self._dynamics.initial_state(torch.from_numpy(uniform))
            state.index_copy_(1, torch.from_numpy(rows), fresh)
        return state

    def _initial_states(self, rows: torch.Tensor) -> torch.Tensor:
        """The start states ``[state_size, R]`` of the next episode of envs ``rows`` ``[R]``."""
        uniform = self._streams.uniforms(rows, self._episodes[rows])
        return self._dynamics.initial_state(uniform)

    def set_physical_state(self, state: torch.Tensor) -> None:
        """Puts every env in physical state ``state`` ``[B, state_size]`` mid-episode.

        The next `step` continues the episodes from ``state`` (none resets);
        the step counters are kept. Tests use it to start this env and a
        Gymnasium env from the same state.
        """
        expected = (self._num_envs, self._dynamics.state_size)
        if tuple(state.shape) != expected:
            raise ValueError(f"state must have shape {expected}, got {tuple(state.shape)}")
        self._state = state.T.to(self._device, self._dynamics.dtype).clone(
            memory_format=torch.contiguous_format
        )
        self._needs_reset = torch.zeros_like(self._needs_reset)

    def render(self, env_index: int = 0) -> np.ndarray:
        """An RGB frame ``[H, W, 3]`` uint8 of env ``env_index``'s current state."""
        return self._dynamics.render(self._state[:, env_index].cpu().numpy())

    def get_state(self) -> dict[str, torch.Tensor]:
        """Copies, on the CPU, of the states ``[B, state_size]``, step, reset and episode counters."""
        return {
            "state": self._state.T.cpu().clone(memory_format=torch.contiguous_format),
            "episode_steps": self._episode_steps.cpu().clone(),
            "needs_reset": self._needs_reset.cpu().clone(),
            "episodes": self._episodes.cpu().clone(),
        }

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restores a `get_state` snapshot; the next `step` continues exactly from it.

        Raises:
            EnvStateMismatchError: ``state`` was saved by a Gymnasium back end.
        """
        if not isinstance(state, dict) or "state" not in state:
            raise EnvStateMismatchError(
                f"the env state is a {type(state).__name__}, not a tensor-native env's snapshot "
                "(it was saved by a Gymnasium back end: serial, thread or parallel)"
            )
        if "episodes" not in state:
            raise ValueError(
                "the snapshot has no 'episodes' counters (it predates per-env seeding); "
                "start the envs afresh with reset() instead of restoring it"
            )
        expected = (self._num_envs, self._dynamics.state_size)
        if tuple(state["state"].shape) != expected:
            raise ValueError(
                f"the snapshot holds states {tuple(state['state'].shape)}, this env has {expected}"
            )
        self._state = (
            state["state"]
            .T.to(self._device, self._dynamics.dtype)
            .clone(memory_format=torch.contiguous_format)
        )
        self._episode_steps = state["episode_steps"].to(self._device, copy=True)
        self._needs_reset = state["needs_reset"].to(self._device, copy=True)
        self._episodes = state["episodes"].to(self._device, copy=True)

    def _check_action(self, action: torch.Tensor) -> torch.Tensor:
        if tuple(action.shape) != self._action_shape:
            raise ValueError(
                f"action must have shape {self._action_shape} (batch, *action_spec.shape), "
                f"got {tuple(action.shape)}"
            )
        return action.to(self._device, self.action_spec.dtype)


def check_render_mode(render_mode: str | None) -> None:
    """Accepts the ``render_mode`` a Gymnasium ``env_kwargs`` may carry, if it is an RGB one.

    Raises:
        ValueError: any mode other than ``None`` or ``"rgb_array"`` (there is no window).
    """
    if render_mode not in (None, "rgb_array"):
        raise ValueError(
            f"tensor-native envs support only render_mode='rgb_array' (frames come from "
            f"env.render(i)), got render_mode={render_mode!r}"
        )


def _step_types(resetting: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """FIRST where a row reset, else LAST where its episode ended, else MID: ``[B]`` int64."""
    # MID + 1 is LAST; a resetting row is never `last`, so FIRST overwrites only MIDs.
    return last.to(torch.int64).add_(_MID).masked_fill_(resetting, _FIRST)


def _expand_rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` ``[B]`` viewed to broadcast against ``like`` ``[B, ...]``."""
    return mask.view(-1, *([1] * (like.dim() - 1)))
