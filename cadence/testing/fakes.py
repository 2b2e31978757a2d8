"""Small deterministic Gymnasium envs for tests (in the spirit of ``acme/testing/fakes.py``).

- `DictObservationEnv`: ``Dict`` observations and ``Dict`` actions of mixed dtypes;
- `ImageEnv`: small uint8 RGB frames, ``[H, W, 3]`` or channel-first;
- `FailingEnv`: raises at a chosen step (or at construction), for error paths;
- `PacedEnv`: each step takes a set time, for the asynchronous mode's arrival order;
- `FaultyEnv`: a learnable task whose worker raises, exits, segfaults or hangs once,
  for the recovery paths of the parallel back end (registered as
  ``cadence-testing/Faulty-v0`` when this module is imported).

Everything random is drawn from the env's ``np_random``, so one seed gives one
stream and different seeds give different streams; episodes end both by
termination and by truncation. The envs report the Gymnasium flags as numeric
``info`` keys ``terminated`` and ``truncated``, which lets the contract suite
(`cadence.testing.contract`) check the discount table against the truth. All are
module-level classes, so worker processes can build them by name.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["DictObservationEnv", "FailingEnv", "FaultyEnv", "ImageEnv", "PacedEnv"]

FAULTY_ENV_ID = "cadence-testing/Faulty-v0"
Fault = Literal["raise", "exit", "segfault", "hang"]


class DictObservationEnv(gym.Env):
    """A noisy point in 3-D pushed by the agent; ``Dict`` observations and actions.

    Observation: ``position`` (float32 ``[3]`` in ``[-10, 10]``), ``count`` (the
    step index, int64 scalar) and ``flags`` (int8 ``[2]``: the last ``jump`` and
    whether ``x > 0``). Action: ``move`` (float32 ``[3]`` in ``[-1, 1]``) and
    ``jump`` (``Discrete(2)``). Each step terminates with probability
    ``termination_prob``; an episode that survives is truncated after a length
    drawn at reset in ``[max_steps // 2, max_steps]``.

    Args:
        max_steps: the longest episode.
        termination_prob: the chance that a step terminates the episode.

    >>> env = DictObservationEnv()
    >>> sorted(env.reset(seed=0)[0])
    ['count', 'flags', 'position']
    """

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 16, termination_prob: float = 0.05):
        if max_steps < 2:
            raise ValueError(f"max_steps must be >= 2, got {max_steps}")
        self._max_steps = max_steps
        self._termination_prob = termination_prob
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-10.0, 10.0, (3,), np.float32),
                "count": spaces.Discrete(max_steps + 1),
                "flags": spaces.MultiBinary(2),
            }
        )
        self.action_space = spaces.Dict(
            {"move": spaces.Box(-1.0, 1.0, (3,), np.float32), "jump": spaces.Discrete(2)}
        )
        self._position = np.zeros(3, np.float32)
        self._count = 0
        self._jump = 0
        self._limit = max_steps

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-1.0, 1.0, 3).astype(np.float32)
        self._count = 0
        self._jump = 0
        self._limit = int(self.np_random.integers(self._max_steps // 2, self._max_steps + 1))
        return self._observation(), self._info(False, False)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        move = np.clip(np.asarray(action["move"], np.float32), -1.0, 1.0)
        self._jump = int(action["jump"])
        noise = self.np_random.normal(0.0, 0.1, 3).astype(np.float32)
        self._position = np.clip(self._position + 0.5 * move + noise, -10.0, 10.0)
        self._count += 1
        terminated = bool(self.np_random.random() < self._termination_prob)
        truncated = not terminated and self._count >= self._limit
        reward = float(self._jump) - 0.1 * float(np.abs(self._position).sum())
        return self._observation(), reward, terminated, truncated, self._info(terminated, truncated)

    def _observation(self) -> dict[str, np.ndarray]:
        return {
            "position": self._position.copy(),
            "count": np.int64(self._count),
            "flags": np.array([self._jump, self._position[0] > 0], dtype=np.int8),
        }

    def _info(self, terminated: bool, truncated: bool) -> dict[str, Any]:
        return {
            "terminated": terminated,
            "truncated": truncated,
            "distance": float(np.linalg.norm(self._position)),
            "label": "not a number",  # not reported: env_info keeps numeric scalars only
        }


class ImageEnv(gym.Env):
    """A red square walking on a 4 x 4 grid of cells toward a green one, over noise.

    Frames are uint8 RGB of ``size x size`` pixels (``size`` a multiple of 4),
    ``[H, W, 3]`` or, with ``channel_first``, ``[3, H, W]``. Actions: 0 stay,
    1 up, 2 down, 3 left, 4 right. Reaching the green cell terminates (reward 1,
    else -0.01 per step); an episode that does not is truncated after a length
    drawn at reset in ``[max_steps // 2, max_steps]``. The start, the goal and
    the background noise come from the seed.

    Args:
        size: the frame's height and width in pixels.
        channel_first: ``[3, H, W]`` frames instead of ``[H, W, 3]``.
        max_steps: the longest episode.
        render_mode: ``None`` or ``"rgb_array"`` (``render`` returns the ``[H, W, 3]`` frame).

    >>> ImageEnv(size=8).reset(seed=0)[0].shape
    (8, 8, 3)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    _GRID = 4
    _MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])

    def __init__(
        self,
        size: int = 16,
        channel_first: bool = False,
        max_steps: int = 24,
        render_mode: str | None = None,
    ):
        if size < self._GRID or size % self._GRID:
            raise ValueError(f"size must be a positive multiple of {self._GRID}, got {size}")
        self._size = size
        self._channel_first = channel_first
        self._max_steps = max_steps
        self.render_mode = render_mode
        shape = (3, size, size) if channel_first else (size, size, 3)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(len(self._MOVES))
        self._agent = np.zeros(2, np.int64)
        self._goal = np.ones(2, np.int64)
        self._count = 0
        self._limit = max_steps
        self._frame = np.zeros((size, size, 3), np.uint8)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        cells = self.np_random.choice(self._GRID * self._GRID, size=2, replace=False)
        self._agent = np.array(divmod(int(cells[0]), self._GRID))
        self._goal = np.array(divmod(int(cells[1]), self._GRID))
        self._count = 0
        self._limit = int(
            self.np_random.integers(max(1, self._max_steps // 2), self._max_steps + 1)
        )
        return self._observe(), self._info(False, False)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        move = self._MOVES[int(action)]
        self._agent = np.clip(self._agent + move, 0, self._GRID - 1)
        self._count += 1
        terminated = bool(np.array_equal(self._agent, self._goal))
        truncated = not terminated and self._count >= self._limit
        reward = 1.0 if terminated else -0.01
        return self._observe(), reward, terminated, truncated, self._info(terminated, truncated)

    def render(self) -> np.ndarray | None:
        return self._frame.copy() if self.render_mode == "rgb_array" else None

    def _observe(self) -> np.ndarray:
        frame = self.np_random.integers(0, 48, (self._size, self._size, 3), dtype=np.uint8)
        cell = self._size // self._GRID
        for (row, col), channel in ((self._goal, 1), (self._agent, 0)):
            frame[row * cell : (row + 1) * cell, col * cell : (col + 1) * cell, channel] = 255
        self._frame = frame
        return np.ascontiguousarray(frame.transpose(2, 0, 1)) if self._channel_first else frame

    def _info(self, terminated: bool, truncated: bool) -> dict[str, Any]:
        distance = int(np.abs(self._agent - self._goal).sum())
        return {"terminated": terminated, "truncated": truncated, "distance": distance}


class FailingEnv(gym.Env):
    """A trivial env that raises ``RuntimeError`` at step ``fail_at_step`` (or when built).

    Args:
        fail_at_step: the (1-based) step of each episode that raises; ``None`` never does.
        fail_on_init: raise in the constructor instead.

    Raises:
        RuntimeError: at construction when ``fail_on_init``.
    """

    metadata = {"render_modes": []}

    def __init__(self, fail_at_step: int | None = 3, fail_on_init: bool = False):
        if fail_on_init:
            raise RuntimeError("FailingEnv was asked to fail on construction")
        self._fail_at_step = fail_at_step
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._count = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._count = 0
        return self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._count += 1
        if self._count == self._fail_at_step:
            raise RuntimeError(f"FailingEnv failed at step {self._count} as asked")
        observation = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return observation, float(action), False, False, {}


class PacedEnv(gym.Env):
    """A deterministic walk whose every step sleeps ``step_s`` seconds first.

    The observation is ``[position, steps in episode]``: the position starts at a point
    drawn from the seed and moves by the action (``Box(-1, 1, (1,))``); the reward is
    ``-|position|``; episodes are truncated after ``max_steps`` steps. Envs of different
    ``step_s`` in one `ParallelEnvironment` answer in a known order.

    >>> env = PacedEnv(step_s=0.0)
    >>> env.reset(seed=0)[0].shape
    (2,)
    """

    metadata = {"render_modes": []}

    def __init__(self, step_s: float = 0.0, max_steps: int = 7):
        self._step_s = step_s
        self._max_steps = max_steps
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._position = 0.0
        self._count = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._position = float(self.np_random.uniform(-1.0, 1.0))
        self._count = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._step_s:
            time.sleep(self._step_s)
        self._position += float(np.asarray(action, np.float32).reshape(-1)[0])
        self._count += 1
        return self._observation(), -abs(self._position), False, self._count >= self._max_steps, {}

    def _observation(self) -> np.ndarray:
        return np.array([self._position, self._count], np.float32)


class FaultyEnv(gym.Env):
    r"""A learnable task that fails once, in an env worker process, as asked.

    Each step shows a point ``x`` drawn uniformly from ``[-1, 1]^4``; the reward is
    1 for the action ``x[0] > 0`` (``Discrete(2)``), or, with ``continuous``,
    ``1 - (a - x[0])^2`` for an action ``a`` in ``Box(-1, 1, (1,))``; episodes are
    truncated after ``max_steps`` steps. PPO (and SAC, continuous) learn it in a few
    thousand steps; everything random comes from the seed.

    At the env's ``at_step``-th call of ``step`` or ``at_reset``-th call of ``reset``
    (counted from its construction, over episodes; cadence's `GymAdapter` makes one
    of each when it builds the env, to find its info keys: ``at_reset=2`` is the
    run's first reset), or while it is built (``on_build``), ``fault`` happens: ``"raise"`` a
    ``RuntimeError``, ``"exit"`` ``os._exit(3)``, ``"segfault"`` a ``SIGSEGV``,
    ``"hang"`` sleeping for ever. Only in a worker process (a process started by
    ``multiprocessing``): the trainer's own env check and evaluation envs never fail.
    With ``once_file``, only the first env of a run to get there fails: it creates the
    file (atomically: ``O_CREAT | O_EXCL``) just before, and no env fails while the
    file exists, so the restarted worker recovers. Without it, every env fails at its
    ``at_step``-th step, a restarted worker's envs too.

    From the command line, e.g. (the run recovers from the worker's death)::

        cadence train ppo_cartpole env.name=cadence.testing.fakes:cadence-testing/Faulty-v0 \
            env.backend=parallel env.num_workers=2 env.step_timeout_s=5 \
            "env.env_kwargs={fault: exit, at_step: 50, once_file: /tmp/fired}"

    (``env.env_kwargs.fault=exit`` and so on, key by key, works too.)

    Args:
        fault: what happens (``None``: nothing; the env is then a plain task).
        at_step: the call of ``step`` that fails (1-based; ``None``: none).
        at_reset: the call of ``reset`` that fails (1-based; ``None``: none).
        on_build: fail while the env is built instead.
        once_file: a path; see above (``None``: fail every time).
        continuous: a ``Box`` action instead of ``Discrete(2)``.
        max_steps: the episode length.

    >>> env = FaultyEnv(fault="raise", at_step=2)
    >>> env.reset(seed=0)[0].shape
    (4,)
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        fault: Fault | None = None,
        at_step: int | None = 10,
        at_reset: int | None = None,
        on_build: bool = False,
        once_file: str | None = None,
        continuous: bool = False,
        max_steps: int = 100,
    ):
        if fault not in (None, "raise", "exit", "segfault", "hang"):
            raise ValueError(f"fault must be raise, exit, segfault, hang or None, got {fault!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self._fault = fault
        self._at_step = at_step
        self._at_reset = at_reset
        self._once_file = None if once_file is None else os.fspath(once_file)
        self._continuous = continuous
        self._max_steps = max_steps
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = (
            spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)
        )
        self._point = np.zeros(4, np.float32)
        self._count = 0  # steps in this episode
        self._steps = 0  # calls of step, over episodes
        self._resets = 0  # calls of reset
        if on_build:
            self._fail("while built")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._resets += 1
        if self._resets == self._at_reset:
            self._fail(f"at reset {self._resets}")
        self._count = 0
        self._point = self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32)
        return self._point.copy(), {"terminated": False, "truncated": False}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._steps += 1
        if self._steps == self._at_step:
            self._fail(f"at step {self._steps}")
        if self._continuous:
            reward = 1.0 - float(
                (np.asarray(action, np.float32).reshape(-1)[0] - self._point[0]) ** 2
            )
        else:
            reward = float(int(action) == int(self._point[0] > 0))
        self._count += 1
        truncated = self._count >= self._max_steps
        self._point = self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32)
        return (
            self._point.copy(),
            reward,
            False,
            truncated,
            {"terminated": False, "truncated": truncated},
        )

    def _fail(self, when: str) -> None:
        """Does ``fault`` if this is a worker process and the once-file allows it."""
        if self._fault is None or multiprocessing.parent_process() is None:
            return
        if self._once_file is not None:
            try:
                os.close(os.open(self._once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return  # it fired already in this run
        if self._fault == "raise":
            raise RuntimeError(f"FaultyEnv raised {when} as asked")
        if self._fault == "exit":
            os._exit(3)
        if self._fault == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        while True:  # "hang", and a segfault that is slow to land
            time.sleep(3600)


if FAULTY_ENV_ID not in gym.registry:
    # So that `cadence train env.name=cadence.testing.fakes:cadence-testing/Faulty-v0`
    # (and gym.make) find it: the module's one import-time side effect, as for any
    # package that registers Gymnasium envs.
    gym.register(id=FAULTY_ENV_ID, entry_point=FaultyEnv)
