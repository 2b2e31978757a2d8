"""TimeStep wrappers: `PyEnvironment` wrappers that may change step type and discount."""

from __future__ import annotations

from typing import Any

from cadence.data.nest import Nest
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.environment import PyEnvironment, PyEnvironmentWrapper


class TimeLimit(PyEnvironmentWrapper):
    """Ends every episode after ``max_episode_steps`` steps with LAST and discount 1.

    A step that terminates at the limit keeps discount 0: termination wins.
    """

    def __init__(self, env: PyEnvironment, max_episode_steps: int):
        super().__init__(env)
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self._max_episode_steps = max_episode_steps
        self._num_steps = 0
        self._needs_reset = True

    def reset(self) -> TimeStep:
        self._num_steps = 0
        self._needs_reset = False
        return self._env.reset()

    def step(self, action: Nest) -> TimeStep:
        if self._needs_reset:
            return self.reset()
        time_step = self._env.step(action)
        self._num_steps += 1
        if time_step.step_type != StepType.LAST and self._num_steps >= self._max_episode_steps:
            time_step = time_step.replace(step_type=int(StepType.LAST), discount=1.0)
        # The inner env may not know its episode ended: `reset` restarts it explicitly.
        self._needs_reset = time_step.step_type == StepType.LAST
        return time_step

    def _own_state(self) -> Any:
        return {"num_steps": self._num_steps, "needs_reset": self._needs_reset}

    def _set_own_state(self, state: Any) -> None:
        self._num_steps = state["num_steps"]
        self._needs_reset = state["needs_reset"]
