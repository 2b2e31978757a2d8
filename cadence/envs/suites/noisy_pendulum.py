"""Pendulum with uncontrollable distractors: Denoised MDP's setting, small enough for a CPU.

Pendulum-v1's dynamics and reward run inside; the observation appends ``k`` distractor
signals the action cannot move, each an independent oscillator whose phase advances by
its own angular velocity plus a little noise every step (a Markov process: predictable
from its own past, never from the action). Each oscillator shows as ``(cos φ, sin φ)``,
of the same magnitude as the pendulum's own ``(cos θ, sin θ)``.

- y-type (``num_reward_distractors``): reward-relevant; the reward is
  ``pendulum_reward + reward_scale * sum_i cos φ_i`` over them;
- z-type (``num_noise_distractors``): in the observation only.

Observation layout (``[3 + 2 * (k_y + k_z)]`` float32), also given by `signal_slices`:

| indices | signal |
|---|---|
| 0, 1, 2 | cos θ, sin θ, θ̇ (the pendulum) |
| 3 .. 3 + 2 k_y | (cos φ, sin φ) of each y-type distractor |
| the rest | (cos φ, sin φ) of each z-type distractor |

Each episode draws every oscillator's angular velocity (uniform in
``[min_speed, max_speed]`` rad per step, either direction) and phase from the env's
seeded generator, so ``reset(seed=s)`` reproduces an episode exactly.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class NoisyPendulumEnv(gym.Env):
    """Pendulum-v1 plus uncontrollable oscillators (see the module docstring).

    Args:
        num_reward_distractors: y-type oscillators (added to the reward).
        num_noise_distractors: z-type oscillators (observation only).
        reward_scale: the reward of a y-type oscillator is ``reward_scale * cos φ``.
        min_speed, max_speed: the range of each oscillator's angular velocity (rad/step).
        phase_noise: std of the noise added to each phase per step.
        render_mode: ``None`` or ``"rgb_array"`` (the pendulum alone).

    >>> env = NoisyPendulumEnv(num_reward_distractors=2, num_noise_distractors=4)
    >>> env.reset(seed=0)[0].shape
    (15,)
    >>> NoisyPendulumEnv.signal_slices(2, 4)["reward_distractors"]
    slice(3, 7, None)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        num_reward_distractors: int = 2,
        num_noise_distractors: int = 4,
        reward_scale: float = 3.0,
        min_speed: float = 0.05,
        max_speed: float = 0.3,
        phase_noise: float = 0.05,
        render_mode: str | None = None,
    ):
        if num_reward_distractors < 0 or num_noise_distractors < 0:
            raise ValueError("the numbers of distractors must be >= 0")
        self.num_reward_distractors = num_reward_distractors
        self.num_noise_distractors = num_noise_distractors
        self.reward_scale = reward_scale
        self.min_speed, self.max_speed = min_speed, max_speed
        self.phase_noise = phase_noise
        self.render_mode = render_mode
        self._pendulum = PendulumEnv(render_mode=render_mode)
        count = num_reward_distractors + num_noise_distractors
        high = np.concatenate([self._pendulum.observation_space.high, np.ones(2 * count)]).astype(
            np.float32
        )
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.action_space = self._pendulum.action_space
        self._phase = np.zeros(count)
        self._speed = np.zeros(count)

    @staticmethod
    def signal_slices(
        num_reward_distractors: int = 2, num_noise_distractors: int = 4
    ) -> dict[str, slice]:
        """The observation indices of ``"pendulum"``, ``"reward_distractors"`` (y) and
        ``"noise_distractors"`` (z)."""
        y_end = 3 + 2 * num_reward_distractors
        return {
            "pendulum": slice(0, 3),
            "reward_distractors": slice(3, y_end),
            "noise_distractors": slice(y_end, y_end + 2 * num_noise_distractors),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        pendulum_seed = int(self.np_random.integers(2**31))
        observation, info = self._pendulum.reset(seed=pendulum_seed, options=options)
        count = self._phase.shape[0]
        self._phase = self.np_random.uniform(-np.pi, np.pi, count)
        direction = self.np_random.choice([-1.0, 1.0], count)
        self._speed = direction * self.np_random.uniform(self.min_speed, self.max_speed, count)
        return self._observation(observation), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self._pendulum.step(action)
        noise = self.np_random.normal(0.0, self.phase_noise, self._phase.shape[0])
        self._phase = (self._phase + self._speed + noise + np.pi) % (2 * np.pi) - np.pi
        y_phase = self._phase[: self.num_reward_distractors]
        distraction = self.reward_scale * float(np.cos(y_phase).sum())
        info = {**info, "pendulum_reward": float(reward)}
        return (
            self._observation(observation),
            float(reward) + distraction,
            terminated,
            truncated,
            info,
        )

    def render(self):
        return self._pendulum.render()

    def close(self) -> None:
        self._pendulum.close()

    def _observation(self, pendulum: np.ndarray) -> np.ndarray:
        oscillators = np.stack([np.cos(self._phase), np.sin(self._phase)], 1).reshape(-1)
        return np.concatenate([pendulum, oscillators]).astype(np.float32)
