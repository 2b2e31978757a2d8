"""Pendulum-v1 in torch: Gymnasium's ``PendulumEnv`` dynamics for a batch of pendulums.

Constants, the clipped torque, the cost ``angle_normalize(th)^2 + 0.1 thdot^2 +
0.001 u^2``, the observation ``(cos th, sin th, thdot)``, the reset distribution
(``th ~ U[-pi, pi]``, ``thdot ~ U[-1, 1]``) and the 200-step limit are those of
``gymnasium/envs/classic_control/pendulum.py``. The pendulum never terminates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from cadence.data.specs import BoundedTensorSpec
from cadence.envs.tensor import drawing
from cadence.envs.tensor.environment import TensorEnvironment, check_render_mode

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
MASS = 1.0
LENGTH = 1.0
RESET_ANGLE, RESET_SPEED = math.pi, 1.0

_SCREEN_SIZE = 500
_ROD_COLOR = (204, 77, 77)


class PendulumDynamics:
    """Batched pendulum physics; the state is ``[B, 2]``: theta (0 is upright), theta_dot.

    Args:
        dtype: the dtype of the physical state (float64 to match Gymnasium exactly).
        g: gravity, Gymnasium's ``g`` option.
    """

    state_size = 2
    max_episode_steps = 200

    def __init__(self, dtype: torch.dtype = torch.float32, g: float = 10.0):
        self.dtype = dtype
        self.g = g
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        self.observation_spec = BoundedTensorSpec((3,), torch.float32, -high, high)
        self.action_spec = BoundedTensorSpec((1,), torch.float32, -MAX_TORQUE, MAX_TORQUE)

    def initial_state(self, uniform: torch.Tensor) -> torch.Tensor:
        """Gymnasium's reset distribution (``th ~ U[-pi, pi]``, ``thdot ~ U[-1, 1]``) from ``U[0, 1)``."""
        theta = uniform[0].mul(2 * RESET_ANGLE).sub_(RESET_ANGLE)
        theta_dot = uniform[1].mul(2 * RESET_SPEED).sub_(RESET_SPEED)
        return torch.stack((theta, theta_dot))

    def step(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for torques ``[B, 1]`` (clipped to ``[-2, 2]``); see `TensorDynamics`."""
        theta, theta_dot = state
        u = action[:, 0].clamp(-MAX_TORQUE, MAX_TORQUE)
        # Gymnasium computes the torque terms in the action's float32 (NumPy 2 keeps
        # float32 * Python float in float32); do the same so float64 runs agree to rounding.
        effort_cost = u.square().mul_(0.001).to(self.dtype)
        torque_acc = u.mul_(3.0 / (MASS * LENGTH**2)).to(self.dtype)
        costs = (
            angle_normalize(theta).square_().add_(theta_dot.square().mul_(0.1)).add_(effort_cost)
        )
        gravity_acc = torch.sin(theta).mul_(3 * self.g / (2 * LENGTH))
        next_state = torch.empty_like(state)
        new_theta_dot = (
            gravity_acc.add_(torque_acc).mul_(DT).add_(theta_dot).clamp_(-MAX_SPEED, MAX_SPEED)
        )
        next_state[1] = new_theta_dot
        torch.add(theta, new_theta_dot.mul_(DT), out=next_state[0])
        terminated = torch.zeros(state.shape[1], dtype=torch.bool, device=state.device)
        return next_state, costs.neg_(), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), dim=1).to(torch.float32)

    def render(self, state: np.ndarray) -> np.ndarray:
        """A 500x500 frame: the rod from the pivot, upright at theta 0, scaled as Gymnasium's."""
        theta = float(state[0])
        scale = _SCREEN_SIZE / (2.2 * 2)
        center = (_SCREEN_SIZE / 2, _SCREEN_SIZE / 2)
        rod_length, rod_width = LENGTH * scale, 0.2 * scale
        # Positive theta turns the rod counter-clockwise on screen, as in Gymnasium.
        tip = (center[0] - rod_length * math.sin(theta), center[1] - rod_length * math.cos(theta))
        frame = drawing.blank_canvas(_SCREEN_SIZE, _SCREEN_SIZE)
        drawing.fill_convex_polygon(
            frame, drawing.thick_segment(center, tip, rod_width), _ROD_COLOR
        )
        drawing.fill_circle(frame, center, rod_width / 2, _ROD_COLOR)
        drawing.fill_circle(frame, tip, rod_width / 2, _ROD_COLOR)
        drawing.fill_circle(frame, center, 0.05 * scale, drawing.BLACK)
        return frame


def angle_normalize(theta: torch.Tensor) -> torch.Tensor:
    """``theta`` wrapped into ``[-pi, pi)``, as Gymnasium's ``angle_normalize``."""
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


def make_pendulum(
    num_envs: int,
    *,
    seed: int = 0,
    device: Any = "cpu",
    max_episode_steps: int | None = None,
    dtype: torch.dtype = torch.float32,
    g: float = 10.0,
    render_mode: str | None = None,
) -> TensorEnvironment:
    """A batch of tensor-native ``Pendulum-v1`` envs.

    Args:
        num_envs: the batch size.
        seed: env ``i`` is seeded ``seed + i`` (see `TensorEnvironment`).
        device: where the envs run.
        max_episode_steps: the time limit (default Gymnasium's 200).
        dtype: the physical state's dtype.
        g: gravity (Gymnasium's default 10.0).
        render_mode: accepted for Gymnasium compatibility; only ``"rgb_array"``
            (or ``None``) is supported, and frames come from ``env.render(i)``.

    >>> env = make_pendulum(4, seed=0)
    >>> env.reset().observation.shape
    torch.Size([4, 3])
    """
    check_render_mode(render_mode)
    return TensorEnvironment(PendulumDynamics(dtype, g), num_envs, seed, device, max_episode_steps)
